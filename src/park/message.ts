import { HEADER } from '../headers.js';
import { failureFingerprint } from './failure.js';

/** The parts of an AMQP message the parked-queue operations read: what `basic.get` returns. */
export interface RawMessage {
  readonly content: Buffer;
  readonly fields: { readonly routingKey: string; readonly exchange: string; readonly redelivered?: boolean };
  readonly properties: {
    readonly messageId?: unknown;
    readonly headers?: Readonly<Record<string, unknown>> | undefined;
    readonly contentType?: unknown;
    readonly contentEncoding?: unknown;
    readonly correlationId?: unknown;
    readonly timestamp?: unknown;
    readonly type?: unknown;
    readonly appId?: unknown;
    readonly priority?: unknown;
    readonly replyTo?: unknown;
  };
}

/**
 * One parked message as an operator reads it: the failure warren attached, where it
 * came from, and the message itself. Fields warren did not write (a message parked
 * by the broker's own dead-lettering, or by another tool) are `undefined`.
 */
export interface ParkedMessage {
  /** 1-based place in the parked queue when it was read (1 = the head). */
  readonly position: number;
  readonly messageId: string | undefined;
  /** The routing key it was first published with (`warren-routing-key`, else the broker's `x-death` record). */
  readonly routingKey: string;
  /** The exchange it was first published to. */
  readonly exchange: string | undefined;
  /** Consumer that parked it. */
  readonly consumer: string | undefined;
  readonly errorClass: string | undefined;
  readonly errorMessage: string | undefined;
  /** First stack frames, one per line. */
  readonly errorStack: string | undefined;
  /** Failed handler runs. */
  readonly attempts: number | undefined;
  /** Why it was parked: a {@link ParkReason}, or the broker's dead-letter reason (e.g. `delivery_limit`). */
  readonly reason: string | undefined;
  readonly firstFailedAt: Date | undefined;
  readonly lastFailedAt: Date | undefined;
  readonly parkedAt: Date | undefined;
  /** When it last failed: the last failure, else when it was parked. Time filters use this. */
  readonly failedAt: Date | undefined;
  /** Times it was replayed before. */
  readonly replays: number;
  readonly replayedAt: Date | undefined;
  /** Groups messages failing for the same cause; see {@link failureFingerprint}. */
  readonly fingerprint: string;
  readonly headers: Readonly<Record<string, unknown>>;
  readonly properties: RawMessage['properties'];
  readonly content: Buffer;
}

/** A JSON-friendly summary of a parked message, without body and headers: what `list` shows. */
export interface ParkedSummary {
  readonly position: number;
  readonly messageId: string | null;
  readonly routingKey: string;
  readonly exchange: string | null;
  readonly errorClass: string | null;
  readonly errorMessage: string | null;
  readonly attempts: number | null;
  readonly reason: string | null;
  readonly failedAt: string | null;
  readonly firstFailedAt: string | null;
  readonly replays: number;
  readonly fingerprint: string;
}

function str(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}

function int(value: unknown): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'bigint' ? Number(value) : typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : NaN;
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** amqplib decodes some AMQP field types as `{ '!': type, value }`, e.g. timestamps. */
function typedValue(value: unknown): { type: string; value: unknown } | undefined {
  if (typeof value !== 'object' || value === null || Buffer.isBuffer(value) || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  return typeof v['!'] === 'string' && 'value' in v ? { type: v['!'], value: v['value'] } : undefined;
}

/** Reads an ISO string, or an AMQP timestamp (seconds, plain or typed), as a date. */
export function asDate(value: unknown): Date | undefined {
  let d: Date | undefined;
  const typed = typedValue(value);
  if (typed) return asDate(typeof typed.value === 'bigint' ? Number(typed.value) : typed.value);
  if (typeof value === 'string' && value) d = new Date(value);
  else if (typeof value === 'number' && Number.isFinite(value)) d = new Date(value * 1000);
  else if (value instanceof Date) d = value;
  return d && !Number.isNaN(d.getTime()) ? d : undefined;
}

/** The broker's dead-letter records (`x-death`), newest first, malformed entries skipped. */
export interface DeathRecord {
  readonly queue: string;
  readonly reason: string;
  readonly count: number;
  readonly exchange: string | undefined;
  readonly routingKeys: readonly string[];
  readonly time: Date | undefined;
}

/** Reads the `x-death` header, skipping anything malformed. */
export function deathRecords(headers: Readonly<Record<string, unknown>>): DeathRecord[] {
  const raw = headers['x-death'];
  if (!Array.isArray(raw)) return [];
  const out: DeathRecord[] = [];
  for (const entry of raw as unknown[]) {
    if (typeof entry !== 'object' || entry === null) continue;
    const e = entry as Record<string, unknown>;
    const queue = str(e['queue']);
    const reason = str(e['reason']);
    if (queue === undefined || reason === undefined) continue;
    const keys = Array.isArray(e['routing-keys']) ? (e['routing-keys'] as unknown[]).map(str).filter((k): k is string => k !== undefined) : [];
    const countValue = typedValue(e['count'])?.value ?? e['count'];
    out.push({ queue, reason, count: int(countValue) ?? 1, exchange: str(e['exchange']), routingKeys: keys, time: asDate(e['time']) });
  }
  return out;
}

/** The routing key and exchange a parked message was first published with. */
function originOf(headers: Readonly<Record<string, unknown>>, deaths: readonly DeathRecord[], fallbackRoutingKey: string): { routingKey: string; exchange: string | undefined } {
  // The oldest record is the first dead-lettering: the message's own routing key and exchange.
  const oldest = deaths[deaths.length - 1];
  const routingKey = str(headers[HEADER.routingKey]) ?? oldest?.routingKeys[0] ?? str(headers['x-first-death-routing-key']) ?? fallbackRoutingKey;
  const exchange = str(headers[HEADER.exchange]) ?? oldest?.exchange ?? str(headers['x-first-death-exchange']);
  return { routingKey, exchange };
}

/** What {@link replayHeaders} reads of a parked message. */
export type ReplaySource = Pick<ParkedMessage, 'headers' | 'routingKey' | 'exchange' | 'replays'>;

/**
 * The part of {@link toParkedMessage} a replay needs, from a parked message's headers and
 * the routing key it was parked with: no fingerprint, no times. Pure.
 */
export function replaySource(headers: Readonly<Record<string, unknown>>, routingKey: string): ReplaySource {
  const h = headers[HEADER.routingKey];
  const x = headers[HEADER.exchange];
  // warren parked it (both headers set): no dead-letter record to read.
  const origin = typeof h === 'string' && typeof x === 'string' ? { routingKey: h, exchange: x } : originOf(headers, deathRecords(headers), routingKey);
  return { headers, routingKey: origin.routingKey, exchange: origin.exchange, replays: int(headers[HEADER.replays]) ?? 0 };
}

/**
 * Decodes a message read from a parked queue. Pure: it reads warren's headers, and
 * falls back to the broker's `x-death` record for messages the broker parked itself
 * (a quorum queue's delivery limit), whose routing key is then the dead-letter key.
 */
export function toParkedMessage(raw: RawMessage, position: number): ParkedMessage {
  const headers = (raw.properties.headers ?? {}) as Readonly<Record<string, unknown>>;
  const deaths = deathRecords(headers);
  const { routingKey, exchange } = originOf(headers, deaths, raw.fields.routingKey);
  const errorClass = str(headers[HEADER.errorClass]);
  const errorMessage = str(headers[HEADER.errorMessage]);
  const errorStack = str(headers[HEADER.errorStack]);
  const lastFailedAt = asDate(headers[HEADER.lastFailedAt]);
  const parkedAt = asDate(headers[HEADER.parkedAt]);
  const newest = deaths[0];
  const reason = str(headers[HEADER.parkedReason]) ?? (newest && newest.reason !== 'expired' ? newest.reason : undefined);
  const messageId = str(raw.properties.messageId);
  return {
    position,
    messageId: messageId === '' ? undefined : messageId,
    routingKey,
    exchange,
    consumer: str(headers[HEADER.consumer]),
    errorClass,
    errorMessage,
    errorStack,
    attempts: int(headers[HEADER.attempts]),
    reason,
    firstFailedAt: asDate(headers[HEADER.firstFailedAt]),
    lastFailedAt,
    parkedAt,
    failedAt: lastFailedAt ?? parkedAt ?? (reason !== undefined ? newest?.time : undefined),
    replays: int(headers[HEADER.replays]) ?? 0,
    replayedAt: asDate(headers[HEADER.replayedAt]),
    fingerprint: failureFingerprint(errorClass ?? (reason ? `(${reason})` : '(unknown)'), errorMessage ?? '', errorStack ?? ''),
    headers,
    properties: raw.properties,
    content: raw.content,
  };
}

/** The summary `list` shows, JSON-friendly (dates as ISO strings, `null` for absent). */
export function summarize(m: ParkedMessage): ParkedSummary {
  return {
    position: m.position,
    messageId: m.messageId ?? null,
    routingKey: m.routingKey,
    exchange: m.exchange ?? null,
    errorClass: m.errorClass ?? null,
    errorMessage: m.errorMessage ?? null,
    attempts: m.attempts ?? null,
    reason: m.reason ?? null,
    failedAt: m.failedAt?.toISOString() ?? null,
    firstFailedAt: m.firstFailedAt?.toISOString() ?? null,
    replays: m.replays,
    fingerprint: m.fingerprint,
  };
}

/** A body as a person should see it. */
export type DecodedBody =
  | { readonly kind: 'json'; readonly value: unknown }
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'binary'; readonly base64: string; readonly bytes: number };

/** JSON when it parses, else text when it is valid UTF-8, else base64. */
export function decodeBody(content: Buffer): DecodedBody {
  const text = content.toString('utf8');
  const validUtf8 = Buffer.from(text, 'utf8').equals(content);
  if (validUtf8) {
    try {
      return { kind: 'json', value: JSON.parse(text) as unknown };
    } catch {
      return { kind: 'text', text };
    }
  }
  return { kind: 'binary', base64: content.toString('base64'), bytes: content.length };
}

/** Header values made JSON-friendly: buffers as text (or base64), big integers as numbers, dates as ISO. */
export function plainValue(value: unknown): unknown {
  const typed = typedValue(value);
  if (typed) return typed.type === 'timestamp' ? (asDate(typed.value)?.toISOString() ?? plainValue(typed.value)) : plainValue(typed.value);
  if (Buffer.isBuffer(value)) {
    const text = value.toString('utf8');
    return Buffer.from(text, 'utf8').equals(value) ? text : { base64: value.toString('base64') };
  }
  if (typeof value === 'bigint') return Number(value);
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(plainValue);
  if (typeof value === 'object' && value !== null) {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, plainValue(v)]));
  }
  return value;
}

/** One step in a parked message's history, oldest first. */
export interface HistoryEntry {
  readonly at: Date | undefined;
  readonly event: 'first-failure' | 'retry-wait' | 'dead-lettered' | 'last-failure' | 'parked' | 'replayed';
  readonly detail: string;
}

/**
 * What can be told of a message's attempts from its headers: first and last failure,
 * the broker's record of the retry tiers it waited in, when and why it was parked,
 * and earlier replays. Oldest first; entries without a time keep their logical place.
 */
export function attemptHistory(m: ParkedMessage): HistoryEntry[] {
  const out: HistoryEntry[] = [];
  const attempts = m.attempts;
  if (m.firstFailedAt && (attempts === undefined || attempts > 1)) out.push({ at: m.firstFailedAt, event: 'first-failure', detail: 'attempt 1 failed' });
  for (const d of deathRecords(m.headers).reverse()) {
    const times = d.count === 1 ? 'once' : `${d.count} times`;
    if (d.reason === 'expired') out.push({ at: d.time, event: 'retry-wait', detail: `waited in ${d.queue} ${times} (last at ${d.time?.toISOString() ?? 'unknown time'})` });
    else out.push({ at: d.time, event: 'dead-lettered', detail: `dead-lettered by the broker from ${d.queue}: ${d.reason} (${times})` });
  }
  if (m.lastFailedAt) {
    const what = [m.errorClass, m.errorMessage].filter(Boolean).join(': ');
    out.push({ at: m.lastFailedAt, event: 'last-failure', detail: `attempt ${attempts ?? '?'} failed${what ? `: ${what}` : ''}` });
  }
  if (m.parkedAt || m.reason) out.push({ at: m.parkedAt, event: 'parked', detail: `parked: ${m.reason ?? 'reason unknown'}${attempts !== undefined ? ` after ${attempts} attempt${attempts === 1 ? '' : 's'}` : ''}` });
  if (m.replays > 0) out.push({ at: m.replayedAt, event: 'replayed', detail: `replayed ${m.replays} time${m.replays === 1 ? '' : 's'} before; last at ${m.replayedAt?.toISOString() ?? 'unknown time'}` });
  return out;
}

/** Headers the broker writes for its own bookkeeping: a copy warren publishes never carries them. */
export const BROKER_HEADERS = ['x-death', 'x-first-death-queue', 'x-first-death-reason', 'x-first-death-exchange', 'x-last-death-queue', 'x-last-death-reason', 'x-last-death-exchange', 'x-delivery-count', 'x-acquired-count'];

/**
 * True for a header the broker owns: `x-death`, `x-first-death-*`, `x-last-death-*`,
 * `x-delivery-count` and (RabbitMQ 4.3) `x-acquired-count`. A copy that carried a forged or malformed `x-death` crashes a
 * RabbitMQ 3.10 queue when the copy is dead-lettered again (a retry tier's TTL).
 */
export function isBrokerHeader(name: string): boolean {
  // Every one starts "x-": most names are ruled out by their first character.
  if (name.charCodeAt(0) !== 0x78 || name.charCodeAt(1) !== 0x2d) return false;
  return name === 'x-death' || name === 'x-delivery-count' || name === 'x-acquired-count' || name.startsWith('x-first-death-') || name.startsWith('x-last-death-');
}

/** True when `headers` holds one of the broker's own headers ({@link isBrokerHeader}). */
export function hasBrokerHeader(headers: Readonly<Record<string, unknown>>): boolean {
  for (const k in headers) if (isBrokerHeader(k)) return true;
  return false;
}

/** A copy of `headers` without the broker's own headers. Pure. */
export function withoutBrokerHeaders(headers: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k in headers) {
    if (Object.hasOwn(headers, k) && !isBrokerHeader(k)) out[k] = headers[k];
  }
  return out;
}

/** Encoded size of one AMQP field value, as amqplib writes it (an upper bound for numbers). */
function fieldBytes(value: unknown, depth: number): number {
  if (depth > 64) return Infinity; // amqplib would recurse until the stack runs out
  if (typeof value === 'string') return 5 + Buffer.byteLength(value, 'utf8');
  if (typeof value === 'number' || typeof value === 'bigint' || value instanceof Date) return 9;
  if (typeof value === 'boolean') return 2;
  if (value === null || value === undefined) return 1;
  if (Buffer.isBuffer(value)) return 5 + value.length;
  if (Array.isArray(value)) return 5 + value.reduce((n: number, v: unknown) => n + fieldBytes(v, depth + 1), 0);
  const typed = typedValue(value);
  if (typed) return typed.type === 'decimal' ? 6 : fieldBytes(typed.value, depth + 1);
  if (typeof value === 'object') return 1 + tableBytes(value as Record<string, unknown>, depth + 1);
  return Infinity;
}

function tableBytes(table: Readonly<Record<string, unknown>>, depth: number): number {
  let n = 4;
  for (const [k, v] of Object.entries(table)) {
    if (v === undefined) continue;
    const key = Buffer.byteLength(k, 'utf8');
    if (key > 255) return Infinity; // a key is a short string
    n += 1 + key + fieldBytes(v, depth);
  }
  return n;
}

/** The encoded size of a header table in bytes (`Infinity` when it cannot be encoded at all). Pure. */
export function headerTableBytes(headers: Readonly<Record<string, unknown>>): number {
  return tableBytes(headers, 0);
}

/**
 * Makes a header table that fits `maxBytes`: `own` (warren's headers) always stays,
 * `rest` (the producer's) is kept whole when it fits; otherwise its largest headers are
 * dropped until it does, and their names returned. Pure.
 */
export function fitHeaders(own: Readonly<Record<string, unknown>>, rest: Readonly<Record<string, unknown>>, maxBytes: number): { headers: Record<string, unknown>; dropped: string[] } {
  const headers: Record<string, unknown> = { ...withoutBrokerHeaders(rest), ...own };
  let size = headerTableBytes(headers);
  const dropped: string[] = [];
  if (size <= maxBytes) return { headers, dropped };
  const candidates = Object.keys(headers)
    .filter((k) => !(k in own))
    .map((k) => ({ k, bytes: 1 + Buffer.byteLength(k, 'utf8') + fieldBytes(headers[k], 0) }))
    .sort((a, b) => b.bytes - a.bytes);
  for (const { k, bytes } of candidates) {
    if (size <= maxBytes) break;
    delete headers[k];
    dropped.push(k);
    size = Number.isFinite(size) && Number.isFinite(bytes) ? size - bytes : headerTableBytes(headers);
  }
  return { headers, dropped };
}

/** warren headers a replayed copy starts without: its attempts, redeliveries and waits begin again. */
const NOT_REPLAYED: ReadonlySet<string> = new Set([HEADER.attempts, HEADER.redeliveries, HEADER.waits, HEADER.dependency, HEADER.tenant]);

/**
 * The headers of a replayed copy. Pure. The attempt count starts again: `warren-attempts`,
 * `warren-redeliveries` and the retry table's `warren-waits` (with the dependency and
 * tenant it waited for) are removed, and so is the broker's `x-death` record, which the
 * consumer would otherwise read as a fallback count and park the message again at once.
 * `warren-replays` is incremented and `warren-replayed-at` set; the original exchange and
 * routing key stay in `warren-exchange` and `warren-routing-key` (written from the
 * dead-letter record when warren did not park the message itself).
 */
export function replayHeaders(m: ReplaySource, now: Date): Record<string, unknown> {
  // Built without `delete`, which would make the table slow to read (amqplib encodes it per publish).
  const headers: Record<string, unknown> = {};
  for (const k in m.headers) if (Object.hasOwn(m.headers, k) && !isBrokerHeader(k) && !NOT_REPLAYED.has(k)) headers[k] = m.headers[k];
  headers[HEADER.routingKey] = m.routingKey;
  if (m.exchange !== undefined) headers[HEADER.exchange] = m.exchange;
  headers[HEADER.replays] = m.replays + 1;
  headers[HEADER.replayedAt] = now.toISOString();
  return headers;
}

/**
 * Headers for a copy of a message put back into its own parked queue: the broker's own
 * headers are not copied (see {@link isBrokerHeader}); what they told about a message the
 * broker parked itself (its routing key, exchange and reason) is kept in warren's headers.
 */
export function refreshHeaders(headers: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out = withoutBrokerHeaders(headers);
  const m = toParkedMessage({ content: Buffer.alloc(0), fields: { routingKey: '', exchange: '' }, properties: { headers } }, 0);
  if (out[HEADER.routingKey] === undefined && m.routingKey !== '') out[HEADER.routingKey] = m.routingKey;
  if (out[HEADER.exchange] === undefined && m.exchange !== undefined) out[HEADER.exchange] = m.exchange;
  if (out[HEADER.parkedReason] === undefined && m.reason !== undefined) out[HEADER.parkedReason] = m.reason;
  if (out[HEADER.parkedAt] === undefined && m.failedAt !== undefined) out[HEADER.parkedAt] = m.failedAt.toISOString();
  return out;
}

/**
 * The publish properties of a copy: the original's, minus those that would change its
 * fate: expiration, user id (the broker rejects a user id that is not the publishing
 * connection's own), and the broker's own headers ({@link isBrokerHeader}). Every copy
 * warren publishes (a retry, a park, a crash-loop move, a put-back, a replay, a walk of a
 * parked queue) goes through here. `owned`: the caller made `headers` for this copy alone,
 * so, when they hold none of the broker's headers, they are used as they are rather than
 * copied once more (a retry hop copies its headers once).
 */
export function copyProperties(p: RawMessage['properties'], headers: Readonly<Record<string, unknown>>, owned = false): Record<string, unknown> & { headers: Record<string, unknown> } {
  const table = owned && !hasBrokerHeader(headers) ? (headers as Record<string, unknown>) : withoutBrokerHeaders(headers);
  const out: Record<string, unknown> & { headers: Record<string, unknown> } = { headers: table, persistent: true };
  const keep = ['messageId', 'contentType', 'contentEncoding', 'correlationId', 'replyTo', 'timestamp', 'type', 'appId', 'priority'] as const;
  for (const k of keep) if (p[k] !== undefined && p[k] !== null) out[k] = p[k];
  return out;
}

/** Parked messages that fail for the same cause. */
export interface ParkedGroup {
  readonly fingerprint: string;
  readonly errorClass: string | null;
  readonly count: number;
  readonly firstSeen: string | null;
  readonly lastSeen: string | null;
  /** Up to three message ids, for `warren parked show`. */
  readonly sampleIds: readonly string[];
  /** One full error message of the group, unmasked. */
  readonly sampleMessage: string | null;
}

/** Counts messages by failure fingerprint, largest group first (ties: the group seen first). Pure. */
export function groupParked(messages: Iterable<ParkedMessage>): ParkedGroup[] {
  const groups = new Map<string, { fingerprint: string; errorClass: string | null; count: number; first?: Date; last?: Date; ids: string[]; sample: string | null; order: number }>();
  for (const m of messages) {
    let g = groups.get(m.fingerprint);
    if (!g) {
      g = { fingerprint: m.fingerprint, errorClass: m.errorClass ?? null, count: 0, ids: [], sample: m.errorMessage ?? null, order: groups.size };
      groups.set(m.fingerprint, g);
    }
    g.count += 1;
    if (m.messageId !== undefined && g.ids.length < 3) g.ids.push(m.messageId);
    const t = m.failedAt;
    if (t) {
      if (!g.first || t < g.first) g.first = t;
      if (!g.last || t > g.last) g.last = t;
    }
  }
  return [...groups.values()]
    .sort((a, b) => b.count - a.count || a.order - b.order)
    .map((g) => ({
      fingerprint: g.fingerprint,
      errorClass: g.errorClass,
      count: g.count,
      firstSeen: g.first?.toISOString() ?? null,
      lastSeen: g.last?.toISOString() ?? null,
      sampleIds: g.ids,
      sampleMessage: g.sample,
    }));
}
