import { InvalidOptionError } from '../errors.js';
import type { ParkedMessage } from './message.js';
import { isTextPattern, MAX_PATTERN_LENGTH, parsePatternLiteral, type TextPattern } from './pattern.js';

/**
 * Which parked messages an operation applies to. Every field that is set must match;
 * an empty filter matches everything.
 *
 * @example
 * const filter = parseFilter({ error: '/carrier \\d+/i', since: '2h' });
 */
export interface ParkedFilter {
  /**
   * Error message contains this text (case-insensitive), or matches this pattern: a
   * {@link TextPattern} from `compilePattern` or `parsePatternLiteral`, matched in linear
   * time (never a `RegExp`, whose backtracking one pattern could make take hours).
   */
  readonly error?: string | TextPattern;
  /** Error class equals this name (case-insensitive), e.g. `HttpError`. */
  readonly errorClass?: string;
  /** Failed at or after this time (the last failure, else the park time). */
  readonly since?: Date;
  /** Failed before this time. */
  readonly until?: Date;
  /** Message id is one of these. */
  readonly messageIds?: readonly string[];
  /** Original routing key matches this topic pattern (`*` one word, `#` any number). */
  readonly routingKey?: string;
  /** Failure fingerprint equals this one exactly: one group of `groupParked` (see `failureFingerprint`). */
  readonly fingerprint?: string;
}

/** True when the filter sets nothing, so it matches every message. */
export function isEmptyFilter(f: ParkedFilter): boolean {
  return f.error === undefined && f.errorClass === undefined && f.since === undefined && f.until === undefined && (f.messageIds === undefined || f.messageIds.length === 0) && f.routingKey === undefined && f.fingerprint === undefined;
}

/**
 * Topic matching, `*` exactly one word and `#` zero or more, by dynamic programming over
 * words: `next[j]` says whether the rest of the pattern matches the key from word `j`.
 * Time is O(pattern words × key words) whatever the pattern: trying each way of sharing
 * the key among several `#` (backtracking) is exponential in their number, and an
 * operator's long pattern against long keys would never finish.
 */
function matchWords(pattern: readonly string[], key: readonly string[]): boolean {
  const n = key.length;
  // After the whole pattern, only the end of the key matches.
  let next: boolean[] = Array.from({ length: n + 1 }, (_, j) => j === n);
  for (let i = pattern.length - 1; i >= 0; i--) {
    const word = pattern[i];
    const here: boolean[] = new Array<boolean>(n + 1).fill(false);
    if (word === '#') {
      // '#' takes no word (next[j]) or one more word and stays '#' (here[j + 1]).
      for (let j = n; j >= 0; j--) here[j] = next[j] === true || (j < n && here[j + 1] === true);
    } else {
      for (let j = 0; j < n; j++) here[j] = next[j + 1] === true && (word === '*' || word === key[j]);
    }
    next = here;
  }
  return next[0] === true;
}

/** True when `key` matches the topic `pattern`, as a topic exchange would route it. */
export function routingKeyMatches(pattern: string, key: string): boolean {
  if (!pattern.includes('*') && !pattern.includes('#')) return pattern === key;
  return matchWords(pattern.split('.'), key.split('.'));
}

/** True when the message matches every criterion of the filter. Pure. */
export function matchesFilter(m: ParkedMessage, f: ParkedFilter): boolean {
  if (f.messageIds && f.messageIds.length > 0 && (m.messageId === undefined || !f.messageIds.includes(m.messageId))) return false;
  if (f.errorClass !== undefined && (m.errorClass ?? '').toLowerCase() !== f.errorClass.toLowerCase()) return false;
  if (f.error !== undefined) {
    const text = m.errorMessage ?? '';
    if (typeof f.error === 'string') {
      if (!text.toLowerCase().includes(f.error.toLowerCase())) return false;
    } else if (isTextPattern(f.error)) {
      if (!f.error.test(text)) return false;
    } else {
      throw new InvalidOptionError('error', `is ${(f.error as unknown) instanceof RegExp ? `the RegExp ${String(f.error)}` : 'an object'}, not text or a compiled pattern`, 'Pass text, or compilePattern(source) / parsePatternLiteral("/source/i"): a RegExp can take exponential time on one error message.');
    }
  }
  if (f.since !== undefined || f.until !== undefined) {
    const t = m.failedAt;
    if (t === undefined) return false;
    if (f.since !== undefined && t < f.since) return false;
    if (f.until !== undefined && t >= f.until) return false;
  }
  if (f.routingKey !== undefined && !routingKeyMatches(f.routingKey, m.routingKey)) return false;
  if (f.fingerprint !== undefined && m.fingerprint !== f.fingerprint) return false;
  return true;
}

const RELATIVE_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/**
 * Reads a point in time: an ISO 8601 date or date-time (`2026-03-01`, `2026-03-01T12:00Z`),
 * or a span before `now` (`90s`, `30m`, `2h`, `7d`, `1w`). Throws naming `option`.
 */
export function parseTime(value: string, option: string, now: Date = new Date()): Date {
  const text = value.trim();
  const rel = /^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)(?:\s*ago)?$/i.exec(text);
  if (rel) {
    const unit = (rel[2] as string).toLowerCase() as keyof typeof RELATIVE_MS;
    return new Date(now.getTime() - Math.round(Number(rel[1]) * RELATIVE_MS[unit]));
  }
  if (/^\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?$/i.test(text)) {
    const d = new Date(text.replace(' ', 'T'));
    if (!Number.isNaN(d.getTime())) return d;
  }
  throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a time`, 'Give an ISO date or date-time (2026-03-01, 2026-03-01T12:00:00Z) or a span before now (30m, 2h, 7d).');
}

/**
 * Reads an error-text filter: `/pattern/` or `/pattern/i` is a pattern of the linear-time
 * subset described in `park/pattern.ts` (and docs/console.md, "Security"), anything else
 * plain text matched case-insensitively. Either is at most {@link MAX_PATTERN_LENGTH}
 * characters. Throws {@link InvalidOptionError} naming `option` and what is not supported.
 */
export function parsePattern(value: string, option: string): string | TextPattern {
  const pattern = parsePatternLiteral(value, option);
  if (pattern) return pattern;
  if (value.length > MAX_PATTERN_LENGTH) throw new InvalidOptionError(option, `the text is ${value.length} characters long, more than ${MAX_PATTERN_LENGTH}`, 'Match a shorter, distinctive part of the error text.');
  return value;
}

/** Filter criteria as text, e.g. from command-line flags. */
export interface FilterInput {
  error?: string | undefined;
  errorClass?: string | undefined;
  since?: string | undefined;
  until?: string | undefined;
  messageIds?: readonly string[] | undefined;
  routingKey?: string | undefined;
  fingerprint?: string | undefined;
}

/** Option names used in error messages, per field; the CLI passes its flag names. */
export interface FilterOptionNames {
  error: string;
  errorClass: string;
  since: string;
  until: string;
  messageIds: string;
  routingKey: string;
  /** @default 'fingerprint' */
  fingerprint?: string;
}

const DEFAULT_NAMES: FilterOptionNames = { error: 'error', errorClass: 'errorClass', since: 'since', until: 'until', messageIds: 'messageIds', routingKey: 'routingKey', fingerprint: 'fingerprint' };

/** Builds a {@link ParkedFilter} from text, validating once; errors name the option. */
export function parseFilter(input: FilterInput, now: Date = new Date(), names: FilterOptionNames = DEFAULT_NAMES): ParkedFilter {
  const f: { -readonly [K in keyof ParkedFilter]: ParkedFilter[K] } = {};
  if (input.error !== undefined) {
    if (input.error === '') throw new InvalidOptionError(names.error, 'is empty');
    f.error = parsePattern(input.error, names.error);
  }
  if (input.errorClass !== undefined) {
    if (input.errorClass.trim() === '') throw new InvalidOptionError(names.errorClass, 'is empty');
    f.errorClass = input.errorClass.trim();
  }
  if (input.since !== undefined) f.since = parseTime(input.since, names.since, now);
  if (input.until !== undefined) f.until = parseTime(input.until, names.until, now);
  if (f.since && f.until && f.since >= f.until) {
    throw new InvalidOptionError(names.since, `${f.since.toISOString()} is not before ${names.until} ${f.until.toISOString()}`);
  }
  if (input.messageIds !== undefined) {
    const ids = input.messageIds.flatMap((s) => s.split(',')).map((s) => s.trim()).filter(Boolean);
    if (ids.length === 0) throw new InvalidOptionError(names.messageIds, 'names no message id');
    f.messageIds = ids;
  }
  if (input.routingKey !== undefined) {
    if (!/^[^\s]{1,255}$/.test(input.routingKey)) throw new InvalidOptionError(names.routingKey, `${JSON.stringify(input.routingKey)} is not a routing key or pattern`);
    f.routingKey = input.routingKey;
  }
  if (input.fingerprint !== undefined) {
    if (input.fingerprint.trim() === '') throw new InvalidOptionError(names.fingerprint ?? 'fingerprint', 'is empty', 'Copy a fingerprint from `warren parked list CONSUMER --group --json`.');
    f.fingerprint = input.fingerprint;
  }
  return f;
}

/** The filter in words, for messages such as "no parked message matches …". */
export function describeFilter(f: ParkedFilter): string {
  const parts: string[] = [];
  if (f.error !== undefined) parts.push(typeof f.error === 'string' ? `error contains ${JSON.stringify(f.error)}` : `error matches ${String(f.error)}`);
  if (f.errorClass !== undefined) parts.push(`error class ${f.errorClass}`);
  if (f.since !== undefined) parts.push(`failed since ${f.since.toISOString()}`);
  if (f.until !== undefined) parts.push(`failed before ${f.until.toISOString()}`);
  if (f.messageIds && f.messageIds.length) parts.push(`message id ${f.messageIds.join(', ')}`);
  if (f.routingKey !== undefined) parts.push(`routing key ${f.routingKey}`);
  if (f.fingerprint !== undefined) parts.push(`fingerprint ${JSON.stringify(f.fingerprint)}`);
  return parts.length ? parts.join(', ') : 'any message';
}
