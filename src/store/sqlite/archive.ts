/**
 * The archive's tables on SQLite. Each method is one transaction (or one read) on the
 * store's connection. Filters the database cannot run natively (a pattern, a topic
 * pattern, non-ASCII case folding) call JavaScript functions registered on the
 * connection; body search uses an FTS5 index.
 */
import { StoreError } from '../../errors.js';
import { routingKeyMatches } from '../../park/filter.js';
import type {
  ArchiveClaimOptions,
  ArchiveCounts,
  ArchiveFilter,
  ArchiveGroup,
  ArchiveInsertResult,
  ArchivePage,
  ArchivePageQuery,
  ArchivePruneBatch,
  ArchivePruneRule,
  ArchiveRecord,
  ArchiveReplayMark,
  ArchiveResolveMark,
  ArchiveRowInput,
  ArchiveSearch,
  ArchiveState,
  ArchiveStore,
  ArchiveSummary,
  StorePattern,
} from '../archive.js';
import {
  assembleCounts,
  cursorOf,
  keyset,
  onlyConsumerAndStates,
  pageLimit,
  SEARCHABLE_BODY_CHARS,
  statesOf,
  sumGroups,
  summaryColumns,
  toGroup,
  toSummary,
  whereOf,
  type ArchiveDialect,
  type GroupChange,
  type GroupRow,
  type SummaryRow,
} from '../archive-sql.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

/** Patterns of the statement running now, by the key its SQL passes to `warren_regexp`. */
const patterns = new Map<string, StorePattern>();
let patternKey = 0;
const withFunctions = new WeakSet<SqliteDatabase>();

function registerFunctions(db: SqliteDatabase): void {
  if (withFunctions.has(db)) return;
  if (typeof db.function !== 'function') throw new StoreError('sqlite', 'This SQLite database object cannot register functions (better-sqlite3 can): the archive needs them for pattern and routing-key filters.');
  db.function('warren_regexp', { deterministic: true }, (key: string, text: string | null) => (text !== null && patterns.get(key)?.test(text) === true ? 1 : 0));
  db.function('warren_contains', { deterministic: true }, (text: string | null, needle: string) => (text !== null && text.toLowerCase().includes(needle.toLowerCase()) ? 1 : 0));
  db.function('warren_topic', { deterministic: true }, (pattern: string, key: string) => (routingKeyMatches(pattern, key) ? 1 : 0));
  withFunctions.add(db);
}

/** A WHERE clause's parameters and the patterns it registered (released after the statement). */
class Sql implements ArchiveDialect {
  readonly params: unknown[] = [];
  readonly keys: string[] = [];
  constructor(readonly headersTable: string, private readonly searchTable: string) {}
  param(value: unknown): string {
    this.params.push(value);
    return '?';
  }
  time(d: Date): unknown {
    return d.getTime();
  }
  inList(column: string, values: readonly string[], type: 'bigint' | 'text'): string {
    return `${column} IN (SELECT value FROM json_each(${this.param(JSON.stringify(type === 'bigint' ? values.map(Number) : values))}))`;
  }
  contains(column: string, needle: string): string {
    // LIKE folds ASCII case only: other text goes through JavaScript's folding.
    if (/^[\x20-\x7e]*$/.test(needle)) return `${column} LIKE ${this.param(`%${needle.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)} ESCAPE '\\'`;
    return `warren_contains(${column}, ${this.param(needle)}) = 1`;
  }
  matches(column: string, pattern: StorePattern): string {
    const key = `p${++patternKey}`;
    patterns.set(key, pattern);
    this.keys.push(key);
    return `warren_regexp(${this.param(key)}, ${column}) = 1`;
  }
  equalsAnyCase(column: string, value: string): string {
    return `${column} = ${this.param(value)} COLLATE NOCASE`;
  }
  topic(column: string, pattern: string): string {
    return `warren_topic(${this.param(pattern)}, ${column}) = 1`;
  }
  bodyRows(words: string): string {
    return `SELECT rowid FROM ${this.searchTable} WHERE ${this.searchTable} MATCH ${this.param(`"${words.replace(/"/g, '""')}"`)}`;
  }
  done(): void {
    for (const k of this.keys) patterns.delete(k);
  }
}

interface RowInfo {
  id: number | bigint;
  consumer: string;
  state: ArchiveState;
  fingerprint: string;
  body_bytes: number;
  failed_at: number;
  error_class: string | null;
  error_message: string | null;
  viewed_at: number | null;
}

const INFO = 'a.id, a.consumer, a.state, a.fingerprint, a.body_bytes, a.failed_at, a.error_class, a.error_message, a.viewed_at';

/** The archive on SQLite. */
export class SqliteArchive<DB extends SqliteDatabase> implements ArchiveStore {
  constructor(private readonly store: SqliteInternals<DB>) {}

  private get t() {
    return this.store.tables;
  }

  private sql(): Sql {
    return new Sql(this.t.archiveHeaders, this.t.archiveSearch);
  }

  /**
   * The archive table of a filter's statement, with the index it must use where SQLite's
   * planner, which has no statistics, would choose another: without them it takes the
   * consumer's time index (consumer, failed_at, id) for any filter, as it gives the order
   * without sorting, and reads every row of the consumer for a few row ids or message
   * ids. Rows by id are read by their primary key (NOT INDEXED still allows it), rows by
   * message id by the message index.
   */
  private from(filter: ArchiveFilter): string {
    if (filter.ids !== undefined && filter.ids.length > 0) return `${this.t.archive} a NOT INDEXED`;
    if (filter.messageIds !== undefined && filter.messageIds.length > 0) return `${this.t.archive} a INDEXED BY ${this.t.archive.replace(/archive"$/, 'archive_message"')}`;
    return `${this.t.archive} a`;
  }

  private read<R>(body: (db: DB) => R, doing: string): Promise<R> {
    return this.store.read((db) => {
      registerFunctions(db);
      return body(db);
    }, doing);
  }

  private write<R>(body: (db: DB) => R, doing: string): Promise<R> {
    return this.store.write((db) => {
      registerFunctions(db);
      return body(db);
    }, doing);
  }

  /** Runs a dynamic statement with the WHERE clause's parameters, releasing its patterns after. */
  private all<R>(db: DB, q: Sql, sql: string, ...extra: unknown[]): R[] {
    try {
      return db.prepare(sql).all(...q.params, ...extra) as R[];
    } finally {
      q.done();
    }
  }

  async insert(rows: readonly ArchiveRowInput[]): Promise<ArchiveInsertResult> {
    if (rows.length === 0) return { ids: [], inserted: 0, duplicates: 0 };
    const t = this.t;
    return this.write((db) => {
      const insert = this.store.statement(
        db,
        `INSERT INTO ${t.archive} (consumer, identity, message_id, routing_key, exchange, error_class, error_message, reason, attempts, replays, fingerprint, failed_at, parked_at, archived_at, body_bytes, not_indexed)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (consumer, identity) DO NOTHING`,
      );
      const payload = this.store.statement(db, `INSERT INTO ${t.archivePayload} (id, error_stack, headers, properties, body, body_text) VALUES (?, ?, ?, ?, ?, ?)`);
      const header = this.store.statement(db, `INSERT OR IGNORE INTO ${t.archiveHeaders} (consumer, name, value, failed_at, row_id) VALUES (?, ?, ?, ?, ?)`);
      const search = this.store.statement(db, `INSERT INTO ${t.archiveSearch} (rowid, body) VALUES (?, ?)`);
      const ids: Array<string | undefined> = [];
      const added: Array<{ consumer: string; state: ArchiveState; fingerprint: string; bytes: number; at: number; errorClass: string | null; errorMessage: string | null; id: string }> = [];
      for (const r of rows) {
        const at = r.failedAt.getTime();
        const info = insert.run(r.consumer, r.identity, r.messageId, r.routingKey, r.exchange, r.errorClass, r.errorMessage, r.reason, r.attempts, r.replays, r.fingerprint, at, r.parkedAt?.getTime() ?? null, r.archivedAt.getTime(), r.body.length, r.notIndexed);
        if (Number(info.changes) === 0) {
          ids.push(undefined);
          continue;
        }
        const id = info.lastInsertRowid;
        payload.run(id, r.errorStack, r.headers, r.properties, r.bodyText === null ? r.body : null, r.bodyText);
        for (const [name, value] of r.indexHeaders) header.run(r.consumer, name, value, at, id);
        if (r.bodyText !== null && r.bodyText !== '') search.run(id, r.bodyText.length > SEARCHABLE_BODY_CHARS ? r.bodyText.slice(0, SEARCHABLE_BODY_CHARS) : r.bodyText);
        ids.push(String(id));
        added.push({ consumer: r.consumer, state: 'open', fingerprint: r.fingerprint, bytes: r.body.length, at, errorClass: r.errorClass, errorMessage: r.errorMessage, id: String(id) });
      }
      this.addGroups(db, sumGroups(added, 1));
      return { ids, inserted: added.length, duplicates: rows.length - added.length };
    }, 'archive parked messages');
  }

  private addGroups(db: DB, changes: readonly GroupChange[]): void {
    const upsert = this.store.statement(
      db,
      `INSERT INTO ${this.t.archiveGroups} (consumer, state, fingerprint, count, bytes, first_at, last_at, error_class, sample_message, sample_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (consumer, state, fingerprint) DO UPDATE SET count = count + excluded.count, bytes = bytes + excluded.bytes,
         first_at = min(coalesce(first_at, excluded.first_at), excluded.first_at),
         sample_message = CASE WHEN last_at IS NULL OR excluded.last_at >= last_at THEN excluded.sample_message ELSE sample_message END,
         sample_id = CASE WHEN last_at IS NULL OR excluded.last_at >= last_at THEN excluded.sample_id ELSE sample_id END,
         last_at = max(coalesce(last_at, excluded.last_at), excluded.last_at),
         error_class = coalesce(error_class, excluded.error_class)`,
    );
    for (const g of changes) upsert.run(g.consumer, g.state, g.fingerprint, g.count, g.bytes, g.firstAt, g.lastAt, g.errorClass, g.sampleMessage, g.sampleId);
  }

  /** Takes rows out of their groups, then reads each group's times and sample again from its index. */
  private removeGroups(db: DB, changes: readonly GroupChange[]): void {
    const t = this.t;
    const sub = this.store.statement(db, `UPDATE ${t.archiveGroups} SET count = count + ?, bytes = bytes + ? WHERE consumer = ? AND state = ? AND fingerprint = ?`);
    const drop = this.store.statement(db, `DELETE FROM ${t.archiveGroups} WHERE consumer = ? AND state = ? AND fingerprint = ? AND count <= 0`);
    const refresh = this.store.statement(
      db,
      `UPDATE ${t.archiveGroups} SET
         first_at = (SELECT min(failed_at) FROM ${t.archive} WHERE consumer = @c AND state = @s AND fingerprint = @f),
         last_at = (SELECT max(failed_at) FROM ${t.archive} WHERE consumer = @c AND state = @s AND fingerprint = @f),
         sample_id = (SELECT id FROM ${t.archive} WHERE consumer = @c AND state = @s AND fingerprint = @f ORDER BY failed_at DESC, id DESC LIMIT 1),
         sample_message = (SELECT error_message FROM ${t.archive} WHERE consumer = @c AND state = @s AND fingerprint = @f ORDER BY failed_at DESC, id DESC LIMIT 1)
       WHERE consumer = @c AND state = @s AND fingerprint = @f`,
    );
    for (const g of changes) {
      sub.run(g.count, g.bytes, g.consumer, g.state, g.fingerprint);
      if (Number(drop.run(g.consumer, g.state, g.fingerprint).changes) === 0) refresh.run({ c: g.consumer, s: g.state, f: g.fingerprint });
    }
  }

  private groupRows(rows: readonly RowInfo[], state?: ArchiveState) {
    return rows.map((r) => ({ consumer: r.consumer, state: state ?? r.state, fingerprint: r.fingerprint, bytes: Number(r.body_bytes), at: Number(r.failed_at), errorClass: r.error_class, errorMessage: r.error_message, id: String(r.id) }));
  }

  /** Moves rows to `state`, setting more columns, and their counts with them. */
  private changeState(db: DB, rows: readonly RowInfo[], state: ArchiveState, set: string, params: readonly unknown[]): number {
    if (rows.length === 0) return 0;
    const changed = db.prepare(`UPDATE ${this.t.archive} SET state = ?, ${set} WHERE id IN (SELECT value FROM json_each(?))`).run(state, ...params, JSON.stringify(rows.map((r) => Number(r.id))));
    this.removeGroups(db, sumGroups(this.groupRows(rows), -1));
    this.addGroups(db, sumGroups(this.groupRows(rows, state), 1));
    return Number(changed.changes);
  }

  private deleteRows(db: DB, rows: readonly RowInfo[]): ArchivePruneBatch {
    if (rows.length === 0) return { deleted: 0, unviewed: 0 };
    const t = this.t;
    const ids = JSON.stringify(rows.map((r) => Number(r.id)));
    db.prepare(`DELETE FROM ${t.archiveSearch} WHERE rowid IN (SELECT value FROM json_each(?))`).run(ids);
    db.prepare(`DELETE FROM ${t.archiveHeaders} WHERE row_id IN (SELECT value FROM json_each(?))`).run(ids);
    db.prepare(`DELETE FROM ${t.archivePayload} WHERE id IN (SELECT value FROM json_each(?))`).run(ids);
    const deleted = Number(db.prepare(`DELETE FROM ${t.archive} WHERE id IN (SELECT value FROM json_each(?))`).run(ids).changes);
    this.removeGroups(db, sumGroups(this.groupRows(rows), -1));
    return { deleted, unviewed: rows.filter((r) => r.viewed_at === null).length };
  }

  async page(query: ArchivePageQuery): Promise<ArchivePage> {
    const limit = pageLimit(query.limit);
    return this.read((db) => {
      const q = this.sql();
      const where = whereOf(query.filter, q);
      const k = keyset(query.order ?? 'newest', query.after, q);
      const rows = this.all<SummaryRow>(db, q, `SELECT ${summaryColumns('a')} FROM ${this.from(query.filter)} WHERE ${where}${k.where} ORDER BY ${k.orderBy} LIMIT ?`, limit + 1).map(toSummary);
      const more = rows.length > limit;
      if (more) rows.pop();
      return { rows, next: more ? cursorOf(rows[rows.length - 1] as ArchiveSummary) : undefined };
    }, 'read archived messages');
  }

  async count(filter: ArchiveFilter): Promise<number> {
    return this.read((db) => {
      if (onlyConsumerAndStates(filter)) {
        const states = statesOf(filter);
        const r = db.prepare(`SELECT coalesce(sum(count), 0) AS n FROM ${this.t.archiveGroups} WHERE consumer = ? AND state IN (SELECT value FROM json_each(?))`).get(filter.consumer, JSON.stringify(states)) as { n: number };
        return Number(r.n);
      }
      const q = this.sql();
      const where = whereOf(filter, q);
      return Number(this.all<{ n: number }>(db, q, `SELECT count(*) AS n FROM ${this.from(filter)} WHERE ${where}`)[0]?.n ?? 0);
    }, 'count archived messages');
  }

  async groups(filter: ArchiveFilter, limit: number): Promise<ArchiveGroup[]> {
    const n = pageLimit(limit, 10_000);
    return this.read((db) => {
      if (onlyConsumerAndStates(filter)) {
        const rows = db
          .prepare(
            `SELECT fingerprint, sum(count) AS n, min(first_at) AS first_at, max(last_at) AS last_at, max(error_class) AS error_class,
               (SELECT g2.sample_message FROM ${this.t.archiveGroups} g2 WHERE g2.consumer = g.consumer AND g2.fingerprint = g.fingerprint AND g2.state IN (SELECT value FROM json_each(@states)) ORDER BY g2.last_at DESC LIMIT 1) AS sample_message,
               (SELECT g2.sample_id FROM ${this.t.archiveGroups} g2 WHERE g2.consumer = g.consumer AND g2.fingerprint = g.fingerprint AND g2.state IN (SELECT value FROM json_each(@states)) ORDER BY g2.last_at DESC LIMIT 1) AS sample_id
             FROM ${this.t.archiveGroups} g WHERE consumer = @consumer AND state IN (SELECT value FROM json_each(@states)) GROUP BY fingerprint ORDER BY n DESC, min(first_at) ASC LIMIT @limit`,
          )
          .all({ consumer: filter.consumer, states: JSON.stringify(statesOf(filter)), limit: n }) as GroupRow[];
        return rows.map(toGroup);
      }
      const q = this.sql();
      const where = whereOf(filter, q);
      const rows = this.all<GroupRow>(
        db,
        q,
        `SELECT fingerprint, n, first_at, last_at, error_class, (SELECT error_message FROM ${this.t.archive} WHERE id = s.sample_id) AS sample_message, sample_id FROM (
           SELECT a.fingerprint AS fingerprint, count(*) AS n, min(a.failed_at) AS first_at, max(a.failed_at) AS last_at, max(a.error_class) AS error_class, max(a.id) AS sample_id
           FROM ${this.from(filter)} WHERE ${where} GROUP BY a.fingerprint) s ORDER BY n DESC, first_at ASC LIMIT ?`,
        n,
      );
      return rows.map(toGroup);
    }, 'group archived messages');
  }

  private fullRecords(db: DB, where: string, params: readonly unknown[], tail: string, from = `${this.t.archive} a`): ArchiveRecord[] {
    const rows = db.prepare(`SELECT ${summaryColumns('a')}, p.error_stack, p.headers, p.properties, p.body, p.body_text FROM ${from} JOIN ${this.t.archivePayload} p ON p.id = a.id WHERE ${where} ${tail}`).all(...params) as Array<SummaryRow & PayloadRow>;
    return rows.map(toRecord);
  }

  async get(id: string): Promise<ArchiveRecord | undefined> {
    if (!/^\d{1,19}$/.test(id)) return undefined;
    return this.read((db) => this.fullRecords(db, 'a.id = ?', [Number(id)], '')[0], 'read an archived message');
  }

  async records(filter: ArchiveFilter, limit: number, after?: string): Promise<{ rows: ArchiveRecord[]; next: string | undefined }> {
    const n = pageLimit(limit);
    return this.read((db) => {
      const q = this.sql();
      const where = whereOf(filter, q);
      const k = keyset('oldest', after, q);
      try {
        const rows = this.fullRecords(db, `${where}${k.where}`, q.params, `ORDER BY ${k.orderBy} LIMIT ${n}`, this.from(filter));
        return { rows, next: rows.length === n ? cursorOf(rows[rows.length - 1] as ArchiveRecord) : undefined };
      } finally {
        q.done();
      }
    }, 'read archived messages');
  }

  async history(consumer: string, messageId: string, limit: number): Promise<ArchiveSummary[]> {
    const n = pageLimit(limit);
    return this.read(
      (db) => (db.prepare(`SELECT ${summaryColumns('a')} FROM ${this.from({ consumer, messageIds: [messageId] })} WHERE a.consumer = ? AND a.message_id = ? ORDER BY a.failed_at, a.id LIMIT ?`).all(consumer, messageId, n) as SummaryRow[]).map(toSummary),
      'read a message history',
    );
  }

  async counts(consumer?: string): Promise<ArchiveCounts[]> {
    return this.read((db) => {
      const rows = db
        .prepare(`SELECT consumer, state, sum(count) AS n, sum(bytes) AS bytes, min(first_at) AS oldest FROM ${this.t.archiveGroups}${consumer === undefined ? '' : ' WHERE consumer = ?'} GROUP BY consumer, state ORDER BY consumer`)
        .all(...(consumer === undefined ? [] : [consumer])) as Array<{ consumer: string; state: ArchiveState; n: number; bytes: number; oldest: number | null }>;
      return assembleCounts(rows.map((r) => ({ consumer: r.consumer, state: r.state, n: Number(r.n), bytes: Number(r.bytes), oldest: r.oldest === null ? null : new Date(Number(r.oldest)) })), consumer);
    }, 'count the archive');
  }

  search(): Promise<ArchiveSearch> {
    return Promise.resolve({ errorText: 'scan', body: 'fts5', note: undefined });
  }

  async lastId(): Promise<string | undefined> {
    return this.read((db) => {
      const r = db.prepare(`SELECT max(id) AS id FROM ${this.t.archive}`).get() as { id: number | bigint | null };
      return r.id === null ? undefined : String(r.id);
    }, 'read the archive');
  }

  async claim(filter: ArchiveFilter, options: ArchiveClaimOptions): Promise<{ rows: ArchiveRecord[]; next: string | undefined }> {
    const n = pageLimit(options.limit, 10_000);
    return this.write((db) => {
      const now = Date.now();
      const q = this.sql();
      const free_ = q.param(now);
      const where = whereOf(filter, q);
      const k = keyset('oldest', options.after, q);
      // The cursor moves past held rows too: a claim never waits for another's.
      const seen = this.all<{ id: number | bigint; failed_at: number; free: number }>(db, q, `SELECT a.id, a.failed_at, (a.claim_until IS NULL OR a.claim_until < ${free_}) AS free FROM ${this.from(filter)} WHERE ${where}${k.where} ORDER BY ${k.orderBy} LIMIT ?`, n);
      const free = seen.filter((r) => Number(r.free) === 1).map((r) => Number(r.id));
      const last = seen[seen.length - 1];
      const next = seen.length === n && last !== undefined ? cursorOf({ failedAt: new Date(Number(last.failed_at)), id: String(last.id) }) : undefined;
      if (free.length === 0) return { rows: [], next };
      db.prepare(`UPDATE ${this.t.archive} SET claim_owner = ?, claim_until = ? WHERE id IN (SELECT value FROM json_each(?))`).run(options.owner, now + options.leaseMs, JSON.stringify(free));
      return { rows: this.fullRecords(db, 'a.id IN (SELECT value FROM json_each(?))', [JSON.stringify(free)], 'ORDER BY a.failed_at, a.id'), next };
    }, 'claim archived messages');
  }

  async markReplayed(ids: readonly string[], mark: ArchiveReplayMark): Promise<number> {
    if (ids.length === 0) return 0;
    return this.write((db) => {
      const rows = db.prepare(`SELECT ${INFO} FROM ${this.t.archive} a WHERE a.id IN (SELECT value FROM json_each(?)) AND a.claim_owner = ?`).all(JSON.stringify(ids.map(Number)), mark.owner) as RowInfo[];
      return this.changeState(db, rows, 'replayed', 'replay_count = replay_count + 1, replayed_at = ?, replayed_by = ?, claim_owner = NULL, claim_until = NULL', [mark.at.getTime(), mark.actor]);
    }, 'mark archived messages replayed');
  }

  async release(ids: readonly string[], owner: string): Promise<number> {
    if (ids.length === 0) return 0;
    return this.write((db) => Number(db.prepare(`UPDATE ${this.t.archive} SET claim_owner = NULL, claim_until = NULL WHERE id IN (SELECT value FROM json_each(?)) AND claim_owner = ?`).run(JSON.stringify(ids.map(Number)), owner).changes), 'release archived messages');
  }

  /** Up to `limit` matching rows that no live claim holds. */
  private selectFree(db: DB, filter: ArchiveFilter, limit: number, extra = ''): RowInfo[] {
    const q = this.sql();
    const where = whereOf(filter, q);
    return this.all<RowInfo>(db, q, `SELECT ${INFO} FROM ${this.from(filter)} WHERE ${where}${extra} AND (a.claim_until IS NULL OR a.claim_until < ?) ORDER BY a.failed_at, a.id LIMIT ?`, Date.now(), limit);
  }

  async resolve(filter: ArchiveFilter, mark: ArchiveResolveMark, limit: number): Promise<number> {
    const n = pageLimit(limit, 10_000);
    return this.write((db) => {
      const rows = this.selectFree(db, filter, n, ` AND a.state <> 'resolved'`);
      return this.changeState(db, rows, 'resolved', 'resolved_at = ?, resolved_by = ?, resolve_reason = ?', [mark.at.getTime(), mark.actor, mark.reason]);
    }, 'resolve archived messages');
  }

  async purge(filter: ArchiveFilter, limit: number): Promise<number> {
    const n = pageLimit(limit, 10_000);
    return this.write((db) => this.deleteRows(db, this.selectFree(db, filter, n)).deleted, 'purge archived messages');
  }

  async markViewed(ids: readonly string[], at: Date): Promise<void> {
    if (ids.length === 0) return;
    return this.write((db) => void db.prepare(`UPDATE ${this.t.archive} SET viewed_at = ? WHERE id IN (SELECT value FROM json_each(?))`).run(at.getTime(), JSON.stringify(ids.map(Number))), 'note archived messages viewed');
  }

  /** The rows of a rule, oldest first: older than `before`, or past the newest `keep`. */
  private pruneWhere(db: DB, rule: ArchivePruneRule): { where: string; params: unknown[] } | undefined {
    const parts: string[] = [];
    const params: unknown[] = [rule.consumer];
    if (rule.before !== undefined) {
      parts.push('a.failed_at < ?');
      params.push(rule.before.getTime());
    }
    if (rule.keep !== undefined) {
      const edge = db.prepare(`SELECT failed_at, id FROM ${this.t.archive} WHERE consumer = ? ORDER BY failed_at DESC, id DESC LIMIT 1 OFFSET ?`).get(rule.consumer, rule.keep) as { failed_at: number; id: number } | undefined;
      if (edge !== undefined) {
        parts.push('(a.failed_at, a.id) <= (?, ?)');
        params.push(edge.failed_at, edge.id);
      }
    }
    if (parts.length === 0) return undefined;
    return { where: `a.consumer = ? AND (${parts.join(' OR ')})`, params };
  }

  async prunable(rule: ArchivePruneRule): Promise<ArchivePruneBatch> {
    return this.read((db) => {
      const w = this.pruneWhere(db, rule);
      if (w === undefined) return { deleted: 0, unviewed: 0 };
      const r = db.prepare(`SELECT count(*) AS n, count(*) - count(a.viewed_at) AS unviewed FROM ${this.t.archive} a WHERE ${w.where}`).get(...w.params) as { n: number; unviewed: number };
      return { deleted: Number(r.n), unviewed: Number(r.unviewed) };
    }, 'count rows retention would delete');
  }

  async prune(rule: ArchivePruneRule, limit: number): Promise<ArchivePruneBatch> {
    const n = pageLimit(limit, 10_000);
    return this.write((db) => {
      const w = this.pruneWhere(db, rule);
      if (w === undefined) return { deleted: 0, unviewed: 0 };
      const rows = db.prepare(`SELECT ${INFO} FROM ${this.t.archive} a WHERE ${w.where} ORDER BY a.failed_at, a.id LIMIT ?`).all(...w.params, n) as RowInfo[];
      return this.deleteRows(db, rows);
    }, 'prune the archive');
  }
}

interface PayloadRow {
  error_stack: string | null;
  headers: string;
  properties: string;
  body: Buffer | null;
  body_text: string | null;
}

function toRecord(r: SummaryRow & PayloadRow): ArchiveRecord {
  return { ...toSummary(r), errorStack: r.error_stack, headers: r.headers, properties: r.properties, body: r.body_text !== null ? Buffer.from(r.body_text, 'utf8') : (r.body ?? Buffer.alloc(0)) };
}
