import { checkConsumerName } from '../../breaker/control.js';
import { shareReason, type BreakerShare, type BreakerStateRow } from '../../breaker/share.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

interface Row {
  consumer: string;
  open: number;
  reason: string;
  since: number;
  opened_by: string;
  closed_at: number | null;
  closed_by: string | null;
}

/** Shared breaker state in the SQLite store's `<prefix>breaker_state`; times in Unix milliseconds. */
export class SqliteBreakers<DB extends SqliteDatabase> implements BreakerShare {
  constructor(private readonly store: SqliteInternals<DB>) {}

  async open(consumer: string, reason: string, by: string, since: Date): Promise<boolean> {
    const t = this.store.tables.breakers;
    // Not over an open row (the first opening stays), nor over a close newer than this opening.
    const sql = `INSERT INTO ${t} (consumer, open, reason, since, opened_by) VALUES (?, 1, ?, ?, ?) ON CONFLICT (consumer) DO UPDATE SET open = 1, reason = excluded.reason, since = excluded.since, opened_by = excluded.opened_by, closed_at = NULL, closed_by = NULL WHERE open = 0 AND (closed_at IS NULL OR closed_at < excluded.since)`;
    return this.store.write((db) => Number(this.store.statement(db, sql).run(checkConsumerName(consumer), shareReason(reason), since.getTime(), by.slice(0, 200)).changes) > 0, 'share a breaker opening');
  }

  async close(consumer: string, by: string): Promise<boolean> {
    const sql = `UPDATE ${this.store.tables.breakers} SET open = 0, closed_at = ?, closed_by = ? WHERE consumer = ? AND open = 1`;
    return this.store.write((db) => Number(this.store.statement(db, sql).run(Date.now(), by.slice(0, 200), checkConsumerName(consumer)).changes) > 0, 'share a breaker closing');
  }

  async read(consumer?: string): Promise<BreakerStateRow[]> {
    const t = this.store.tables.breakers;
    const sql = `SELECT consumer, open, reason, since, opened_by, closed_at, closed_by FROM ${t}${consumer === undefined ? '' : ' WHERE consumer = ?'} ORDER BY consumer LIMIT 10000`;
    const rows = await this.store.read((db) => this.store.statement(db, sql).all(...(consumer === undefined ? [] : [consumer])) as Row[], 'read shared breakers');
    return rows.map((r) => ({
      consumer: r.consumer,
      open: Number(r.open) === 1,
      reason: r.reason,
      since: new Date(Number(r.since)),
      openedBy: r.opened_by,
      closedAt: r.closed_at === null ? undefined : new Date(Number(r.closed_at)),
      closedBy: r.closed_by ?? undefined,
    }));
  }
}
