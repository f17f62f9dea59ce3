import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { HEADER } from '../headers.js';
import { describeFilter, isEmptyFilter, matchesFilter, parseFilter, parsePattern, parseTime, routingKeyMatches } from './filter.js';
import { toParkedMessage, type ParkedMessage } from './message.js';
import { compilePattern, isTextPattern } from './pattern.js';

function parked(headers: Record<string, unknown>, messageId = 'id-1', routingKey = 'billing.parked'): ParkedMessage {
  return toParkedMessage({ content: Buffer.from('{}'), fields: { routingKey, exchange: '' }, properties: { messageId, headers } }, 1);
}

const now = new Date('2026-03-01T12:00:00Z');
const msg = parked({
  [HEADER.errorClass]: 'HttpError',
  [HEADER.errorMessage]: 'Carrier 503 for order 42',
  [HEADER.lastFailedAt]: '2026-03-01T11:00:00Z',
  [HEADER.routingKey]: 'order.created.eu',
});

describe('parseTime', () => {
  it('reads spans before now and ISO dates', () => {
    expect(parseTime('2h', '--since', now).toISOString()).toBe('2026-03-01T10:00:00.000Z');
    expect(parseTime('30m', '--since', now).toISOString()).toBe('2026-03-01T11:30:00.000Z');
    expect(parseTime('7d', '--since', now).toISOString()).toBe('2026-02-22T12:00:00.000Z');
    expect(parseTime('1.5h ago', '--since', now).toISOString()).toBe('2026-03-01T10:30:00.000Z');
    expect(parseTime('2026-02-01', '--since', now).toISOString()).toBe('2026-02-01T00:00:00.000Z');
    expect(parseTime('2026-02-01T08:30:00Z', '--since', now).toISOString()).toBe('2026-02-01T08:30:00.000Z');
    expect(parseTime('2026-02-01 08:30+01:00', '--since', now).toISOString()).toBe('2026-02-01T07:30:00.000Z');
  });
  it('names the option when the value is not a time', () => {
    expect(() => parseTime('yesterday', '--since', now)).toThrow(InvalidOptionError);
    expect(() => parseTime('yesterday', '--since', now)).toThrow(/`--since`.*"yesterday" is not a time/);
    expect(() => parseTime('2026-13-45', '--until', now)).toThrow(/`--until`/);
  });
});

describe('parsePattern', () => {
  it('reads /pattern/ and /pattern/i as a linear-time pattern and anything else as text, each bounded', () => {
    const p = parsePattern('/carrier \\d+/i', '--error');
    expect(isTextPattern(p)).toBe(true);
    expect(String(p)).toBe('/carrier \\d+/i');
    expect(parsePattern('carrier 503', '--error')).toBe('carrier 503');
    expect(() => parsePattern('/carrier (/', '--error')).toThrow(/`--error`.*a \( without its \)/);
    expect(() => parsePattern('x'.repeat(257), '--error')).toThrow(/`--error`: the text is 257 characters long, more than 256/);
  });
  it('refuses what a backtracking engine needs, naming it: no RegExp is ever built from the text', () => {
    expect(() => parsePattern('/(a)\\1/', '--error')).toThrow(/`--error`.*back-reference \\1/);
    expect(() => parsePattern('/(?<=x)y/', '--error')).toThrow(/`--error`.*lookbehind/);
    expect(() => parsePattern('/x/g', '--error')).toThrow(/`--error`.*flag g/);
  });
  it('a pathological pattern over a long error message ends, in steps linear in the text', () => {
    const long = parked({ [HEADER.errorMessage]: `${'a'.repeat(1999)}!` });
    const p = parsePattern('/^(a+)+$/', '--error');
    expect(matchesFilter(long, { error: p })).toBe(false);
    expect(matchesFilter(parked({ [HEADER.errorMessage]: 'order 4242 has no customer' }), { error: parsePattern('/^(.+)+X$/', '--error') })).toBe(false);
  });
});

describe('routingKeyMatches', () => {
  it('follows topic exchange rules', () => {
    expect(routingKeyMatches('order.created', 'order.created')).toBe(true);
    expect(routingKeyMatches('order.created', 'order.created.eu')).toBe(false);
    expect(routingKeyMatches('order.*', 'order.created')).toBe(true);
    expect(routingKeyMatches('order.*', 'order.created.eu')).toBe(false);
    expect(routingKeyMatches('order.#', 'order.created.eu')).toBe(true);
    expect(routingKeyMatches('order.#', 'order')).toBe(true);
    expect(routingKeyMatches('#.eu', 'order.created.eu')).toBe(true);
    expect(routingKeyMatches('#', 'anything.at.all')).toBe(true);
    expect(routingKeyMatches('*.created.*', 'order.created.eu')).toBe(true);
    expect(routingKeyMatches('*.created', 'order.created.eu')).toBe(false);
    // Dots in a literal word are not wildcards.
    expect(routingKeyMatches('order.*', 'orderXcreated')).toBe(false);
    expect(routingKeyMatches('#.#', 'order')).toBe(true);
    expect(routingKeyMatches('*.#.*', 'order')).toBe(false);
    expect(routingKeyMatches('*.#.*', 'order.eu')).toBe(true);
    expect(routingKeyMatches('#', '')).toBe(true);
    expect(routingKeyMatches('*', '')).toBe(true);
    expect(routingKeyMatches('#.*.#.created.#', 'a.b.created')).toBe(true);
    expect(routingKeyMatches('#.*.#.created.#', 'created')).toBe(false);
  });

  it('takes time in proportion to pattern × key, however many # words the pattern has', () => {
    // Tried word by word with backtracking, this pair takes longer than anyone would wait:
    // every way of sharing 200 words among 20 '#' is tried before the final 'x' fails.
    const pattern = `${Array.from({ length: 20 }, () => '#').join('.')}.x`;
    const key = Array.from({ length: 200 }, (_, i) => `w${i}`).join('.');
    const started = performance.now();
    expect(routingKeyMatches(pattern, key)).toBe(false);
    expect(routingKeyMatches(pattern, `${key}.x`)).toBe(true);
    expect(routingKeyMatches(`${Array.from({ length: 200 }, () => '#.*').join('.')}.y`, key)).toBe(false);
    expect(performance.now() - started).toBeLessThan(500);
  });

  it('agrees with word-by-word backtracking on every small pattern and key', () => {
    function reference(p: readonly string[], pi: number, k: readonly string[], ki: number): boolean {
      if (pi === p.length) return ki === k.length;
      if (p[pi] === '#') {
        for (let j = ki; j <= k.length; j++) if (reference(p, pi + 1, k, j)) return true;
        return false;
      }
      return ki < k.length && (p[pi] === '*' || p[pi] === k[ki]) && reference(p, pi + 1, k, ki + 1);
    }
    const words = ['#', '*', 'a', 'b'];
    const patterns: string[][] = [[]];
    for (let n = 0; n < 4; n++) for (const p of patterns.filter((q) => q.length === n)) for (const w of words) patterns.push([...p, w]);
    const keys: string[][] = [[]];
    for (let n = 0; n < 5; n++) for (const k of keys.filter((q) => q.length === n)) for (const w of ['a', 'b']) keys.push([...k, w]);
    const disagree: string[] = [];
    let checked = 0;
    for (const p of patterns.slice(1)) {
      for (const k of keys.slice(1)) {
        if (routingKeyMatches(p.join('.'), k.join('.')) !== reference(p, 0, k, 0)) disagree.push(`${p.join('.')} against ${k.join('.')}`);
        checked += 1;
      }
    }
    expect(disagree).toEqual([]);
    expect(checked).toBeGreaterThan(5000);
  });
});

describe('matchesFilter', () => {
  it('matches when every set criterion matches', () => {
    expect(matchesFilter(msg, {})).toBe(true);
    expect(matchesFilter(msg, { error: 'carrier 503' })).toBe(true);
    expect(matchesFilter(msg, { error: 'refused' })).toBe(false);
    expect(matchesFilter(msg, { error: compilePattern('order \\d+$') })).toBe(true);
    expect(matchesFilter(msg, { error: compilePattern('carrier') })).toBe(false);
    expect(matchesFilter(msg, { error: compilePattern('carrier', { ignoreCase: true }) })).toBe(true);
    expect(matchesFilter(msg, { errorClass: 'httperror' })).toBe(true);
    expect(matchesFilter(msg, { errorClass: 'TimeoutError' })).toBe(false);
    expect(matchesFilter(msg, { since: new Date('2026-03-01T10:00:00Z'), until: new Date('2026-03-01T11:30:00Z') })).toBe(true);
    expect(matchesFilter(msg, { since: new Date('2026-03-01T11:00:00.001Z') })).toBe(false);
    expect(matchesFilter(msg, { until: new Date('2026-03-01T11:00:00Z') })).toBe(false);
    expect(matchesFilter(msg, { messageIds: ['other', 'id-1'] })).toBe(true);
    expect(matchesFilter(msg, { messageIds: ['other'] })).toBe(false);
    expect(matchesFilter(msg, { routingKey: 'order.#' })).toBe(true);
    expect(matchesFilter(msg, { routingKey: 'order.*' })).toBe(false);
    expect(matchesFilter(msg, { errorClass: 'HttpError', error: 'refused' })).toBe(false);
  });
  it('a pattern matches every message, not every other one', () => {
    const p = compilePattern('carrier', { ignoreCase: true });
    expect([1, 2, 3].map(() => matchesFilter(msg, { error: p }))).toEqual([true, true, true]);
  });
  it('refuses a RegExp passed where a pattern belongs, rather than run it', () => {
    expect(() => matchesFilter(msg, { error: /(a+)+$/ as never })).toThrow(/`error`: is the RegExp \/\(a\+\)\+\$\/, not text or a compiled pattern.*compilePattern/);
  });
  it('a time filter leaves out messages without a failure time', () => {
    expect(matchesFilter(parked({}), { since: new Date(0) })).toBe(false);
  });
});

describe('parseFilter', () => {
  it('builds a filter from text, naming the flag that is wrong', () => {
    const names = { error: '--error', errorClass: '--error-class', since: '--since', until: '--until', messageIds: '--id', routingKey: '--routing-key' };
    const f = parseFilter({ error: '/x/', since: '2h', until: '1h', messageIds: ['a,b', 'c'], routingKey: 'order.*', errorClass: ' HttpError ' }, now, names);
    expect(String(f.error)).toBe('/x/');
    expect({ ...f, error: undefined }).toEqual({ error: undefined, since: new Date('2026-03-01T10:00:00Z'), until: new Date('2026-03-01T11:00:00Z'), messageIds: ['a', 'b', 'c'], routingKey: 'order.*', errorClass: 'HttpError' });
    expect(() => parseFilter({ since: '1h', until: '2h' }, now, names)).toThrow(/`--since`.*is not before --until/);
    expect(() => parseFilter({ messageIds: [','] }, now, names)).toThrow(/`--id`/);
    expect(() => parseFilter({ error: '' }, now, names)).toThrow(/`--error`/);
    expect(() => parseFilter({ routingKey: 'a b' }, now, names)).toThrow(/`--routing-key`/);
    expect(isEmptyFilter(parseFilter({}, now, names))).toBe(true);
  });
  it('describes itself in words', () => {
    expect(describeFilter({})).toBe('any message');
    expect(describeFilter({ errorClass: 'HttpError', error: compilePattern('x', { ignoreCase: true }) })).toBe('error matches /x/i, error class HttpError');
  });
});
