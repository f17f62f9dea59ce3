import { StoreUnavailableError } from '../../errors.js';
import type { GuardStats, StoreGuard } from '../index.js';
import { Rollback } from '../transaction.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './index.js';

/**
 * The idempotency guard over SQLite: BEGIN IMMEDIATE, insert the `(message_id, consumer)`
 * marker (a duplicate inserts nothing: roll back, skip the handler), run the handler with
 * the database, COMMIT both. A handler that throws rolls the marker back with its writes.
 */
export class SqliteIdempotencyGuard<DB extends SqliteDatabase> implements StoreGuard<DB> {
  readonly stats: GuardStats = { done: 0, duplicate: 0, failed: 0, unavailable: 0 };

  constructor(private readonly store: SqliteInternals<DB>) {}

  async run(messageId: string, consumer: string, work: (tx: DB) => Promise<void>): Promise<'done' | 'duplicate'> {
    const insert = `INSERT INTO ${this.store.tables.processed} (message_id, consumer, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`;
    try {
      const outcome = await this.store.write(async (db) => {
        const { changes } = this.store.statement(db, insert).run(messageId, consumer, Date.now());
        if (Number(changes) === 0) throw new Rollback('duplicate' as const);
        await work(db);
        return 'done' as const;
      }, 'run an idempotent handler');
      this.stats[outcome]++;
      return outcome;
    } catch (error) {
      if (error instanceof StoreUnavailableError) this.stats.unavailable++;
      else this.stats.failed++;
      throw error;
    }
  }
}
