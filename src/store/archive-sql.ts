/**
 * The SQL both backends share for the archive's tables: the WHERE clause of a filter,
 * the keyset of a page, and the row shapes. A backend gives its dialect (placeholders,
 * times, text search); the statements are its own. Pure.
 */
import { InvalidOptionError } from '../errors.js';
import type { ArchiveCounts, ArchiveFilter, ArchiveGroup, ArchiveState, ArchiveSummary, StorePattern } from './archive.js';

/** Characters of a text body that full-text search indexes (PostgreSQL's tsvector holds at most 1 MB). */
export const SEARCHABLE_BODY_CHARS = 65_536;

/** What differs between the backends in a WHERE clause. */
export interface ArchiveDialect {
  /** Adds a parameter; returns its placeholder. */
  param(value: unknown): string;
  /** A time as the backend stores it (Unix ms on SQLite, a Date for PostgreSQL). */
  time(d: Date): unknown;
  /** A list of ids as one condition on `column`. */
  inList(column: string, values: readonly string[], type: 'bigint' | 'text'): string;
  /** Error text contains `needle`, any case. */
  contains(column: string, needle: string): string;
  /** Error text matches the pattern. */
  matches(column: string, pattern: StorePattern): string;
  /** Equal, any case. */
  equalsAnyCase(column: string, value: string): string;
  /** The routing key matches a topic pattern with wildcards. */
  topic(column: string, pattern: string): string;
  /** Row ids whose body holds these words in order (a subquery). */
  bodyRows(words: string): string;
  /** The header index table, qualified. */
  readonly headersTable: string;
}

/** The archive's columns a summary reads, for `SELECT`. */
export const SUMMARY_COLUMNS = [
  'id', 'consumer', 'identity', 'message_id', 'routing_key', 'exchange', 'error_class', 'error_message', 'reason', 'attempts', 'replays', 'fingerprint',
  'failed_at', 'parked_at', 'archived_at', 'state', 'replay_count', 'replayed_at', 'replayed_by', 'resolved_at', 'resolved_by', 'resolve_reason', 'viewed_at', 'body_bytes', 'not_indexed',
] as const;

/** A summary row as a driver returns it (times as the backend gives them). */
export type SummaryRow = Record<(typeof SUMMARY_COLUMNS)[number], unknown>;

/** `a.id, a.consumer, …` */
export function summaryColumns(alias: string): string {
  return SUMMARY_COLUMNS.map((c) => `${alias}.${c}`).join(', ');
}

function num(v: unknown): number {
  return typeof v === 'bigint' ? Number(v) : Number(v);
}

function strOrNull(v: unknown): string | null {
  return v === null || v === undefined ? null : String(v);
}

/** A stored time (ms, a Date, or text) as a Date. */
export function toDate(v: unknown): Date {
  if (v instanceof Date) return v;
  return new Date(typeof v === 'string' && !/^\d+$/.test(v) ? v : num(v));
}

function dateOrNull(v: unknown): Date | null {
  return v === null || v === undefined ? null : toDate(v);
}

/** A driver's row as an {@link ArchiveSummary}. */
export function toSummary(r: SummaryRow): ArchiveSummary {
  return {
    id: String(r.id),
    consumer: String(r.consumer),
    identity: String(r.identity),
    messageId: strOrNull(r.message_id),
    routingKey: String(r.routing_key),
    exchange: strOrNull(r.exchange),
    errorClass: strOrNull(r.error_class),
    errorMessage: strOrNull(r.error_message),
    reason: strOrNull(r.reason),
    attempts: r.attempts === null || r.attempts === undefined ? null : num(r.attempts),
    replays: num(r.replays),
    fingerprint: String(r.fingerprint),
    failedAt: toDate(r.failed_at),
    parkedAt: dateOrNull(r.parked_at),
    archivedAt: toDate(r.archived_at),
    state: String(r.state) as ArchiveState,
    replayCount: num(r.replay_count),
    replayedAt: dateOrNull(r.replayed_at),
    replayedBy: strOrNull(r.replayed_by),
    resolvedAt: dateOrNull(r.resolved_at),
    resolvedBy: strOrNull(r.resolved_by),
    resolveReason: strOrNull(r.resolve_reason),
    viewedAt: dateOrNull(r.viewed_at),
    bodyBytes: num(r.body_bytes),
    notIndexed: strOrNull(r.not_indexed),
  };
}

/** The states a filter selects. */
export function statesOf(f: ArchiveFilter): readonly ArchiveState[] {
  return f.states === undefined || f.states.length === 0 ? ['open'] : f.states;
}

/** True when the filter names only the consumer and states: the group table answers it. */
export function onlyConsumerAndStates(f: ArchiveFilter): boolean {
  return Object.entries(f).every(([k, v]) => k === 'consumer' || k === 'states' || v === undefined);
}

/** Escapes `%`, `_` and `\` for LIKE … ESCAPE '\'. */
export function likeContains(needle: string): string {
  return `%${needle.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/** A topic pattern as a regular expression over `'.' || routing_key` (each word one `\.word`). */
export function topicRegex(pattern: string): string {
  const units = pattern.split('.').map((w) => (w === '#' ? '(\\.[^.]*)*' : w === '*' ? '\\.[^.]*' : `\\.${w.replace(/[\\^$.|?*+()[\]{}]/g, (c) => `\\${c}`)}`));
  return `^${units.join('')}$`;
}

/** True when a routing-key filter has wildcards. */
export function isTopicPattern(pattern: string): boolean {
  return pattern.split('.').some((w) => w === '*' || w === '#');
}

/**
 * The conditions of a filter on the archive table aliased `a`, joined by AND. The
 * consumer always comes first, so every statement runs on an index that starts with it.
 */
export function whereOf(f: ArchiveFilter, d: ArchiveDialect): string {
  const parts: string[] = [`a.consumer = ${d.param(f.consumer)}`];
  const states = statesOf(f);
  if (states.length < 3) parts.push(states.length === 1 ? `a.state = ${d.param(states[0])}` : `a.state IN (${states.map((s) => d.param(s)).join(', ')})`);
  if (f.ids !== undefined && f.ids.length > 0) parts.push(d.inList('a.id', f.ids, 'bigint'));
  if (f.throughId !== undefined) parts.push(`a.id <= ${d.param(f.throughId)}`);
  if (f.error !== undefined) parts.push('contains' in f.error ? d.contains('a.error_message', f.error.contains) : d.matches('a.error_message', f.error.pattern));
  if (f.errorClass !== undefined) parts.push(d.equalsAnyCase('a.error_class', f.errorClass));
  if (f.since !== undefined) parts.push(`a.failed_at >= ${d.param(d.time(f.since))}`);
  if (f.until !== undefined) parts.push(`a.failed_at < ${d.param(d.time(f.until))}`);
  if (f.routingKey !== undefined) parts.push(isTopicPattern(f.routingKey) ? d.topic('a.routing_key', f.routingKey) : `a.routing_key = ${d.param(f.routingKey)}`);
  if (f.messageIds !== undefined && f.messageIds.length > 0) parts.push(d.inList('a.message_id', f.messageIds, 'text'));
  if (f.fingerprint !== undefined) parts.push(`a.fingerprint = ${d.param(f.fingerprint)}`);
  if (f.reason !== undefined) parts.push(`a.reason = ${d.param(f.reason)}`);
  for (const h of f.headers ?? []) {
    // The header index holds the failure time: a time range narrows it before the join.
    // (Placeholders are taken in the order they appear: SQLite's are positional.)
    let sub = `a.id IN (SELECT h.row_id FROM ${d.headersTable} h WHERE h.consumer = ${d.param(f.consumer)} AND h.name = ${d.param(h.name)} AND h.value = ${d.param(h.value)}`;
    if (f.since !== undefined) sub += ` AND h.failed_at >= ${d.param(d.time(f.since))}`;
    if (f.until !== undefined) sub += ` AND h.failed_at < ${d.param(d.time(f.until))}`;
    parts.push(`${sub})`);
  }
  if (f.body !== undefined) parts.push(`a.id IN (${d.bodyRows(f.body)})`);
  return parts.join(' AND ');
}

/**
 * True when a page of this filter is best read in time order, a window of the
 * consumer's rows at a time: it has conditions no index of their own answers in the
 * page's order (error text, class, routing key, reason, headers, body), and none that
 * narrows to a few rows by an index (ids, message ids, a fingerprint's group index).
 * PostgreSQL's planner would otherwise often take every row a trigram or full-text index
 * gives (a tenant's 100,000 failures) and sort them for a page of 50.
 */
export function readsInTimeOrder(f: ArchiveFilter): boolean {
  if ((f.ids?.length ?? 0) > 0 || (f.messageIds?.length ?? 0) > 0 || f.fingerprint !== undefined) return false;
  return f.error !== undefined || f.errorClass !== undefined || f.routingKey !== undefined || f.reason !== undefined || (f.headers?.length ?? 0) > 0 || f.body !== undefined;
}

/** The part of a filter the time index answers: consumer, time range, row id bound. */
export function timeRangeOf(f: ArchiveFilter): ArchiveFilter {
  return { consumer: f.consumer, states: ['open', 'replayed', 'resolved'], ...(f.since !== undefined ? { since: f.since } : {}), ...(f.until !== undefined ? { until: f.until } : {}), ...(f.throughId !== undefined ? { throughId: f.throughId } : {}) };
}

/** A page position: failure time (ms) and row id. */
export interface Cursor {
  readonly at: number;
  readonly id: string;
}

/** The opaque text of a cursor. */
export function encodeCursor(c: Cursor): string {
  return `${c.at}.${c.id}`;
}

/** Reads a cursor; a clear error for anything else. */
export function decodeCursor(text: string, option = 'after'): Cursor {
  const m = /^(-?\d{1,16})\.(\d{1,19})$/.exec(text);
  if (!m) throw new InvalidOptionError(option, `${JSON.stringify(text.slice(0, 60))} is not a page position`, 'Pass the `next` of the previous page as it was given.');
  return { at: Number(m[1]), id: m[2] as string };
}

/** The keyset condition and order of a page. */
export function keyset(order: 'newest' | 'oldest', after: string | undefined, d: ArchiveDialect): { where: string; orderBy: string } {
  const dir = order === 'newest' ? 'DESC' : 'ASC';
  const orderBy = `a.failed_at ${dir}, a.id ${dir}`;
  if (after === undefined) return { where: '', orderBy };
  const c = decodeCursor(after);
  return { where: ` AND (a.failed_at, a.id) ${order === 'newest' ? '<' : '>'} (${d.param(d.time(new Date(c.at)))}, ${d.param(c.id)})`, orderBy };
}

/** The cursor after a row. */
export function cursorOf(row: { readonly failedAt: Date; readonly id: string }): string {
  return encodeCursor({ at: row.failedAt.getTime(), id: row.id });
}

/** A page size, bounded. */
export function pageLimit(limit: number | undefined, max = 1000): number {
  const n = limit ?? 50;
  if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidOptionError('limit', `${JSON.stringify(n)} is not a whole number from 1 to ${max}`);
  return n;
}

/** One row's part in the group table, as a change: +1 into a group, or -1 out of one. */
export interface GroupChange {
  readonly consumer: string;
  readonly state: ArchiveState;
  readonly fingerprint: string;
  count: number;
  bytes: number;
  firstAt: number;
  lastAt: number;
  errorClass: string | null;
  sampleMessage: string | null;
  sampleId: string | null;
}

/** Sums changes by group; sorted, so concurrent transactions lock group rows in one order. */
export function sumGroups(rows: Iterable<{ consumer: string; state: ArchiveState; fingerprint: string; bytes: number; at: number; errorClass: string | null; errorMessage: string | null; id: string }>, sign: 1 | -1): GroupChange[] {
  const groups = new Map<string, GroupChange>();
  for (const r of rows) {
    const key = `${r.consumer}\u0000${r.state}\u0000${r.fingerprint}`;
    const g = groups.get(key);
    if (g === undefined) groups.set(key, { consumer: r.consumer, state: r.state, fingerprint: r.fingerprint, count: sign, bytes: sign * r.bytes, firstAt: r.at, lastAt: r.at, errorClass: r.errorClass, sampleMessage: r.errorMessage, sampleId: r.id });
    else {
      g.count += sign;
      g.bytes += sign * r.bytes;
      g.firstAt = Math.min(g.firstAt, r.at);
      if (r.at >= g.lastAt) {
        g.lastAt = r.at;
        g.sampleMessage = r.errorMessage;
        g.sampleId = r.id;
      }
    }
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, g]) => g);
}

/** A group as a driver returns it. */
export interface GroupRow {
  fingerprint: string;
  n: number | bigint | string;
  first_at: unknown;
  last_at: unknown;
  error_class: string | null;
  sample_message: string | null;
  sample_id: unknown;
}

/** A group row of either backend. */
export function toGroup(r: GroupRow): ArchiveGroup {
  const date = (v: unknown) => (v === null || v === undefined ? null : v instanceof Date ? v : new Date(Number(v)));
  return { fingerprint: r.fingerprint, errorClass: r.error_class, count: Number(r.n), firstSeen: date(r.first_at), lastSeen: date(r.last_at), sampleMessage: r.sample_message, sampleId: r.sample_id === null || r.sample_id === undefined ? null : String(r.sample_id) };
}

/** Counts per consumer from per-state sums. */
export function assembleCounts(rows: ReadonlyArray<{ consumer: string; state: ArchiveState; n: number; bytes: number; oldest: Date | null }>, consumer: string | undefined): ArchiveCounts[] {
  const by = new Map<string, { open: number; replayed: number; resolved: number; bytes: number; oldestOpenAt: Date | null; oldestAt: Date | null }>();
  if (consumer !== undefined) by.set(consumer, { open: 0, replayed: 0, resolved: 0, bytes: 0, oldestOpenAt: null, oldestAt: null });
  for (const r of rows) {
    let c = by.get(r.consumer);
    if (c === undefined) by.set(r.consumer, (c = { open: 0, replayed: 0, resolved: 0, bytes: 0, oldestOpenAt: null, oldestAt: null }));
    c[r.state] += r.n;
    c.bytes += r.bytes;
    if (r.state === 'open') c.oldestOpenAt = r.oldest;
    if (r.oldest !== null && (c.oldestAt === null || r.oldest < c.oldestAt)) c.oldestAt = r.oldest;
  }
  return [...by.entries()].map(([name, c]) => ({ consumer: name, ...c }));
}
