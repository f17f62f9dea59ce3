import { checkConsumerName, checkReason, type ConsumerControl, type ConsumerPauseRow } from '../../breaker/control.js';
import { checkActor } from '../../breaker/index.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

interface Row {
  consumer: string;
  paused: number;
  reason: string;
  actor: string;
  since: number;
  resumed_by: string | null;
  resumed_at: number | null;
}

/** Hand pauses in the SQLite store's `<prefix>consumer_control`; times in Unix milliseconds. */
export class SqliteControl<DB extends SqliteDatabase> implements ConsumerControl {
  constructor(private readonly store: SqliteInternals<DB>) {}

  async pause(consumer: string, reason: string, actor: string): Promise<boolean> {
    const c = checkConsumerName(consumer);
    const r = checkReason(reason);
    const a = checkActor(actor);
    const t = this.store.tables.control;
    const sql = `INSERT INTO ${t} (consumer, paused, reason, actor, since) VALUES (?, 1, ?, ?, ?) ON CONFLICT (consumer) DO UPDATE SET paused = 1, reason = excluded.reason, actor = excluded.actor, since = excluded.since, resumed_by = NULL, resumed_at = NULL WHERE paused = 0`;
    return this.store.write((db) => Number(this.store.statement(db, sql).run(c, r, a, Date.now()).changes) > 0, 'pause a consumer');
  }

  async resume(consumer: string, actor: string): Promise<boolean> {
    const c = checkConsumerName(consumer);
    const a = checkActor(actor);
    const sql = `UPDATE ${this.store.tables.control} SET paused = 0, resumed_by = ?, resumed_at = ? WHERE consumer = ? AND paused = 1`;
    return this.store.write((db) => Number(this.store.statement(db, sql).run(a, Date.now(), c).changes) > 0, 'resume a consumer');
  }

  async read(consumer?: string): Promise<ConsumerPauseRow[]> {
    const t = this.store.tables.control;
    const sql = `SELECT consumer, paused, reason, actor, since, resumed_by, resumed_at FROM ${t}${consumer === undefined ? '' : ' WHERE consumer = ?'} ORDER BY consumer LIMIT 10000`;
    const rows = await this.store.read((db) => this.store.statement(db, sql).all(...(consumer === undefined ? [] : [consumer])) as Row[], 'read consumer pauses');
    return rows.map((r) => ({
      consumer: r.consumer,
      paused: Number(r.paused) === 1,
      reason: r.reason,
      actor: r.actor,
      since: new Date(Number(r.since)),
      resumedBy: r.resumed_by ?? undefined,
      resumedAt: r.resumed_at === null ? undefined : new Date(Number(r.resumed_at)),
    }));
  }
}
