import { StoreError, StoreUnavailableError } from '../../errors.js';
import type { GuardStats, StoreGuard } from '../index.js';
import { Rollback } from '../transaction.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './index.js';

/**
 * The idempotency guard over PostgreSQL: BEGIN, `INSERT … ON CONFLICT DO NOTHING` of the
 * `(message_id, consumer)` marker, the handler with the same client, COMMIT. A second
 * delivery of the same message waits on the first one's uncommitted marker, then finds
 * it (duplicate: skipped) or, if the first rolled back, inserts it and runs.
 */
export class PostgresIdempotencyGuard<C extends PgClient> implements StoreGuard<C> {
  readonly stats: GuardStats = { done: 0, duplicate: 0, failed: 0, unavailable: 0 };

  constructor(private readonly store: PostgresInternals<C>) {}

  async run(messageId: string, consumer: string, work: (tx: C) => Promise<void>): Promise<'done' | 'duplicate'> {
    // Sent with BEGIN in one round trip, so the guard costs no round trip of its own:
    // the handler needed BEGIN anyway.
    const insert = `INSERT INTO ${this.store.tables.processed} (message_id, consumer) VALUES (${sqlLiteral(messageId)}, ${sqlLiteral(consumer)}) ON CONFLICT DO NOTHING`;
    try {
      const outcome = await this.store.transaction(
        async (client, inserted) => {
          // Fail closed: a driver or wrapper that reports no row count must not turn a
          // duplicate into a second run of the handler.
          const rows = inserted?.rowCount;
          if (rows === 0) throw new Rollback('duplicate' as const);
          if (rows !== 1) throw new StoreError('postgres', `The idempotency marker insert reported ${String(rows)} rows instead of 0 or 1, so a duplicate cannot be told from new work; the message was not handled. Use pg's own client (or one that reports rowCount for multi-statement queries).`);
          await work(client);
          return 'done' as const;
        },
        'run an idempotent handler',
        insert,
      );
      this.stats[outcome]++;
      return outcome;
    } catch (error) {
      if (error instanceof StoreUnavailableError) this.stats.unavailable++;
      else this.stats.failed++;
      throw error;
    }
  }
}

/**
 * A string as an SQL literal, as node-postgres' `escapeLiteral` writes it: quotes doubled,
 * and backslashes doubled under `E''`, so the value is the same whatever
 * `standard_conforming_strings` says.
 */
function sqlLiteral(value: string): string {
  const body = value.replace(/'/g, "''").replace(/\\/g, '\\\\');
  return value.includes('\\') ? `E'${body}'` : `'${body}'`;
}
