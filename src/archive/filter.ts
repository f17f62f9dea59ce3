/**
 * Which archived rows an operator means, from text (flags, a console's query string):
 * checked and bounded once, with errors that name the option. Pure.
 */
import { InvalidOptionError } from '../errors.js';
import { parseTime } from '../park/filter.js';
import { parsePatternLiteral, postgresRegex, type TextPattern } from '../park/pattern.js';
import { ARCHIVE_STATES, type ArchiveFilter, type ArchiveState, type HeaderMatch, type StorePattern, type TextMatch } from '../store/archive.js';

/** Bounds of every filter input. */
export const FILTER_LIMITS = Object.freeze({
  text: 1000,
  ids: 10_000,
  messageIds: 1000,
  headers: 8,
  headerName: 128,
  headerValue: 256,
  bodyWords: 200,
  pageSize: 1000,
});

/** A filter as text. */
export interface ArchiveFilterInput {
  consumer: string;
  /** `open`, `replayed`, `resolved`, or `all`. @default ['open'] */
  states?: readonly string[] | undefined;
  /** Row ids. */
  ids?: readonly string[] | undefined;
  /** Error message contains this (any case), or `/pattern/` (`/pattern/i` for any case). */
  error?: string | undefined;
  errorClass?: string | undefined;
  /** An ISO time, or a span before now (`30m`, `2h`, `7d`). */
  since?: string | Date | undefined;
  until?: string | Date | undefined;
  routingKey?: string | undefined;
  messageIds?: readonly string[] | undefined;
  fingerprint?: string | undefined;
  reason?: string | undefined;
  /** `name=value`, each. */
  headers?: readonly string[] | undefined;
  /** Words of the body, in order. */
  body?: string | undefined;
  /** Only rows up to this id. */
  throughId?: string | undefined;
}

/** The option names errors use, per field; the CLI passes its flags. */
export type FilterNames = Record<Exclude<keyof ArchiveFilterInput, 'consumer'>, string>;

const DEFAULT_NAMES: FilterNames = { states: 'states', ids: 'ids', error: 'error', errorClass: 'errorClass', since: 'since', until: 'until', routingKey: 'routingKey', messageIds: 'messageIds', fingerprint: 'fingerprint', reason: 'reason', headers: 'headers', body: 'body', throughId: 'throughId' };

function text(value: string, option: string, max: number): string {
  if (value.trim() === '') throw new InvalidOptionError(option, 'is empty');
  if (value.length > max) throw new InvalidOptionError(option, `is ${value.length} characters, more than ${max}`, 'Give a shorter text.');
  if (value.includes('\u0000')) throw new InvalidOptionError(option, 'holds a NUL character');
  return value;
}

function rowId(value: string, option: string): string {
  const v = value.trim();
  if (!/^\d{1,19}$/.test(v) || BigInt(v) < 1n || BigInt(v) > 9_223_372_036_854_775_807n) throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a row id`, 'Row ids are the numbers `warren parked list --db` shows in its first column.');
  return String(BigInt(v));
}

function list(values: readonly string[], option: string, max: number): string[] {
  const out = values.flatMap((s) => s.split(',')).map((s) => s.trim()).filter(Boolean);
  if (out.length === 0) throw new InvalidOptionError(option, 'names nothing');
  if (out.length > max) throw new InvalidOptionError(option, `names ${out.length}, more than ${max}`, 'Select them another way (a fingerprint, a time range) or in several runs.');
  return [...new Set(out)];
}

/**
 * Reads an error-text filter: `/pattern/` or `/pattern/i` is a pattern of the
 * linear-time subset (`src/park/pattern.ts`), run by JavaScript on SQLite and by
 * PostgreSQL's own engine there; anything else plain text (contained, any case). This is
 * the one place an archive filter compiles a pattern.
 */
export function textMatch(value: string, option: string): TextMatch {
  const pattern = parsePatternLiteral(value, option);
  if (pattern === undefined) return { contains: text(value, option, FILTER_LIMITS.text) };
  return { pattern: storePattern(pattern) };
}

/** A compiled pattern as the store runs it. */
export function storePattern(p: TextPattern): StorePattern {
  return { source: String(p), test: (t: string) => p.test(t), postgres: { source: postgresRegex(p), caseInsensitive: false } };
}

function time(value: string | Date, option: string, now: Date): Date {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new InvalidOptionError(option, 'is not a valid date');
    return value;
  }
  return parseTime(value, option, now);
}

function headerMatches(values: readonly string[], option: string): HeaderMatch[] {
  if (values.length > FILTER_LIMITS.headers) throw new InvalidOptionError(option, `${values.length} header filters, more than ${FILTER_LIMITS.headers}`);
  return values.map((v) => {
    const at = v.indexOf('=');
    if (at <= 0) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not NAME=VALUE`, 'Example: --header tenant=t4');
    const name = v.slice(0, at).trim();
    const value = v.slice(at + 1);
    if (name.length > FILTER_LIMITS.headerName) throw new InvalidOptionError(option, `header name of ${name.length} characters, more than ${FILTER_LIMITS.headerName}`);
    if (value.length > FILTER_LIMITS.headerValue) throw new InvalidOptionError(option, `header value of ${value.length} characters, more than ${FILTER_LIMITS.headerValue} (longer values are not searchable)`);
    if (name.includes('\u0000') || value.includes('\u0000')) throw new InvalidOptionError(option, 'holds a NUL character');
    return { name, value };
  });
}

/** Builds an {@link ArchiveFilter} from text, checking and bounding every field. */
export function archiveFilter(input: ArchiveFilterInput, now: Date = new Date(), names: FilterNames = DEFAULT_NAMES): ArchiveFilter {
  if (typeof input.consumer !== 'string' || input.consumer === '' || input.consumer.length > 255) throw new InvalidOptionError('consumer', `${JSON.stringify(input.consumer)} is not a consumer name`);
  const f: { -readonly [K in keyof ArchiveFilter]: ArchiveFilter[K] } = { consumer: input.consumer };
  if (input.states !== undefined) {
    const states = list(input.states, names.states, 10);
    f.states = states.includes('all') ? [...ARCHIVE_STATES] : states.map((s) => {
      if (!(ARCHIVE_STATES as readonly string[]).includes(s)) throw new InvalidOptionError(names.states, `${JSON.stringify(s)} is not a state`, `Use ${ARCHIVE_STATES.join(', ')} or all.`);
      return s as ArchiveState;
    });
  }
  if (input.ids !== undefined) f.ids = list(input.ids, names.ids, FILTER_LIMITS.ids).map((id) => rowId(id, names.ids));
  if (input.throughId !== undefined) f.throughId = rowId(input.throughId, names.throughId);
  if (input.error !== undefined) f.error = textMatch(input.error, names.error);
  if (input.errorClass !== undefined) f.errorClass = text(input.errorClass, names.errorClass, 200).trim();
  if (input.since !== undefined) f.since = time(input.since, names.since, now);
  if (input.until !== undefined) f.until = time(input.until, names.until, now);
  if (f.since && f.until && f.since >= f.until) throw new InvalidOptionError(names.since, `${f.since.toISOString()} is not before ${names.until} ${f.until.toISOString()}`);
  if (input.routingKey !== undefined) {
    if (!/^[^\s]{1,255}$/.test(input.routingKey)) throw new InvalidOptionError(names.routingKey, `${JSON.stringify(input.routingKey)} is not a routing key or pattern`);
    f.routingKey = input.routingKey;
  }
  if (input.messageIds !== undefined) f.messageIds = list(input.messageIds, names.messageIds, FILTER_LIMITS.messageIds).map((id) => text(id, names.messageIds, 255));
  if (input.fingerprint !== undefined) f.fingerprint = text(input.fingerprint, names.fingerprint, 1000);
  if (input.reason !== undefined) f.reason = text(input.reason, names.reason, 200).trim();
  if (input.headers !== undefined) f.headers = headerMatches(input.headers, names.headers);
  if (input.body !== undefined) {
    const words = text(input.body, names.body, FILTER_LIMITS.bodyWords).match(/[\p{L}\p{N}]+/gu) ?? [];
    if (words.length === 0) throw new InvalidOptionError(names.body, `${JSON.stringify(input.body)} holds no word (letters or digits)`);
    f.body = words.join(' ');
  }
  return f;
}

/** The filter in words, for messages such as "no archived row matches …". */
export function describeArchiveFilter(f: ArchiveFilter): string {
  const parts: string[] = [];
  if (f.states !== undefined && !(f.states.length === 1 && f.states[0] === 'open')) parts.push(`state ${f.states.join(' or ')}`);
  if (f.ids?.length) parts.push(f.ids.length === 1 ? `row ${f.ids[0] as string}` : `${f.ids.length} rows`);
  if (f.error !== undefined) parts.push('contains' in f.error ? `error contains ${JSON.stringify(f.error.contains)}` : `error matches ${f.error.pattern.source}`);
  if (f.errorClass !== undefined) parts.push(`error class ${f.errorClass}`);
  if (f.since !== undefined) parts.push(`failed since ${f.since.toISOString()}`);
  if (f.until !== undefined) parts.push(`failed before ${f.until.toISOString()}`);
  if (f.routingKey !== undefined) parts.push(`routing key ${f.routingKey}`);
  if (f.messageIds?.length) parts.push(`message id ${f.messageIds.slice(0, 5).join(', ')}${f.messageIds.length > 5 ? ', …' : ''}`);
  if (f.fingerprint !== undefined) parts.push(`fingerprint ${JSON.stringify(f.fingerprint)}`);
  if (f.reason !== undefined) parts.push(`reason ${f.reason}`);
  for (const h of f.headers ?? []) parts.push(`header ${h.name}=${h.value}`);
  if (f.body !== undefined) parts.push(`body has ${JSON.stringify(f.body)}`);
  return parts.length ? parts.join(', ') : 'any row';
}

/** The filter as a JSON-friendly object, for the action record. Pure. */
export function archiveFilterRecord(f: ArchiveFilter): Record<string, unknown> {
  const out: Record<string, unknown> = { consumer: f.consumer };
  if (f.states !== undefined) out['states'] = [...f.states];
  if (f.ids?.length) out['ids'] = f.ids.length > 100 ? { count: f.ids.length, first: f.ids.slice(0, 100) } : [...f.ids];
  if (f.throughId !== undefined) out['throughId'] = f.throughId;
  if (f.error !== undefined) out['error'] = 'contains' in f.error ? f.error.contains : f.error.pattern.source;
  if (f.errorClass !== undefined) out['errorClass'] = f.errorClass;
  if (f.since !== undefined) out['since'] = f.since.toISOString();
  if (f.until !== undefined) out['until'] = f.until.toISOString();
  if (f.routingKey !== undefined) out['routingKey'] = f.routingKey;
  if (f.messageIds?.length) out['messageIds'] = f.messageIds.slice(0, 100);
  if (f.fingerprint !== undefined) out['fingerprint'] = f.fingerprint;
  if (f.reason !== undefined) out['reason'] = f.reason;
  if (f.headers?.length) out['headers'] = f.headers.map((h) => `${h.name}=${h.value}`);
  if (f.body !== undefined) out['body'] = f.body;
  return out;
}
