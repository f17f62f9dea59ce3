import { checkFilter, holdOf, holdMatches, liftedHoldsWhere, whereOf, type SqlWriter } from '../../retry-table/filter.js';
import { summarize } from '../../retry-table/signals.js';
import type { DrainOptions, DrainResult, RetryAuditEntry, RetryChange, RetryFilter, RetryHold, RetryRow, RetryRowInput, RetrySignals, RetryTableDriver } from '../../retry-table/types.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

/** A WHERE clause's parameters, in `?` order. */
class Params implements SqlWriter {
  readonly values: unknown[] = [];
  constructor(private readonly nowMs: number) {}
  get now(): string {
    return this.param(this.nowMs);
  }
  param(value: unknown): string {
    this.values.push(value);
    return '?';
  }
  bool(value: boolean): unknown {
    return value ? 1 : 0;
  }
  ids(column: string, ids: readonly string[]): string {
    // As text: SQLite compares them with the INTEGER column as numbers, without the
    // precision a JavaScript number would lose above 2^53.
    return `${column} IN (SELECT value FROM json_each(${this.param(JSON.stringify(ids))}))`;
  }
}

interface RowRecord {
  id: number | bigint;
  message_id: string;
  correlation_id: string | null;
  consumer: string;
  queue: string;
  parked_queue: string;
  exchange: string;
  routing_key: string;
  content: string;
  properties: string;
  attempt: number;
  next_attempt_at: number | null;
  last_error: string;
  error_class: string;
  dependency: string;
  tenant: string | null;
  paused: number;
  created_at: number;
  updated_at: number;
}

function toRow(r: RowRecord): RetryRow {
  let headers: Record<string, unknown> = {};
  try {
    headers = (JSON.parse(r.properties) as { headers?: Record<string, unknown> }).headers ?? {};
  } catch {
    // Unreadable properties: show the row without headers.
  }
  return {
    id: String(r.id),
    messageId: r.message_id,
    correlationId: r.correlation_id,
    consumer: r.consumer,
    queue: r.queue,
    parkedQueue: r.parked_queue,
    exchange: r.exchange,
    routingKey: r.routing_key,
    content: r.content,
    headers,
    attempt: Number(r.attempt),
    nextAttemptAt: r.next_attempt_at === null ? null : new Date(Number(r.next_attempt_at)),
    lastError: r.last_error,
    errorClass: r.error_class,
    dependency: r.dependency,
    tenant: r.tenant,
    paused: Number(r.paused) === 1,
    createdAt: new Date(Number(r.created_at)),
    updatedAt: new Date(Number(r.updated_at)),
  };
}

const ROW_HOLD = { consumer: 'r.consumer', dependency: 'r.dependency', tenant: 'r.tenant', errorClass: 'r.error_class' };

/**
 * The retry table over SQLite. Every method is one BEGIN IMMEDIATE transaction on the
 * store's connection, so two processes on the same file take turns and a row is never
 * moved twice.
 */
export class SqliteRetryTableDriver<DB extends SqliteDatabase> implements RetryTableDriver {
  readonly backend = 'sqlite' as const;

  constructor(private readonly store: SqliteInternals<DB>) {}

  insert(row: RetryRowInput): Promise<{ id: string; paused: boolean }> {
    const t = this.store.tables;
    const held = holdMatches('h', { consumer: '@consumer', dependency: '@dependency', tenant: '@tenant', errorClass: '@errorClass' });
    const sql = `INSERT INTO ${t.retry} AS r (message_id, correlation_id, consumer, queue, parked_queue, exchange, routing_key, content, properties, attempt, next_attempt_at, last_error, error_class, dependency, tenant, paused, created_at, updated_at)
      VALUES (@messageId, @correlationId, @consumer, @queue, @parkedQueue, @exchange, @routingKey, @content, @properties, @attempt, @nextAttemptAt, @lastError, @errorClass, @dependency, @tenant,
        EXISTS (SELECT 1 FROM ${t.retryHolds} AS h WHERE ${held}), @now, @now)
      ON CONFLICT (consumer, message_id) DO UPDATE SET
        attempt = max(r.attempt, excluded.attempt), last_error = excluded.last_error, error_class = excluded.error_class,
        dependency = excluded.dependency, tenant = excluded.tenant, content = excluded.content, properties = excluded.properties,
        paused = max(r.paused, excluded.paused), updated_at = excluded.updated_at
      RETURNING id, paused`;
    return this.store.write((db) => {
      const got = this.store.statement(db, sql).get({
        messageId: row.messageId,
        correlationId: row.correlationId,
        consumer: row.consumer,
        queue: row.queue,
        parkedQueue: row.parkedQueue,
        exchange: row.exchange,
        routingKey: row.routingKey,
        content: row.content,
        properties: row.properties,
        attempt: row.attempt,
        nextAttemptAt: row.nextAttemptAt === null ? null : row.nextAttemptAt.getTime(),
        lastError: row.lastError,
        errorClass: row.errorClass,
        dependency: row.dependency,
        tenant: row.tenant,
        now: Date.now(),
      }) as { id: number | bigint; paused: number };
      return { id: String(got.id), paused: Number(got.paused) === 1 };
    }, 'add a retry-table row');
  }

  list(filter: RetryFilter, limit: number, offset: number): Promise<RetryRow[]> {
    return this.store.read((db) => {
      const p = new Params(Date.now());
      const where = whereOf(filter, p);
      const sql = `SELECT * FROM ${this.store.tables.retry} WHERE ${where} ORDER BY next_attempt_at IS NULL, next_attempt_at, id LIMIT ? OFFSET ?`;
      return (db.prepare(sql).all(...p.values, limit, offset) as RowRecord[]).map(toRow);
    }, 'list retry-table rows');
  }

  count(filter: RetryFilter): Promise<number> {
    return this.store.read((db) => {
      const p = new Params(Date.now());
      const where = whereOf(filter, p);
      return Number((db.prepare(`SELECT count(*) AS n FROM ${this.store.tables.retry} WHERE ${where}`).get(...p.values) as { n: number }).n);
    }, 'count retry-table rows');
  }

  update(change: RetryChange, filter: RetryFilter, actor: string): Promise<number> {
    const t = this.store.tables;
    return this.store.write((db) => {
      const now = Date.now();
      let rows: number;
      const detail: Record<string, unknown> = {};
      if (change.action === 'pause') {
        const p = new Params(now);
        const hold = holdOf(filter);
        // A pause by id or state is by hand: only a resume by a person lifts it.
        const manual = hold === undefined ? ', paused_manually = 1' : '';
        rows = Number(db.prepare(`UPDATE ${t.retry} SET paused = 1${manual}, updated_at = ? WHERE ${whereOf(filter, p)}`).run(now, ...p.values).changes);
        detail['hold'] = hold !== undefined;
        if (hold) {
          db.prepare(`INSERT INTO ${t.retryHolds} (consumer, dependency, tenant, error_class, actor, since) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`).run(
            hold.consumer ?? '',
            hold.dependency ?? '',
            hold.tenant ?? '',
            hold.errorClass ?? '',
            actor,
            now,
          );
        }
      } else if (change.action === 'resume') {
        const lp = new Params(now);
        const lifted = liftedHoldsWhere(filter, lp);
        if (lifted !== undefined) {
          const own = change.ownPausesOnly ? ` AND actor = ${lp.param(actor)}` : '';
          detail['liftedPauses'] = Number(db.prepare(`DELETE FROM ${t.retryHolds} WHERE ${lifted}${own}`).run(...lp.values).changes);
        }
        if (!change.ownPausesOnly) {
          // A person's resume lifts their pause by hand also on rows another hold still
          // covers: that hold's own resume (a health check's) then releases them.
          const mp = new Params(now);
          db.prepare(`UPDATE ${t.retry} SET paused_manually = 0 WHERE ${whereOf(filter, mp)} AND paused_manually = 1`).run(...mp.values);
        }
        // Parameters in the order they appear: SET first, then WHERE.
        const p = new Params(now);
        p.param(now);
        const due = change.dueNow ? `, next_attempt_at = CASE WHEN r.next_attempt_at IS NULL OR r.next_attempt_at > ${p.param(now)} THEN ${p.param(now)} ELSE r.next_attempt_at END` : '';
        const where = whereOf(filter, p, 'r');
        // Rows another hold still covers stay paused; a health check leaves rows paused by hand alone.
        const manual = change.ownPausesOnly ? ' AND r.paused_manually = 0' : '';
        rows = Number(
          db
            .prepare(`UPDATE ${t.retry} AS r SET paused = 0, paused_manually = 0, updated_at = ?${due} WHERE ${where}${manual} AND NOT EXISTS (SELECT 1 FROM ${t.retryHolds} AS h WHERE ${holdMatches('h', ROW_HOLD)})`)
            .run(...p.values).changes,
        );
        detail['dueNow'] = change.dueNow;
        if (change.ownPausesOnly) detail['ownPausesOnly'] = true;
      } else {
        const p = new Params(now);
        const at = change.at === 'now' ? now : change.at === null ? null : change.at.getTime();
        rows = Number(db.prepare(`UPDATE ${t.retry} SET next_attempt_at = ?, updated_at = ? WHERE ${whereOf(filter, p)}`).run(at, now, ...p.values).changes);
        detail['nextAttemptAt'] = at === null ? null : new Date(at).toISOString();
      }
      this.audit(db, now, actor, change.action, filter, detail, rows);
      return rows;
    }, `${change.action} retry-table rows`);
  }

  park(filter: RetryFilter, actor: string, headers: Readonly<Record<string, unknown>>): Promise<number> {
    const t = this.store.tables;
    return this.store.write((db) => {
      const now = Date.now();
      const p = new Params(now);
      const where = whereOf(filter, p);
      const ids = (db.prepare(`SELECT id FROM ${t.retry} WHERE ${where} ORDER BY id`).all(...p.values) as Array<{ id: number | bigint }>).map((r) => Number(r.id));
      if (ids.length > 0) {
        const list = JSON.stringify(ids);
        db.prepare(
          `INSERT INTO ${t.outbox} (message_id, exchange, routing_key, content, properties, created_at, origin)
           SELECT message_id, '', parked_queue, content, json_set(properties, '$.headers', json(json_patch(coalesce(json_extract(properties, '$.headers'), '{}'), ?))), ?, 'park'
           FROM ${t.retry} WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id`,
        ).run(JSON.stringify(headers), now, list);
        db.prepare(`DELETE FROM ${t.retry} WHERE id IN (SELECT value FROM json_each(?))`).run(list);
        this.store.outboxAdded(true);
      }
      this.audit(db, now, actor, 'park', filter, {}, ids.length);
      return ids.length;
    }, 'park retry-table rows');
  }

  drain(options: DrainOptions): Promise<DrainResult> {
    const t = this.store.tables;
    return this.store.write((db) => {
      const pending = Number(
        (this.store.statement(db, `SELECT count(*) AS n FROM ${t.outbox} WHERE sent_at IS NULL AND failed_at IS NULL AND origin = 'retry'`).get() as { n: number }).n,
      );
      const room = Math.min(options.limit, options.maxPending - pending);
      const full = room < options.limit;
      if (room <= 0) return { moved: 0, full };
      const now = Date.now();
      const ids = (
        this.store.statement(db, `SELECT id FROM ${t.retry} WHERE paused = 0 AND next_attempt_at IS NOT NULL AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?`).all(now, room) as Array<{
          id: number | bigint;
        }>
      ).map((r) => Number(r.id));
      if (ids.length === 0) return { moved: 0, full };
      const list = JSON.stringify(ids);
      this.store
        .statement(
          db,
          `INSERT INTO ${t.outbox} (message_id, exchange, routing_key, content, properties, created_at, origin)
           SELECT message_id, '', queue, content, properties, ?, 'retry' FROM ${t.retry} WHERE id IN (SELECT value FROM json_each(?)) ORDER BY next_attempt_at, id`,
        )
        .run(now, list);
      this.store.statement(db, `DELETE FROM ${t.retry} WHERE id IN (SELECT value FROM json_each(?))`).run(list);
      this.store.outboxAdded(true);
      return { moved: ids.length, full: full && ids.length === room };
    }, 'send due retry-table rows back');
  }

  holds(): Promise<RetryHold[]> {
    return this.store.read(
      (db) =>
        (db.prepare(`SELECT consumer, dependency, tenant, error_class, actor, since FROM ${this.store.tables.retryHolds} ORDER BY since`).all() as Array<Record<string, string | number>>).map((h) => ({
          consumer: h['consumer'] === '' ? null : String(h['consumer']),
          dependency: h['dependency'] === '' ? null : String(h['dependency']),
          tenant: h['tenant'] === '' ? null : String(h['tenant']),
          errorClass: h['error_class'] === '' ? null : String(h['error_class']),
          actor: String(h['actor']),
          since: new Date(Number(h['since'])),
        })),
      'read retry-table pauses',
    );
  }

  dependencies(): Promise<string[]> {
    const t = this.store.tables;
    return this.store.read(
      (db) =>
        (db.prepare(`SELECT DISTINCT dependency AS d FROM ${t.retry} UNION SELECT dependency FROM ${t.retryHolds} WHERE dependency <> '' ORDER BY 1`).all() as Array<{ d: string }>).map((r) => r.d),
      'read retry-table dependencies',
    );
  }

  signals(): Promise<RetrySignals> {
    return this.store.read((db) => {
      const now = Date.now();
      const groups = db
        .prepare(
          `SELECT dependency, count(*) AS n, sum(paused) AS paused,
             sum(CASE WHEN paused = 0 AND next_attempt_at <= ? THEN 1 ELSE 0 END) AS due,
             sum(CASE WHEN paused = 0 AND next_attempt_at IS NULL THEN 1 ELSE 0 END) AS waiting,
             min(CASE WHEN paused = 0 AND next_attempt_at <= ? THEN next_attempt_at END) AS oldest
           FROM ${this.store.tables.retry} GROUP BY dependency ORDER BY dependency`,
        )
        .all(now, now) as Array<{ dependency: string; n: number; paused: number; due: number; waiting: number; oldest: number | null }>;
      return summarize(groups.map((g) => ({ dependency: g.dependency, rows: Number(g.n), paused: Number(g.paused), due: Number(g.due), waiting: Number(g.waiting), oldestDueAgeMs: g.oldest === null ? 0 : Math.max(0, now - Number(g.oldest)) })));
    }, 'read retry-table signals');
  }

  history(limit: number): Promise<RetryAuditEntry[]> {
    return this.store.read(
      (db) =>
        (db.prepare(`SELECT id, at, actor, action, filter, detail, rows FROM ${this.store.tables.retryAudit} ORDER BY id DESC LIMIT ?`).all(limit) as Array<Record<string, string | number | bigint>>).map((a) => ({
          id: String(a['id']),
          at: new Date(Number(a['at'])),
          actor: String(a['actor']),
          action: String(a['action']) as RetryAuditEntry['action'],
          filter: checkFilter(JSON.parse(String(a['filter'])) as RetryFilter),
          detail: JSON.parse(String(a['detail'])) as Record<string, unknown>,
          rows: Number(a['rows']),
        })),
      'read the retry-table history',
    );
  }

  private audit(db: DB, now: number, actor: string, action: string, filter: RetryFilter, detail: Record<string, unknown>, rows: number): void {
    db.prepare(`INSERT INTO ${this.store.tables.retryAudit} (at, actor, action, filter, detail, rows) VALUES (?, ?, ?, ?, ?, ?)`).run(now, actor, action, JSON.stringify(filter), JSON.stringify(detail), rows);
  }
}
