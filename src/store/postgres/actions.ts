import { checkEntry, checkQuery, type ActionEntry, type ActionLog, type ActionQuery, type ActionRecord } from '../../audit/entry.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

/** The action record in the PostgreSQL store's `<prefix>actions` table. */
export class PostgresActionLog<C extends PgClient> implements ActionLog {
  constructor(private readonly store: PostgresInternals<C>) {}

  async record(entry: ActionEntry): Promise<ActionRecord> {
    const e = checkEntry(entry);
    const doing = 'record an action';
    const { rows } = await this.store.withClient(
      (c) =>
        this.store.query<{ id: string }>(
          c,
          `INSERT INTO ${this.store.tables.actions} (at, actor, action, consumer, filter, count, outcome, detail) VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8::jsonb) RETURNING id::text AS id`,
          [e.at, e.actor, e.action, e.consumer ?? null, e.filter === undefined ? null : JSON.stringify(e.filter), e.count, e.outcome, e.detail === undefined ? null : JSON.stringify(e.detail)],
          doing,
        ),
      doing,
    );
    return { id: String(rows[0]?.id), ...e };
  }

  async list(query?: ActionQuery): Promise<ActionRecord[]> {
    const q = checkQuery(query);
    const where: string[] = [];
    const values: unknown[] = [];
    const param = (v: unknown) => {
      values.push(v);
      return `$${values.length}`;
    };
    if (q.since !== undefined) where.push(`at >= ${param(q.since)}`);
    if (q.action !== undefined) where.push(`action = ${param(q.action)}`);
    if (q.consumer !== undefined) where.push(`consumer = ${param(q.consumer)}`);
    const sql = `SELECT id::text AS id, at, actor, action, consumer, filter, count, outcome, detail FROM ${this.store.tables.actions}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT ${param(q.limit)}`;
    const doing = 'list actions';
    const { rows } = await this.store.withClient((c) => this.store.query<Row>(c, sql, values, doing), doing);
    return rows.map((r) => ({
      id: r.id,
      at: new Date(r.at),
      actor: r.actor,
      action: r.action,
      ...(r.consumer !== null ? { consumer: r.consumer } : {}),
      ...(r.filter !== null ? { filter: r.filter } : {}),
      count: Number(r.count),
      outcome: r.outcome as ActionRecord['outcome'],
      ...(r.detail !== null ? { detail: r.detail } : {}),
    }));
  }
}

interface Row {
  id: string;
  at: Date;
  actor: string;
  action: string;
  consumer: string | null;
  filter: Record<string, unknown> | null;
  count: number;
  outcome: string;
  detail: Record<string, unknown> | null;
}
