import { checkFilter, holdOf, holdMatches, liftedHoldsWhere, whereOf, type SqlWriter } from '../../retry-table/filter.js';
import { summarize } from '../../retry-table/signals.js';
import type { DrainOptions, DrainResult, RetryAuditEntry, RetryChange, RetryFilter, RetryHold, RetryRow, RetryRowInput, RetrySignals, RetryTableDriver } from '../../retry-table/types.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

/** A statement's parameters, numbered `$1`, `$2`, … in the order they are added. */
class Params implements SqlWriter {
  readonly values: unknown[];
  /** The transaction's start time: the same "now" in every use of one statement. */
  readonly now = 'now()';
  constructor(first: unknown[] = []) {
    this.values = [...first];
  }
  param(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
  bool(value: boolean): unknown {
    return value;
  }
  ids(column: string, ids: readonly string[]): string {
    return `${column} = ANY(${this.param(ids)}::bigint[])`;
  }
}

interface RowRecord {
  id: string;
  message_id: string;
  correlation_id: string | null;
  consumer: string;
  queue: string;
  parked_queue: string;
  exchange: string;
  routing_key: string;
  content: string;
  properties: { headers?: Record<string, unknown> } | null;
  attempt: number;
  next_attempt_at: Date | null;
  last_error: string;
  error_class: string;
  dependency: string;
  tenant: string | null;
  paused: boolean;
  created_at: Date;
  updated_at: Date;
}

function toRow(r: RowRecord): RetryRow {
  return {
    id: r.id,
    messageId: r.message_id,
    correlationId: r.correlation_id,
    consumer: r.consumer,
    queue: r.queue,
    parkedQueue: r.parked_queue,
    exchange: r.exchange,
    routingKey: r.routing_key,
    content: r.content,
    headers: r.properties?.headers ?? {},
    attempt: Number(r.attempt),
    nextAttemptAt: r.next_attempt_at === null ? null : new Date(r.next_attempt_at),
    lastError: r.last_error,
    errorClass: r.error_class,
    dependency: r.dependency,
    tenant: r.tenant,
    paused: r.paused,
    createdAt: new Date(r.created_at),
    updatedAt: new Date(r.updated_at),
  };
}

const COLUMNS = `id::text AS id, message_id, correlation_id, consumer, queue, parked_queue, exchange, routing_key, content, properties, attempt, next_attempt_at, last_error, error_class, dependency, tenant, paused, created_at, updated_at`;
const ROW_HOLD = { consumer: 'r.consumer', dependency: 'r.dependency', tenant: 'r.tenant', errorClass: 'r.error_class' };

/**
 * The retry table over PostgreSQL. Changes run in one transaction with their audit
 * entry; the scheduler claims due rows with `FOR UPDATE SKIP LOCKED` and moves them into
 * the outbox in the same statement, so schedulers running side by side never move a
 * row twice, and a scheduler that dies leaves its rows in the table.
 */
export class PostgresRetryTableDriver<C extends PgClient> implements RetryTableDriver {
  readonly backend = 'postgres' as const;

  constructor(private readonly store: PostgresInternals<C>) {}

  /**
   * The lock that orders inserts against pauses and resumes: an insert holds it shared
   * while it reads the holds and writes its row; a pause or resume holds it alone. Without
   * it, under READ COMMITTED, a row inserted during a resume could stay paused with no
   * hold left to lift it, or one inserted during a pause could escape it.
   */
  private holdsLock(mode: 'shared' | 'exclusive'): string {
    const key = `warren.retry-holds:${this.store.tables.retryHolds}`.replace(/'/g, "''");
    return `SELECT pg_advisory_xact_lock${mode === 'shared' ? '_shared' : ''}(hashtextextended('${key}', 0))`;
  }

  private read<R>(sql: string, values: unknown[], doing: string): Promise<R[]> {
    return this.store.withClient(async (c) => (await this.store.query<R>(c, sql, values, doing)).rows, doing);
  }

  async insert(row: RetryRowInput): Promise<{ id: string; paused: boolean }> {
    const t = this.store.tables;
    const held = holdMatches('h', { consumer: '$3', dependency: '$14', tenant: '$15', errorClass: '$13' });
    const sql = `INSERT INTO ${t.retry} AS r (message_id, correlation_id, consumer, queue, parked_queue, exchange, routing_key, content, properties, attempt, next_attempt_at, last_error, error_class, dependency, tenant, paused)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12, $13, $14, $15, EXISTS (SELECT 1 FROM ${t.retryHolds} AS h WHERE ${held}))
      ON CONFLICT (consumer, message_id) DO UPDATE SET
        attempt = greatest(r.attempt, excluded.attempt), last_error = excluded.last_error, error_class = excluded.error_class,
        dependency = excluded.dependency, tenant = excluded.tenant, content = excluded.content, properties = excluded.properties,
        paused = r.paused OR excluded.paused, updated_at = now()
      RETURNING id::text AS id, paused`;
    const values = [
      row.messageId,
      row.correlationId,
      row.consumer,
      row.queue,
      row.parkedQueue,
      row.exchange,
      row.routingKey,
      row.content,
      row.properties,
      row.attempt,
      row.nextAttemptAt,
      row.lastError,
      row.errorClass,
      row.dependency,
      row.tenant,
    ];
    const got = await this.store.transaction(
      async (client) => (await this.store.query<{ id: string; paused: boolean }>(client, sql, values, 'add a retry-table row')).rows[0],
      'add a retry-table row',
      this.holdsLock('shared'),
    );
    return { id: String(got?.id), paused: got?.paused === true };
  }

  list(filter: RetryFilter, limit: number, offset: number): Promise<RetryRow[]> {
    const p = new Params();
    const where = whereOf(filter, p);
    const sql = `SELECT ${COLUMNS} FROM ${this.store.tables.retry} WHERE ${where} ORDER BY next_attempt_at ASC NULLS LAST, id LIMIT ${p.param(limit)} OFFSET ${p.param(offset)}`;
    return this.read<RowRecord>(sql, p.values, 'list retry-table rows').then((rows) => rows.map(toRow));
  }

  async count(filter: RetryFilter): Promise<number> {
    const p = new Params();
    const [r] = await this.read<{ n: number }>(`SELECT count(*)::float8 AS n FROM ${this.store.tables.retry} WHERE ${whereOf(filter, p)}`, p.values, 'count retry-table rows');
    return Number(r?.n ?? 0);
  }

  update(change: RetryChange, filter: RetryFilter, actor: string): Promise<number> {
    const t = this.store.tables;
    return this.store.transaction(async (client) => {
      const q = <R>(sql: string, values: unknown[]) => this.store.query<R>(client, sql, values, `${change.action} retry-table rows`);
      let rows: number;
      const detail: Record<string, unknown> = {};
      if (change.action === 'pause') {
        const p = new Params();
        const hold = holdOf(filter);
        // A pause by id or state is by hand: only a resume by a person lifts it.
        const manual = hold === undefined ? ', paused_manually = true' : '';
        rows = (await q(`UPDATE ${t.retry} SET paused = true${manual}, updated_at = now() WHERE ${whereOf(filter, p)}`, p.values)).rowCount ?? 0;
        detail['hold'] = hold !== undefined;
        if (hold) {
          await q(`INSERT INTO ${t.retryHolds} (consumer, dependency, tenant, error_class, actor) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, [
            hold.consumer ?? '',
            hold.dependency ?? '',
            hold.tenant ?? '',
            hold.errorClass ?? '',
            actor,
          ]);
        }
      } else if (change.action === 'resume') {
        const lp = new Params();
        const lifted = liftedHoldsWhere(filter, lp);
        if (lifted !== undefined) {
          const own = change.ownPausesOnly ? ` AND actor = ${lp.param(actor)}` : '';
          detail['liftedPauses'] = (await q(`DELETE FROM ${t.retryHolds} WHERE ${lifted}${own}`, lp.values)).rowCount ?? 0;
        }
        if (!change.ownPausesOnly) {
          // A person's resume lifts their pause by hand also on rows another hold still
          // covers: that hold's own resume (a health check's) then releases them.
          const mp = new Params();
          await q(`UPDATE ${t.retry} SET paused_manually = false WHERE ${whereOf(filter, mp)} AND paused_manually`, mp.values);
        }
        const p = new Params();
        const due = change.dueNow ? `, next_attempt_at = CASE WHEN r.next_attempt_at IS NULL OR r.next_attempt_at > now() THEN now() ELSE r.next_attempt_at END` : '';
        // Rows another hold still covers stay paused; a health check leaves rows paused by hand alone.
        const manual = change.ownPausesOnly ? ' AND NOT r.paused_manually' : '';
        const sql = `UPDATE ${t.retry} AS r SET paused = false, paused_manually = false, updated_at = now()${due} WHERE ${whereOf(filter, p, 'r')}${manual} AND NOT EXISTS (SELECT 1 FROM ${t.retryHolds} AS h WHERE ${holdMatches('h', ROW_HOLD)})`;
        rows = (await q(sql, p.values)).rowCount ?? 0;
        detail['dueNow'] = change.dueNow;
        if (change.ownPausesOnly) detail['ownPausesOnly'] = true;
      } else {
        const p = new Params(change.at === 'now' ? [] : [change.at]);
        const at = change.at === 'now' ? 'now()' : '$1::timestamptz';
        rows = (await q(`UPDATE ${t.retry} SET next_attempt_at = ${at}, updated_at = now() WHERE ${whereOf(filter, p)}`, p.values)).rowCount ?? 0;
        detail['nextAttemptAt'] = change.at === 'now' ? new Date().toISOString() : change.at === null ? null : change.at.toISOString();
      }
      await q(`INSERT INTO ${t.retryAudit} (actor, action, filter, detail, rows) VALUES ($1, $2, $3::jsonb, $4::jsonb, $5)`, [actor, change.action, JSON.stringify(filter), JSON.stringify(detail), rows]);
      return rows;
    }, `${change.action} retry-table rows`, change.action === 'schedule' ? undefined : this.holdsLock('exclusive'));
  }

  park(filter: RetryFilter, actor: string, headers: Readonly<Record<string, unknown>>): Promise<number> {
    const t = this.store.tables;
    return this.store.transaction(async (client) => {
      const p = new Params([JSON.stringify(headers)]);
      const where = whereOf(filter, p);
      const sql = `WITH moved AS (DELETE FROM ${t.retry} WHERE ${where} RETURNING id, message_id, parked_queue, content, properties),
        ins AS (INSERT INTO ${t.outbox} (message_id, exchange, routing_key, content, properties, origin)
          SELECT message_id, '', parked_queue, content, jsonb_set(properties, '{headers}', coalesce(properties->'headers', '{}'::jsonb) || $1::jsonb), 'park' FROM moved ORDER BY id RETURNING 1)
        SELECT count(*)::float8 AS n FROM ins`;
      const { rows } = await this.store.query<{ n: number }>(client, sql, p.values, 'park retry-table rows');
      const n = Number(rows[0]?.n ?? 0);
      if (n > 0) await this.notify(client);
      await this.store.query(client, `INSERT INTO ${t.retryAudit} (actor, action, filter, detail, rows) VALUES ($1, 'park', $2::jsonb, '{}'::jsonb, $3)`, [actor, JSON.stringify(filter), n], 'park retry-table rows');
      return n;
    }, 'park retry-table rows');
  }

  drain(options: DrainOptions): Promise<DrainResult> {
    const t = this.store.tables;
    return this.store.transaction(async (client) => {
      const q = <R>(sql: string, values: unknown[]) => this.store.query<R>(client, sql, values, 'send due retry-table rows back');
      const pending = Number((await q<{ n: number }>(`SELECT count(*)::float8 AS n FROM ${t.outbox} WHERE sent_at IS NULL AND failed_at IS NULL AND origin = 'retry'`, [])).rows[0]?.n ?? 0);
      const room = Math.min(options.limit, options.maxPending - pending);
      const full = room < options.limit;
      if (room <= 0) return { moved: 0, full };
      const sql = `WITH due AS (SELECT id FROM ${t.retry} WHERE NOT paused AND next_attempt_at <= now() ORDER BY next_attempt_at, id LIMIT $1 FOR UPDATE SKIP LOCKED),
        moved AS (DELETE FROM ${t.retry} AS r USING due WHERE r.id = due.id RETURNING r.id, r.message_id, r.queue, r.content, r.properties, r.next_attempt_at),
        ins AS (INSERT INTO ${t.outbox} (message_id, exchange, routing_key, content, properties, origin)
          SELECT message_id, '', queue, content, properties, 'retry' FROM moved ORDER BY next_attempt_at, id RETURNING 1)
        SELECT count(*)::float8 AS n FROM ins`;
      const n = Number((await q<{ n: number }>(sql, [room])).rows[0]?.n ?? 0);
      if (n > 0) await this.notify(client);
      return { moved: n, full: full && n === room };
    }, 'send due retry-table rows back');
  }

  /** Wakes relays at commit, as an outbox insert does. */
  private async notify(client: PgClient): Promise<void> {
    if (this.store.channel !== undefined) await this.store.query(client, 'SELECT pg_notify($1, $2)', [this.store.channel, ''], 'wake the outbox relays');
  }

  async holds(): Promise<RetryHold[]> {
    const rows = await this.read<{ consumer: string; dependency: string; tenant: string; error_class: string; actor: string; since: Date }>(
      `SELECT consumer, dependency, tenant, error_class, actor, since FROM ${this.store.tables.retryHolds} ORDER BY since`,
      [],
      'read retry-table pauses',
    );
    return rows.map((h) => ({
      consumer: h.consumer === '' ? null : h.consumer,
      dependency: h.dependency === '' ? null : h.dependency,
      tenant: h.tenant === '' ? null : h.tenant,
      errorClass: h.error_class === '' ? null : h.error_class,
      actor: h.actor,
      since: new Date(h.since),
    }));
  }

  async dependencies(): Promise<string[]> {
    const t = this.store.tables;
    const rows = await this.read<{ d: string }>(`SELECT DISTINCT dependency AS d FROM ${t.retry} UNION SELECT dependency FROM ${t.retryHolds} WHERE dependency <> '' ORDER BY 1`, [], 'read retry-table dependencies');
    return rows.map((r) => r.d);
  }

  async signals(): Promise<RetrySignals> {
    const groups = await this.read<{ dependency: string; n: number; paused: number; due: number; waiting: number; age: number }>(
      `SELECT dependency, count(*)::float8 AS n, count(*) FILTER (WHERE paused)::float8 AS paused,
         count(*) FILTER (WHERE NOT paused AND next_attempt_at <= now())::float8 AS due,
         count(*) FILTER (WHERE NOT paused AND next_attempt_at IS NULL)::float8 AS waiting,
         coalesce(extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE NOT paused AND next_attempt_at <= now())) * 1000, 0)::float8 AS age
       FROM ${this.store.tables.retry} GROUP BY dependency ORDER BY dependency`,
      [],
      'read retry-table signals',
    );
    return summarize(groups.map((g) => ({ dependency: g.dependency, rows: Number(g.n), paused: Number(g.paused), due: Number(g.due), waiting: Number(g.waiting), oldestDueAgeMs: Math.max(0, Math.round(Number(g.age))) })));
  }

  async history(limit: number): Promise<RetryAuditEntry[]> {
    const rows = await this.read<{ id: string; at: Date; actor: string; action: string; filter: RetryFilter; detail: Record<string, unknown>; rows: number }>(
      `SELECT id::text AS id, at, actor, action, filter, detail, rows FROM ${this.store.tables.retryAudit} ORDER BY id DESC LIMIT $1`,
      [limit],
      'read the retry-table history',
    );
    return rows.map((a) => ({ id: a.id, at: new Date(a.at), actor: a.actor, action: a.action as RetryAuditEntry['action'], filter: checkFilter(a.filter), detail: a.detail, rows: Number(a.rows) }));
  }
}
