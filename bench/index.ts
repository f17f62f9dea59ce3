/**
 * `npm run bench`: every benchmark in one run on this machine's broker and databases,
 * warren's figure beside its baseline with the ratio. Not part of the tests: figures
 * depend on the machine and on what else runs on it.
 *
 *   npm run bench                 all of them
 *   npm run bench -- clients stores  some of them (clients, memory, stores, replay, hop, retry, in-queue, metrics, tracing, console, pattern)
 *   npm run bench -- archive      the failure archive at 100,000 rows per backend (`--rows 1000000`, `--backend sqlite`, `--replay` for the replay alone); only when named
 *
 * clients (bare amqplib, warren and other clients: publish and consume, msg/s and CPU
 * per message) runs on every broker of WARREN_BENCH_BROKERS (3.10 at :5672, 4.0 at
 * :5673, 4.3 at :5674; one not running is skipped with a line saying so); hop and
 * replay on the 3.10 and 4.0 brokers unless their URLs variable says otherwise;
 * in-queue (retry inside the queue against tier queues) on the 4.3 broker at :5674;
 * WARREN_BENCH_SMALL=1 makes them quick. `npx tsx bench/instructions.ts` counts
 * instructions per message under valgrind, the figure to compare on a busy machine.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { benchArchive } from './archive.js';
import { benchConsole } from './console.js';
import { benchClients } from './clients.js';
import { benchHop } from './hop.js';
import { benchInQueue } from './in-queue.js';
import { benchMetrics } from './metrics.js';
import { benchPattern } from './pattern.js';
import { benchMemory } from './memory.js';
import { benchReplay } from './replay.js';
import { printRows, type BenchRow } from './report.js';
import { benchRetryTable } from './retry-table.js';
import { benchStores } from './stores.js';
import { benchTracing } from './tracing.js';

const suites: Record<string, () => Promise<BenchRow[]>> = { archive: () => benchArchive(), clients: benchClients, memory: benchMemory, stores: benchStores, replay: benchReplay, hop: benchHop, retry: benchRetryTable, 'in-queue': benchInQueue, metrics: benchMetrics, tracing: benchTracing, console: benchConsole, pattern: benchPattern };
// Options with a value (the archive's `--rows N`, `--backend NAME`) are not benchmark names.
const VALUED = new Set(['--rows', '--backend']);
const wanted = process.argv.slice(2).filter((a, i, all) => !a.startsWith('-') && !VALUED.has(all[i - 1] ?? ''));
for (const name of wanted) {
  if (!(name in suites)) {
    console.error(`Unknown benchmark '${name}'. Choose from: ${Object.keys(suites).join(', ')}.`);
    process.exit(2);
  }
}
// The archive seeds 100,000 rows (or a million) per backend: it runs when named.
const chosen = wanted.length ? wanted : Object.keys(suites).filter((s) => s !== 'archive');

// The replay benchmark runs the built command line.
if (chosen.includes('replay') && !existsSync(new URL('../dist/cli/main.js', import.meta.url))) {
  console.log('building dist/ for the command line…');
  execFileSync('npm', ['run', '--silent', 'build'], { stdio: 'inherit' });
}

const rows: BenchRow[] = [];
for (const name of chosen) {
  const started = Date.now();
  console.log(`running ${name}…`);
  rows.push(...(await (suites[name] as () => Promise<BenchRow[]>)()));
  console.log(`  ${name} took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
console.log();
console.log(`broker (single-broker benchmarks): ${process.env['WARREN_BENCH_AMQP_URL'] ?? process.env['AMQP_URL'] ?? process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672'}, node ${process.version}, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
printRows(rows);
