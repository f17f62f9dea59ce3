import type { PruneDriver, PruneTable } from '../prune.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

/**
 * Deletes old rows a batch at a time, each batch one statement (its own transaction).
 * Only row locks are taken, and rows locked by someone else are skipped, so nothing
 * waits on the pruner and the pruner waits on nothing.
 */
export class PostgresPruneDriver<C extends PgClient> implements PruneDriver {
  constructor(private readonly store: PostgresInternals<C>) {}

  pruneBatch(table: PruneTable, before: Date, limit: number): Promise<number> {
    const t = this.store.tables;
    const sql = {
      markers: `DELETE FROM ${t.processed} WHERE (message_id, consumer) IN (SELECT message_id, consumer FROM ${t.processed} WHERE processed_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      outbox: `DELETE FROM ${t.outbox} WHERE id IN (SELECT id FROM ${t.outbox} WHERE sent_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      audit: `DELETE FROM ${t.retryAudit} WHERE id IN (SELECT id FROM ${t.retryAudit} WHERE at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    }[table];
    return this.store.withClient(async (client) => (await this.store.query(client, sql, [before, limit], 'prune old rows')).rowCount ?? 0, 'prune old rows');
  }
}
