import type { PruneDriver, PruneTable } from '../prune.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

/** Deletes old rows a batch at a time, each batch one short write transaction. */
export class SqlitePruneDriver<DB extends SqliteDatabase> implements PruneDriver {
  constructor(private readonly store: SqliteInternals<DB>) {}

  pruneBatch(table: PruneTable, before: Date, limit: number): Promise<number> {
    const t = this.store.tables;
    const sql = {
      markers: `DELETE FROM ${t.processed} WHERE (message_id, consumer) IN (SELECT message_id, consumer FROM ${t.processed} WHERE processed_at < ? LIMIT ?)`,
      outbox: `DELETE FROM ${t.outbox} WHERE id IN (SELECT id FROM ${t.outbox} WHERE sent_at IS NOT NULL AND sent_at < ? LIMIT ?)`,
      audit: `DELETE FROM ${t.retryAudit} WHERE id IN (SELECT id FROM ${t.retryAudit} WHERE at < ? LIMIT ?)`,
    }[table];
    return this.store.write((db) => Number(this.store.statement(db, sql).run(before.getTime(), limit).changes), 'prune old rows');
  }
}
