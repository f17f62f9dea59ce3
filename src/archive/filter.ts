/**
 * Which archived rows an operator means, from text (flags, a console's query string):
 * checked and bounded once, with errors that name the option. Pure.
 */
import { InvalidOptionError } from '../errors.js';
import { parseTime } from '../park/filter.js';
import { ARCHIVE_STATES, type ArchiveFilter, type ArchiveState, type HeaderMatch, type StorePattern, type TextMatch } from '../store/archive.js';

/** Bounds of every filter input. */
export const FILTER_LIMITS = Object.freeze({
  text: 1000,
  pattern: 500,
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
 * Reads an error-text filter: `/pattern/flags` is a pattern, anything else plain text
 * (contained, any case). This is the one place patterns are compiled.
 */
export function textMatch(value: string, option: string): TextMatch {
  const m = /^\/(.*)\/([a-z]*)$/s.exec(value);
  if (!m) return { contains: text(value, option, FILTER_LIMITS.text) };
  return { pattern: compilePattern(m[1] as string, m[2] as string, option) };
}

/**
 * The regular expressions the archive runs: a subset that runs in linear time in both
 * engines. Literals, `.`, classes (`[a-z]`, `\d`, `\w`, `\s` and their negations),
 * anchors `^` `$`, word boundaries `\b`, groups `( )` `(?: )`, alternation `|`, and the
 * quantifiers `* + ? {n,m}` — but no quantifier on a group that holds a quantifier or an
 * alternation (the shape that makes a backtracking engine take exponential time), at most
 * two unbounded quantifiers, and no back-references or look-arounds. Flag `i` only.
 */
export function compilePattern(source: string, flags: string, option: string): StorePattern {
  if (source === '') throw new InvalidOptionError(option, 'is an empty pattern');
  if (source.length > FILTER_LIMITS.pattern) throw new InvalidOptionError(option, `is a pattern of ${source.length} characters, more than ${FILTER_LIMITS.pattern}`);
  if (!/^i?$/.test(flags)) throw new InvalidOptionError(option, `flags ${JSON.stringify(flags)}: only i (any case) is supported`);
  const shown = `/${source}/${flags}`;
  const refuse = (why: string): never => {
    throw new InvalidOptionError(option, `${shown} ${why}`, 'Patterns may use literals, ., [classes], \\d \\w \\s \\b, ^ $, ( ) and (?: ), | and * + ? {n,m}, with no quantifier on a group that holds one or an alternation.');
  };
  let pg = '';
  // Per open group: does it hold a quantifier or an alternation?
  const groups: Array<{ risky: boolean }> = [];
  let lastAtom: 'none' | 'simple' | 'group-risky' | 'group-safe' = 'none';
  // Two unbounded quantifiers at most: with more, backtracking is polynomial of a high degree.
  let unbounded = 0;
  for (let i = 0; i < source.length; i++) {
    const c = source[i] as string;
    if (c === '\\') {
      const n = source[i + 1];
      if (n === undefined) refuse('ends with a lone backslash');
      i++;
      if (/[1-9k]/.test(n as string)) refuse('uses a back-reference, which no linear-time engine runs');
      if (/[pPcx0]/.test(n as string)) refuse(`uses \\${n as string}, which is not supported`);
      if (n === 'u') {
        const hex = source.slice(i + 1, i + 5);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) refuse('has a \\u not followed by four hex digits');
        pg += `\\u${hex}`;
        i += 4;
      } else pg += n === 'b' ? '\\y' : n === 'B' ? '\\Y' : `\\${n as string}`;
      lastAtom = 'simple';
    } else if (c === '[') {
      const end = classEnd(source, i);
      if (end < 0) refuse('has a [ with no ]');
      const body = source.slice(i, end + 1);
      if (/\\[DSW]/.test(body)) refuse('uses \\D, \\S or \\W inside [ ], which PostgreSQL refuses there');
      pg += body.replace(/\\b/g, '\\x08');
      i = end;
      lastAtom = 'simple';
    } else if (c === '(') {
      if (source[i + 1] === '?') {
        if (source[i + 2] !== ':') refuse('uses a look-around or a named group, which are not supported');
        pg += '(?:';
        i += 2;
      } else pg += '(';
      groups.push({ risky: false });
      lastAtom = 'none';
    } else if (c === ')') {
      const g = groups.pop();
      if (g === undefined) refuse('has a ) with no (');
      pg += ')';
      lastAtom = g?.risky ? 'group-risky' : 'group-safe';
      // A group that holds a quantifier makes the enclosing group risky to quantify too.
      if (g?.risky && groups.length > 0) (groups[groups.length - 1] as { risky: boolean }).risky = true;
    } else if (c === '|') {
      if (groups.length > 0) (groups[groups.length - 1] as { risky: boolean }).risky = true;
      pg += '|';
      lastAtom = 'none';
    } else if (c === '*' || c === '+' || c === '?' || c === '{') {
      let q = c;
      if (c === '{') {
        const m = /^\{(\d{1,4})(,(\d{0,4}))?\}/.exec(source.slice(i));
        if (!m) refuse('has a { that is not a count {n}, {n,} or {n,m}');
        q = (m as RegExpExecArray)[0];
        i += q.length - 1;
        const lo = Number((m as RegExpExecArray)[1]);
        const hi = (m as RegExpExecArray)[3];
        if (lo > 255 || (hi !== undefined && hi !== '' && (Number(hi) > 255 || Number(hi) < lo))) refuse(`has a count ${q} out of 0..255`);
      }
      if (lastAtom === 'none') refuse(`has a quantifier ${q} with nothing before it`);
      if (lastAtom === 'group-risky') refuse(`quantifies a group that holds a quantifier or an alternation (${q})`);
      if (source[i + 1] === '?') refuse('uses a lazy quantifier, which is not supported');
      if (q === '*' || q === '+' || q.endsWith(',}')) unbounded++;
      if (unbounded > 2) refuse('has more than two unbounded quantifiers (*, + or {n,})');
      pg += q;
      if (groups.length > 0) (groups[groups.length - 1] as { risky: boolean }).risky = true;
      lastAtom = 'none';
    } else {
      pg += c;
      lastAtom = 'simple';
    }
  }
  if (groups.length > 0) refuse('has a ( with no )');
  let js: RegExp;
  try {
    js = new RegExp(source, flags);
  } catch (error) {
    return refuse(`is not a valid pattern (${error instanceof Error ? error.message : String(error)})`);
  }
  return {
    source: shown,
    test: (t: string) => js.test(t),
    // (?p): `.` and [^…] do not match a newline, as in JavaScript without the s flag.
    postgres: { source: `(?p)${pg}`, caseInsensitive: flags.includes('i') },
  };
}

function classEnd(source: string, start: number): number {
  let i = start + 1;
  if (source[i] === '^') i++;
  if (source[i] === ']') i++;
  for (; i < source.length; i++) {
    if (source[i] === '\\') i++;
    else if (source[i] === ']') return i;
  }
  return -1;
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
