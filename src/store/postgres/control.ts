import { checkConsumerName, checkReason, type ConsumerControl, type ConsumerPauseRow } from '../../breaker/control.js';
import { checkActor } from '../../breaker/index.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

interface Row {
  consumer: string;
  paused: boolean;
  reason: string;
  actor: string;
  since: Date;
  resumed_by: string | null;
  resumed_at: Date | null;
}

/** Hand pauses in the PostgreSQL store's `<prefix>consumer_control`. */
export class PostgresControl<C extends PgClient> implements ConsumerControl {
  constructor(private readonly store: PostgresInternals<C>) {}

  private async run<R>(sql: string, values: unknown[], doing: string): Promise<{ rows: R[]; rowCount: number }> {
    const res = await this.store.withClient((c) => this.store.query<R>(c, sql, values, doing), doing);
    return { rows: res.rows, rowCount: Number(res.rowCount ?? 0) };
  }

  async pause(consumer: string, reason: string, actor: string): Promise<boolean> {
    const t = this.store.tables.control;
    const sql = `INSERT INTO ${t} AS c (consumer, paused, reason, actor, since) VALUES ($1, true, $2, $3, now()) ON CONFLICT (consumer) DO UPDATE SET paused = true, reason = excluded.reason, actor = excluded.actor, since = excluded.since, resumed_by = NULL, resumed_at = NULL WHERE NOT c.paused`;
    return (await this.run(sql, [checkConsumerName(consumer), checkReason(reason), checkActor(actor)], 'pause a consumer')).rowCount > 0;
  }

  async resume(consumer: string, actor: string): Promise<boolean> {
    const sql = `UPDATE ${this.store.tables.control} SET paused = false, resumed_by = $1, resumed_at = now() WHERE consumer = $2 AND paused`;
    return (await this.run(sql, [checkActor(actor), checkConsumerName(consumer)], 'resume a consumer')).rowCount > 0;
  }

  async read(consumer?: string): Promise<ConsumerPauseRow[]> {
    const sql = `SELECT consumer, paused, reason, actor, since, resumed_by, resumed_at FROM ${this.store.tables.control}${consumer === undefined ? '' : ' WHERE consumer = $1'} ORDER BY consumer LIMIT 10000`;
    const { rows } = await this.run<Row>(sql, consumer === undefined ? [] : [consumer], 'read consumer pauses');
    return rows.map((r) => ({ consumer: r.consumer, paused: r.paused, reason: r.reason, actor: r.actor, since: new Date(r.since), resumedBy: r.resumed_by ?? undefined, resumedAt: r.resumed_at === null ? undefined : new Date(r.resumed_at) }));
  }
}
