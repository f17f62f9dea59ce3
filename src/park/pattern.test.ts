import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PG_URL } from '../../test/helpers.js';
import { InvalidOptionError } from '../errors.js';
import { compilePattern, isTextPattern, MAX_MATCHED_TEXT, MAX_PATTERN_LENGTH, matchSteps, parsePatternLiteral, postgresRegex, type TextPattern } from './pattern.js';

const lit = (value: string): TextPattern => parsePatternLiteral(value, '--error') as TextPattern;

/** Patterns and texts whose answers are known; each row is [pattern, text, matches]. */
const TABLE: readonly (readonly [string, string, boolean])[] = [
  ['/carrier \\d+/', 'HttpError: carrier 503 for order 42', true],
  ['/carrier \\d+/', 'HttpError: Carrier 503', false],
  ['/carrier \\d+/i', 'HttpError: CARRIER 503', true],
  ['/^order \\d+ has no customer$/', 'order 4242 has no customer', true],
  ['/^order \\d+ has no customer$/', 'the order 4242 has no customer', false],
  ['/^order \\d+ has no customer$/', 'order 4242 has no customer!', false],
  ['/a.c/', 'a\nc', true],
  ['/^.$/', '😀', true],
  ['/^..$/', '😀', false],
  ['/^\\uD83D\\uDE00$/', '😀', true],
  ['/[^a]/', 'aaa', false],
  ['/[^a]/i', 'AAA', false],
  ['/[^a]/', 'AAA', true],
  ['/[a-c]+x/', 'zzbcax', true],
  ['/[a-c]+x/i', 'ZZBCAX', true],
  ['/\\w+@\\w+\\.com/', 'mail to bob@example.com failed', true],
  ['/\\W/', 'abc_123', false],
  ['/\\s/', 'a\tb', true],
  ['/\\S\\s\\S/', 'a b', true],
  ['/\\D/', '0123', false],
  ['/x{2,3}y/', 'xy', false],
  ['/x{2,3}y/', 'axxyz', true],
  ['/^x{2}$/', 'xxx', false],
  ['/^x{2,}$/', 'xxxxxx', true],
  ['/^(?:ab|cd){2}$/', 'abcd', true],
  ['/^(ab|cd)*$/', '', true],
  ['/^(ab|cd)*$/', 'abca', false],
  ['/timeout|refused/', 'connection refused', true],
  ['/^(timeout|refused)$/', 'connection refused', false],
  ['/a|/', 'zzz', true],
  ['/x(^a)/', 'xa', false],
  ['/a$|^b/', 'bz', true],
  ['/\\$\\d+\\.\\d\\d/', 'charged $12.50', true],
  ['/\\(\\[\\{\\}\\]\\)/', 'got ([{}]) back', true],
  ['/a\\/b/', 'path a/b', true],
  ['/a\\\\b/', 'path a\\b', true],
  ['/[\\]\\-]/', 'x-y', true],
  ['/[\\]\\-]/', 'xy', false],
  ['/é+/', 'café', true],
  ['/É/i', 'café', false],
  ['/\\x41\\u0042/', 'AB', true],
  ['/a.*?b/', 'a--b', true],
  ['/}/', 'a}', true],
  ['/()*x/', 'x', true],
  ['/\\t\\n\\r\\f\\v/', '\t\n\r\f\v', true],
  ['/^(a+)+$/', `${'a'.repeat(40)}!`, false],
  ['/^(.+)+X$/', 'order 4242 has no customer', false],
  ['/^(a|a)*b$/', `${'a'.repeat(40)}`, false],
  ['/(x+x+)+y/', 'x'.repeat(50), false],
  ['/^(\\w+\\s?)*$/', 'an error message that goes on and on and on and then stops!', false],
];

describe('error-text patterns', () => {
  it('match what the table says, case-sensitive unless the flag i is given', () => {
    for (const [pattern, text, expected] of TABLE) expect(lit(pattern).test(text), `${pattern} on ${JSON.stringify(text)}`).toBe(expected);
  });

  it('agree with JavaScript regular expressions on random patterns of the subset and random texts', () => {
    // Texts over ASCII only (the subset's \s, \w and i are ASCII), `.` as with the flag s.
    let seed = 42;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const atoms = ['a', 'b', '.', '[ab]', '[^a]', '\\d', '\\w', '\\s', 'A', '1', ' '];
    const gen = (depth: number): string => {
      const pick = rand(depth > 2 ? 4 : 9);
      if (pick < 4) return atoms[rand(atoms.length)] as string;
      if (pick === 4) return `${gen(depth + 1)}${gen(depth + 1)}`;
      if (pick === 5) return `(?:${gen(depth + 1)}|${gen(depth + 1)})`;
      if (pick === 6) return `(?:${gen(depth + 1)})${['*', '+', '?', '{2}', '{1,3}', '{0,2}'][rand(6)]}`;
      if (pick === 7) return `^${gen(depth + 1)}`;
      return `${gen(depth + 1)}$`;
    };
    const alphabet = ['a', 'b', 'A', '1', ' ', '\n', 'x'];
    let compared = 0;
    for (let i = 0; i < 400; i++) {
      const source = gen(0);
      const ignoreCase = rand(3) === 0;
      const ours = compilePattern(source, { ignoreCase });
      const theirs = new RegExp(source, ignoreCase ? 'is' : 's');
      for (let j = 0; j < 12; j++) {
        const text = Array.from({ length: rand(9) }, () => alphabet[rand(alphabet.length)]).join('');
        expect(ours.test(text), `/${source}/${ignoreCase ? 'i' : ''} on ${JSON.stringify(text)}`).toBe(theirs.test(text));
        compared += 1;
      }
    }
    expect(compared).toBe(4800);
  });

  it('take steps in proportion to the text on patterns that make a backtracking engine take exponential time', () => {
    // Each text holds the characters the pattern needs (X, b, y, c), so the automaton reads it all.
    for (const [source, unit, first] of [
      ['^(a+)+$', 'a', ''],
      ['^(.+)+X$', 'order 4242 has no customer ', 'X'],
      ['^(a|a)*b$', 'a', 'b'],
      ['(x+x+)+y', 'x', 'y'],
      ['^(\\w+\\s?)*$', 'word ', ''],
      ['(a*)*(b*)*c', 'ab', 'c'],
    ] as const) {
      const steps = (n: number) => matchSteps(compilePattern(source), `${first}${unit.repeat(n)}!`);
      const small = steps(200);
      const large = steps(400);
      // Twice the text, about twice the work (a backtracking engine would square it, or worse).
      expect(large, source).toBeLessThan(small * 2.5);
      // At most (characters + 1) × (program size + 1), the bound of the automaton.
      expect(large, source).toBeLessThan((unit.length * 400 + 2) * 60);
    }
    // The issue's own case: 28 characters that took a backtracking engine seconds.
    const p = compilePattern('^(a+)+$');
    expect(p.test(`${'a'.repeat(28)}!`)).toBe(false);
    expect(p.test('a'.repeat(28))).toBe(true);
    // A long text: the cached automaton reads it once.
    expect(matchSteps(p, `${'a'.repeat(MAX_MATCHED_TEXT)}`)).toBeLessThan(MAX_MATCHED_TEXT * 2);
  });

  it('read at most the first MAX_MATCHED_TEXT characters of a text', () => {
    const p = compilePattern('needle');
    expect(p.test(`${'x'.repeat(MAX_MATCHED_TEXT - 6)}needle`)).toBe(true);
    expect(p.test(`${'x'.repeat(MAX_MATCHED_TEXT)}needle`)).toBe(false);
    expect(matchSteps(p, 'x'.repeat(10 * MAX_MATCHED_TEXT))).toBeLessThanOrEqual(MAX_MATCHED_TEXT + 100);
  });

  it('keep a bounded cache of automaton states and stay right past it', () => {
    // [ab]*a[ab]{8}: the classic pattern whose DFA has 2^9 states; texts that walk many of them.
    const p = compilePattern('a[ab]{9}$');
    let seed = 7;
    for (let i = 0; i < 200; i++) {
      let text = '';
      for (let j = 0; j < 60; j++) {
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        text += seed % 2 ? 'a' : 'b';
      }
      expect(p.test(text)).toBe(/a[ab]{9}$/.test(text));
    }
  });

  it('are written /pattern/ or /pattern/i; anything else is not a pattern', () => {
    const p = lit('/carrier \\d+/i');
    expect(isTextPattern(p)).toBe(true);
    expect(p.source).toBe('carrier \\d+');
    expect(p.ignoreCase).toBe(true);
    expect(String(p)).toBe('/carrier \\d+/i');
    expect(JSON.stringify({ error: p })).toBe('{"error":"/carrier \\\\d+/i"}');
    expect(parsePatternLiteral('carrier 503', '--error')).toBeUndefined();
    expect(parsePatternLiteral('/half', '--error')).toBeUndefined();
    expect(isTextPattern(/x/)).toBe(false);
    expect(Object.isFrozen(p)).toBe(true);
  });

  it('refuse what the subset has not, naming the option and the construct', () => {
    const refused: readonly (readonly [string, RegExp])[] = [
      ['/(a)\\1/', /back-reference \\1/],
      ['/\\k<x>/', /named back-reference/],
      ['/a(?=b)/', /lookahead \(\?=/],
      ['/a(?!b)/', /lookahead \(\?!/],
      ['/(?<=a)b/', /lookbehind \(\?<=/],
      ['/(?<!a)b/', /lookbehind \(\?<!/],
      ['/(?<name>a)/', /named group/],
      ['/(?i)a/', /group modifier \(\?i/],
      ['/\\bword\\b/', /word boundary \\b/],
      ['/\\Bx/', /word boundary \\B/],
      ['/\\p{L}/', /Unicode property \\p/],
      ['/a**/', /quantifier after a quantifier/],
      ['/a*+/', /quantifier after a quantifier/],
      ['/a{2}{3}/', /quantifier after a quantifier/],
      ['/*a/', /nothing before it to repeat/],
      ['/a|+b/', /nothing before it to repeat/],
      ['/(+a)/', /nothing before it to repeat/],
      ['/^*a/', /quantifier on \^/],
      ['/a{/', /\{ that is not a bound/],
      ['/a{1,x}/', /\{ that is not a bound/],
      ['/{2}/', /nothing before it to repeat/],
      ['/a{101}/', /above 100/],
      ['/a{1,101}/', /above 100/],
      ['/a{3,2}/', /maximum is below its minimum/],
      ['/(a/', /\( without its \)/],
      ['/a)/', /\) without its \(/],
      ['/[a/', /\[ without its \]/],
      ['/[]/', /empty class \[\]/],
      ['/[^]/', /empty class \[\^\]/],
      ['/[z-a]/', /range z-a whose end comes before its start/],
      ['/[\\d-z]/', /range with a class/],
      ['/[[:alpha:]]/', /POSIX class/],
      ['/[\\b]/', /\\b inside a class/],
      ['/\\q/', /escape \\q that has no meaning/],
      ['/\\u{1F600}/', /\\u not followed by 4 hexadecimal digits.*\\u\{…\} form is not supported/],
      ['/\\xZZ/', /\\x not followed by 2 hexadecimal digits/],
      ['/\\uD800/', /lone surrogate/],
      ['/\\0/', /escape \\0/],
      ['/a\\/', /\\ at the end/],
      ['/a/g', /flag g, which is not supported.*only flag is i/],
      ['/a/m', /flag m/],
      ['/a/s', /flag s/],
      ['//', /empty pattern/],
      [`/${'a'.repeat(MAX_PATTERN_LENGTH + 1)}/`, /257 characters long, more than 256/],
      ['/(((a{100}){100}){100})/', /larger than 4000 steps/],
    ];
    for (const [value, message] of refused) {
      let thrown: unknown;
      try {
        lit(value);
      } catch (error) {
        thrown = error;
      }
      expect(thrown, value).toBeInstanceOf(InvalidOptionError);
      expect((thrown as InvalidOptionError).option, value).toBe('--error');
      expect((thrown as Error).message, value).toMatch(/^Invalid option `--error`: /);
      expect((thrown as Error).message, value).toMatch(message);
    }
    // The error says where, and what is supported.
    expect(() => lit('/ab(?=c)/')).toThrow(/"\/ab\(\?=c\)\/" has a lookahead \(\?=…\) at character 3, which is not supported\. Patterns may use/);
  });
});

describe('error-text patterns in PostgreSQL', () => {
  let client: pg.Client;
  beforeAll(async () => {
    client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
  });
  afterAll(async () => {
    await client.end();
  });

  /** Each (pattern, text) through PostgreSQL's `~` in one query; the answers in order. */
  async function postgres(pairs: readonly (readonly [string, string])[]): Promise<boolean[]> {
    const r = await client.query<{ i: number; m: boolean }>('SELECT i, t ~ p AS m FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(p, t, i) ORDER BY i', [pairs.map((x) => x[0]), pairs.map((x) => x[1])]);
    return r.rows.map((row) => row.m);
  }

  it('postgresRegex means the same with ~ as the matcher, on the table and on random patterns and texts', async () => {
    const pairs: [TextPattern, string][] = TABLE.map(([pattern, text]) => [lit(pattern), text]);
    // Random ones, over characters that differ between engines and locales: non-ASCII
    // letters, their cases, line breaks, punctuation PostgreSQL treats specially.
    let seed = 11;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const atoms = ['a', 'B', 'é', 'É', '.', '[a-c]', '[^a]', '\\d', '\\w', '\\s', '\\W', '\\.', '\\*', '\\]', '\\\\', '-', ' ', '😀', '[é-ü]', '\\u00e9', '{', '}'].filter((a) => a !== '{');
    const gen = (depth: number): string => {
      const pick = rand(depth > 2 ? 4 : 9);
      if (pick < 4) return atoms[rand(atoms.length)] as string;
      if (pick === 4) return `${gen(depth + 1)}${gen(depth + 1)}`;
      if (pick === 5) return `(${gen(depth + 1)}|${gen(depth + 1)})`;
      if (pick === 6) return `(?:${gen(depth + 1)})${['*', '+', '?', '{2}', '{1,3}', '{0,2}', '*?'][rand(7)]}`;
      if (pick === 7) return `^${gen(depth + 1)}`;
      return `${gen(depth + 1)}$`;
    };
    const alphabet = ['a', 'A', 'b', 'B', 'é', 'É', 'ü', '1', ' ', '\n', '.', '*', ']', '\\', '-', '😀', '_', '}'];
    for (let i = 0; i < 300; i++) {
      const p = compilePattern(gen(0), { ignoreCase: rand(2) === 0 });
      for (let j = 0; j < 6; j++) pairs.push([p, Array.from({ length: rand(8) }, () => alphabet[rand(alphabet.length)]).join('')]);
    }
    // The largest patterns the bounds allow are accepted by PostgreSQL too.
    for (const source of ['(?:a|b){100}c', `${'[a-z]'.repeat(50)}`, '(?:(?:ab){10}){10}', 'x'.repeat(MAX_PATTERN_LENGTH)]) pairs.push([compilePattern(source, { ignoreCase: true }), 'ab'.repeat(120)]);
    const theirs = await postgres(pairs.map(([p, text]) => [postgresRegex(p), text]));
    const differ = pairs.filter(([p, text], i) => p.test(text) !== theirs[i]).map(([p, text]) => `${String(p)} → ${postgresRegex(p)} on ${JSON.stringify(text)}`);
    expect(differ).toEqual([]);
    expect(pairs.length).toBeGreaterThan(1800);
  });

  it('spells out case folding and the shorthand classes, so neither ~* nor the locale takes part', () => {
    expect(postgresRegex(compilePattern('carrier \\d+', { ignoreCase: true }))).toBe('[Cc][Aa][Rr][Rr][Ii][Ee][Rr] [0-9]+');
    expect(postgresRegex(compilePattern('^a.b\\.c$'))).toBe('^a.b\\.c$');
    expect(postgresRegex(compilePattern('\\w|\\S'))).toBe('[0-9A-Z\\u005fa-z]|[^\\u0009-\\u000d\\u0020]');
    expect(postgresRegex(compilePattern('(?:ab|c){2,3}'))).toBe('(?:ab|c){2,3}');
  });
});
