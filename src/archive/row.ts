/**
 * From a parked delivery to an archive row, and from a stored row back to a message a
 * person (or a replay) can use. Pure.
 *
 * The row's indexed columns are cleaned and bounded (a forged header can hold anything:
 * a NUL, which PostgreSQL refuses in text, a lone surrogate, megabytes), and what was
 * changed to index them is named in `notIndexed`. The headers, properties and body are
 * kept exactly, whatever they hold.
 */
import { HEADER } from '../headers.js';
import { parkedIdentity } from '../park/identity.js';
import { isBrokerHeader, toParkedMessage, type ParkedMessage, type RawMessage } from '../park/message.js';
import type { ArchiveRecord, ArchiveRowInput } from '../store/archive.js';
import { decodeFields, encodeFields } from './encoding.js';
import type { ArchivedMessage } from './types.js';

/** Bounds of the indexed columns, in characters. */
export const ARCHIVE_LIMITS = Object.freeze({
  messageId: 255,
  routingKey: 255,
  exchange: 255,
  errorClass: 200,
  errorMessage: 8192,
  errorStack: 16_384,
  reason: 200,
  fingerprint: 1000,
  /** Header values indexed per message, and their sizes. */
  indexedHeaders: 32,
  headerName: 128,
  headerValue: 256,
  /** A text body larger than this is kept, but not searchable. */
  searchableBody: 1_048_576,
});

/** warren headers that are columns of the row already (or too large to index as a value). */
const COLUMN_HEADERS: ReadonlySet<string> = new Set([HEADER.errorMessage, HEADER.errorStack, HEADER.errorClass, HEADER.routingKey, HEADER.exchange, HEADER.consumer, HEADER.attempts, HEADER.parkedAt, HEADER.lastFailedAt, HEADER.firstFailedAt, HEADER.replays, HEADER.replayedAt, HEADER.parkedReason, HEADER.waits]);

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** True when `text` has no lone surrogate (what `String.prototype.isWellFormed` says, on every Node this runs on). */
export function isWellFormed(text: string): boolean {
  LONE_SURROGATE.lastIndex = 0;
  return !LONE_SURROGATE.test(text);
}

/** Text fit for an indexed column: no NUL, no lone surrogate, at most `max` characters. `problem` hears what was changed. */
export function cleanText(value: string, max: number, what: string, problems: string[]): string {
  let text = value;
  if (text.includes('\u0000')) {
    text = text.replaceAll('\u0000', '\ufffd');
    problems.push(`${what} held NUL characters (replaced by U+FFFD in the index)`);
  }
  if (!isWellFormed(text)) {
    text = text.replace(LONE_SURROGATE, '\ufffd');
    problems.push(`${what} held lone surrogates (replaced in the index)`);
  }
  if (text.length > max) {
    text = text.slice(0, max);
    if (!isWellFormed(text)) text = text.slice(0, -1);
    problems.push(`${what} was ${value.length} characters (the first ${max} are indexed)`);
  }
  return text;
}

function cleanOrNull(value: string | undefined, max: number, what: string, problems: string[]): string | null {
  return value === undefined ? null : cleanText(value, max, what, problems);
}

/** A header value as the text a `headers` filter compares with; undefined for tables, arrays and binary. */
export function headerText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return String(value);
  if (Buffer.isBuffer(value)) {
    const text = value.toString('utf8');
    return Buffer.from(text, 'utf8').equals(value) ? text : undefined;
  }
  if (typeof value === 'object' && value !== null && (value as { '!'?: unknown })['!'] === 'timestamp') return headerText((value as { value?: unknown }).value);
  return undefined;
}

/** The body as text when it is exactly UTF-8 text without NUL and without a content encoding. */
export function bodyTextOf(content: Buffer, contentEncoding: unknown): string | null {
  const enc = typeof contentEncoding === 'string' ? contentEncoding.trim().toLowerCase() : Buffer.isBuffer(contentEncoding) ? contentEncoding.toString('utf8').trim().toLowerCase() : '';
  if (enc !== '' && enc !== 'identity' && enc !== 'utf-8' && enc !== 'utf8' && enc !== '8bit' && enc !== '7bit') return null;
  if (content.includes(0)) return null;
  const text = content.toString('utf8');
  return Buffer.byteLength(text, 'utf8') === content.length && Buffer.from(text, 'utf8').equals(content) ? text : null;
}

/**
 * The archive row of one delivery from `consumer`'s parked queue. Never throws: a
 * message whose failure headers are missing or malformed gets the fallbacks
 * `toParkedMessage` gives, and what could not be indexed is named in `notIndexed`.
 */
export function archiveRow(consumer: string, raw: RawMessage, archivedAt: Date): ArchiveRowInput {
  const m = toParkedMessage(raw, 0);
  const problems: string[] = [];
  const { headers: _h, ...properties } = raw.properties;
  const indexHeaders: Array<readonly [string, string]> = [];
  let skipped = 0;
  for (const [name, value] of Object.entries(m.headers)) {
    if (COLUMN_HEADERS.has(name) || isBrokerHeader(name)) continue;
    const text = headerText(value);
    if (text === undefined) continue;
    if (indexHeaders.length >= ARCHIVE_LIMITS.indexedHeaders || name.length > ARCHIVE_LIMITS.headerName || text.length > ARCHIVE_LIMITS.headerValue || !isWellFormed(name) || !isWellFormed(text) || name.includes('\u0000') || text.includes('\u0000')) {
      skipped++;
      if (skipped <= 3) problems.push(`header ${JSON.stringify(name.slice(0, 60))} is not searchable (${indexHeaders.length >= ARCHIVE_LIMITS.indexedHeaders ? `more than ${ARCHIVE_LIMITS.indexedHeaders} headers` : `name over ${ARCHIVE_LIMITS.headerName} or value over ${ARCHIVE_LIMITS.headerValue} characters, or not plain text`})`);
      continue;
    }
    indexHeaders.push([name, text]);
  }
  if (skipped > 3) problems.push(`${skipped - 3} more headers are not searchable`);
  const bodyText = bodyTextOf(raw.content, raw.properties.contentEncoding);
  if (bodyText !== null && bodyText.length > ARCHIVE_LIMITS.searchableBody) problems.push(`the body is ${bodyText.length} characters: only the first ${ARCHIVE_LIMITS.searchableBody} are searchable`);
  else if (bodyText === null && raw.content.length > 0) problems.push('the body is not plain UTF-8 text (binary, NUL, or a content encoding): its words are not searchable');
  const failedAt = m.failedAt ?? archivedAt;
  return {
    consumer,
    identity: parkedIdentity(m),
    messageId: cleanOrNull(m.messageId, ARCHIVE_LIMITS.messageId, 'the message id', problems),
    routingKey: cleanText(m.routingKey, ARCHIVE_LIMITS.routingKey, 'the routing key', problems),
    exchange: cleanOrNull(m.exchange, ARCHIVE_LIMITS.exchange, 'the exchange', problems),
    errorClass: cleanOrNull(m.errorClass, ARCHIVE_LIMITS.errorClass, 'the error class', problems),
    errorMessage: cleanOrNull(m.errorMessage, ARCHIVE_LIMITS.errorMessage, 'the error message', problems),
    errorStack: cleanOrNull(m.errorStack, ARCHIVE_LIMITS.errorStack, 'the stack', problems),
    reason: cleanOrNull(m.reason, ARCHIVE_LIMITS.reason, 'the park reason', problems),
    attempts: m.attempts ?? null,
    replays: Math.min(m.replays, 2 ** 31 - 1),
    fingerprint: cleanText(m.fingerprint, ARCHIVE_LIMITS.fingerprint, 'the fingerprint', problems),
    failedAt: failedAt.getTime() > 8.64e15 || failedAt.getTime() < 0 ? archivedAt : failedAt,
    parkedAt: m.parkedAt ?? null,
    archivedAt,
    headers: encodeFields(m.headers),
    properties: encodeFields(properties),
    body: raw.content,
    bodyText,
    indexHeaders,
    notIndexed: problems.length > 0 ? problems.join('; ') : null,
  };
}

/**
 * A row with nothing indexed but its identity: what the ingester stores when the
 * database refuses the full row for a reason of its own. The bytes are all kept.
 */
export function minimalRow(row: ArchiveRowInput, why: string): ArchiveRowInput {
  return {
    ...row,
    messageId: row.messageId === null ? null : row.messageId.replace(/[^\x20-\x7e]/g, '?'),
    routingKey: row.routingKey.replace(/[^\x20-\x7e]/g, '?'),
    exchange: null,
    errorClass: null,
    errorMessage: null,
    errorStack: null,
    reason: null,
    fingerprint: '(not indexed)',
    bodyText: null,
    indexHeaders: [],
    notIndexed: `the database refused the row as it was (${why.slice(0, 500)}): only its identity is indexed; headers and body are kept`,
  };
}

/** A stored row, decoded: the headers and properties as amqplib gives them, and the parked-message view. */
export function archivedMessage(record: ArchiveRecord): ArchivedMessage {
  const headers = decodeFields(record.headers);
  const properties = decodeFields(record.properties);
  const raw: RawMessage = {
    content: record.body,
    fields: { routingKey: record.routingKey, exchange: record.exchange ?? '' },
    properties: { ...properties, headers },
  };
  const parked: ParkedMessage = toParkedMessage(raw, 0);
  return { ...record, headers, properties, parked };
}
