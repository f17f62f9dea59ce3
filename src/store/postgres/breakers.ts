import { checkConsumerName } from '../../breaker/control.js';
import { shareReason, type BreakerShare, type BreakerStateRow } from '../../breaker/share.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

interface Row {
  consumer: string;
  open: boolean;
  reason: string;
  since: Date;
  opened_by: string;
  closed_at: Date | null;
  closed_by: string | null;
}

/**
 * Shared breaker state in the PostgreSQL store's `<prefix>breaker_state`. Times are the
 * processes' own (an opening and a closing are compared with each other), as on SQLite.
 */
export class PostgresBreakers<C extends PgClient> implements BreakerShare {
  constructor(private readonly store: PostgresInternals<C>) {}

  private async run<R>(sql: string, values: unknown[], doing: string): Promise<{ rows: R[]; rowCount: number }> {
    const res = await this.store.withClient((c) => this.store.query<R>(c, sql, values, doing), doing);
    return { rows: res.rows, rowCount: Number(res.rowCount ?? 0) };
  }

  async open(consumer: string, reason: string, by: string, since: Date): Promise<boolean> {
    const t = this.store.tables.breakers;
    // Not over an open row (the first opening stays), nor over a close newer than this opening.
    const sql = `INSERT INTO ${t} AS b (consumer, open, reason, since, opened_by) VALUES ($1, true, $2, $3, $4) ON CONFLICT (consumer) DO UPDATE SET open = true, reason = excluded.reason, since = excluded.since, opened_by = excluded.opened_by, closed_at = NULL, closed_by = NULL WHERE NOT b.open AND (b.closed_at IS NULL OR b.closed_at < excluded.since)`;
    return (await this.run(sql, [checkConsumerName(consumer), shareReason(reason), since, by.slice(0, 200)], 'share a breaker opening')).rowCount > 0;
  }

  async close(consumer: string, by: string): Promise<boolean> {
    const sql = `UPDATE ${this.store.tables.breakers} SET open = false, closed_at = $1, closed_by = $2 WHERE consumer = $3 AND open`;
    return (await this.run(sql, [new Date(), by.slice(0, 200), checkConsumerName(consumer)], 'share a breaker closing')).rowCount > 0;
  }

  async read(consumer?: string): Promise<BreakerStateRow[]> {
    const sql = `SELECT consumer, open, reason, since, opened_by, closed_at, closed_by FROM ${this.store.tables.breakers}${consumer === undefined ? '' : ' WHERE consumer = $1'} ORDER BY consumer LIMIT 10000`;
    const { rows } = await this.run<Row>(sql, consumer === undefined ? [] : [consumer], 'read shared breakers');
    return rows.map((r) => ({ consumer: r.consumer, open: r.open, reason: r.reason, since: new Date(r.since), openedBy: r.opened_by, closedAt: r.closed_at === null ? undefined : new Date(r.closed_at), closedBy: r.closed_by ?? undefined }));
  }
}
