/**
 * Error-text pattern benchmark: texts per second through a compiled pattern, the way an
 * archive search runs it row by row (a SQLite user function calls `test` once per row).
 * 1,000,000 error messages of 40-120 characters, each pattern beside JavaScript's RegExp
 * on the same texts where RegExp finishes at all; on the patterns that make a
 * backtracking engine exponential, RegExp is timed on one short text instead.
 *
 * Run alone with `npx tsx bench/pattern.ts`; WARREN_BENCH_PATTERN_TEXTS changes the count.
 */
import { pathToFileURL } from 'node:url';
import { compilePattern } from '../src/park/pattern.js';
import { printRows, type BenchRow } from './report.js';

const TEXTS = Number(process.env['WARREN_BENCH_PATTERN_TEXTS'] ?? 1_000_000);

function texts(n: number): string[] {
  const kinds = [
    (i: number) => `HttpError: carrier ${500 + (i % 4)} for order ${i} (attempt ${i % 5})`,
    (i: number) => `order ${i} has no customer`,
    (i: number) => `connect ECONNREFUSED 10.0.${i % 255}.${(i * 7) % 255}:5432 while saving invoice ${i}`,
    (i: number) => `ValidationError: field "email" of customer ${i} is not an address: ${'x'.repeat(i % 60)}@`,
  ];
  return Array.from({ length: n }, (_, i) => (kinds[i % kinds.length] as (i: number) => string)(i));
}

function perSecond(n: number, work: () => number): { rate: number; hits: number } {
  const start = process.hrtime.bigint();
  const hits = work();
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  return { rate: n / s, hits };
}

export function benchPattern(): Promise<BenchRow[]> {
  const all = texts(TEXTS);
  const rows: BenchRow[] = [];
  for (const [source, flags] of [
    ['carrier \\d+', 'i'],
    ['^order \\d+ has no customer$', ''],
    ['ECONNREFUSED [\\d.]+:5432', ''],
    ['(?:timeout|refused|reset) .* invoice', 'i'],
  ] as const) {
    const p = compilePattern(source, { ignoreCase: flags === 'i' });
    const re = new RegExp(source, flags);
    const ours = perSecond(all.length, () => all.reduce((n, t) => n + (p.test(t) ? 1 : 0), 0));
    const theirs = perSecond(all.length, () => all.reduce((n, t) => n + (re.test(t) ? 1 : 0), 0));
    if (ours.hits !== theirs.hits) throw new Error(`/${source}/${flags}: ${ours.hits} matches, RegExp ${theirs.hits}`);
    rows.push({ group: `pattern /${source}/${flags} (${all.length.toLocaleString('en-US')} texts)`, metric: 'texts/s', warren: ours.rate, baseline: theirs.rate, baselineName: 'RegExp', goal: '>= 1,000,000/s' });
  }
  for (const source of ['^(a+)+$', '^(.+)+X$']) {
    const p = compilePattern(source);
    const ours = perSecond(all.length, () => all.reduce((n, t) => n + (p.test(t) ? 1 : 0), 0));
    // RegExp on one 26-character text: exponential, so one text is all it gets.
    const one = source === '^(a+)+$' ? `${'a'.repeat(24)}!` : 'order 4242 has no customer';
    const re = new RegExp(source);
    const theirs = perSecond(1, () => (re.test(one) ? 1 : 0));
    rows.push({ group: `pattern /${source}/ (${all.length.toLocaleString('en-US')} texts)`, metric: 'texts/s', warren: ours.rate, baseline: theirs.rate, baselineName: `RegExp, one ${one.length}-char text`, goal: 'linear: as fast as the rest' });
  }
  return Promise.resolve(rows);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  printRows(await benchPattern());
}
