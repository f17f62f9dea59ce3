/**
 * `npm run drain -- --messages N`: drains N messages through a consumer while a feeder,
 * in a process of its own, publishes them (confirmed, at most `--backlog` ahead of the
 * consumer). The consumer runs in a process of its own too, on the compiled package
 * (dist/, built first if it is missing or older than src/) under plain `node`, so the
 * figures are the consumer's and not this script's or its TypeScript loader's. It samples
 * process.memoryUsage() every 50 ms (bench/drain-consumer.mjs). Each run drains once with
 * a warren consumer and once with bare amqplib (basic.consume, JSON.parse, ack), and
 * prints their peak RSS and heap side by side, the heap at each tenth of the run (flat is
 * the goal: nothing kept per message), and the rate; then both again under
 * `--max-semi-space-size=2` (`--semi-space MB`, docs/scaling.md recommends it where
 * memory is tight). Exits 1 if a message was not acked the first time or warren's
 * loader-free peak RSS without the flag passed `--max-rss-mb`.
 *
 *   npm run drain -- --messages 1000000
 *   npm run drain -- --messages 1000000 --with-loader       also both under tsx (warren from src/)
 *   npm run drain -- --messages 1000000 --semi-space off    without the --max-semi-space-size=2 runs
 *   npm run drain -- --messages 20000 --json                one line of JSON (what test/drain.test.ts reads)
 *
 * Options: --messages (default 1,000,000), --backlog (most messages queued ahead of the
 * consumer, default 20,000), --prefetch (default 50), --max-rss-mb (default 100), --only
 * warren|bare, --url (default WARREN_BENCH_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672).
 * Every run declares queues of its own and deletes them afterwards.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import * as amqp from 'amqplib';
import { declareTopology, defineTopology, HEADER } from '../src/index.js';

const SELF = fileURLToPath(import.meta.url);
const CONSUMER = fileURLToPath(new URL('./drain-consumer.mjs', import.meta.url));
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

/** One process.memoryUsage() reading in MB, with V8's young generation (new space) size. */
export interface Memory {
  readonly rss: number;
  readonly heapTotal: number;
  readonly heapUsed: number;
  readonly external: number;
  readonly arrayBuffers: number;
  readonly youngGen: number;
}

/** What one drain run reports (written by bench/drain-consumer.mjs). */
export interface DrainRun {
  readonly kind: 'warren' | 'bare';
  /** `dist` (compiled, plain node) or `src` (through tsx). */
  readonly from: 'dist' | 'src';
  /** The consumer process's node flags. */
  readonly loader: string;
  readonly messages: number;
  readonly acked: number;
  readonly failed: number;
  readonly seconds: number;
  readonly perSecond: number;
  /** Once connected and consuming. */
  readonly base: Memory;
  /** Each figure's own peak over the run. */
  readonly peak: Memory;
  /** All figures at the moment of the peak RSS. */
  readonly atPeakRss: Memory;
  /** Heap used and RSS at each tenth of the messages acked. */
  readonly byTenth: readonly { readonly heapUsed: number; readonly rss: number }[];
  readonly ok: boolean;
}

/** What `--json` prints. */
export interface DrainReport {
  readonly messages: number;
  readonly runs: readonly DrainRun[];
}

interface Variant {
  readonly kind: 'warren' | 'bare';
  readonly loader: boolean;
  readonly semiSpaceMb?: number;
}

function positive(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const n = Number(text.replace(/_/g, ''));
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name} ${text} is not a whole number above 0.`);
    process.exit(2);
  }
  return n;
}

/** Builds dist/ when it is missing or older than a source file. */
function ensureBuilt(): void {
  let built = 0;
  try {
    built = statSync(`${ROOT}dist/index.js`).mtimeMs;
  } catch {
    built = 0;
  }
  const stale = readdirSync(`${ROOT}src`, { recursive: true, encoding: 'utf8' }).some((f) => f.endsWith('.ts') && statSync(`${ROOT}src/${f}`).mtimeMs > built);
  if (!stale) return;
  process.stderr.write('building dist/ (npm run build)…\n');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
}

/** Feeder side: publishes `n` messages to `queue`, never more than `backlog` ahead of the acks it is told of. */
async function feed(url: string, queue: string, n: number, backlog: number): Promise<void> {
  const conn = await amqp.connect(url, { noDelay: true });
  const ch = await conn.createConfirmChannel();
  let acked = 0;
  let wake: (() => void) | undefined;
  // The parent writes how many it has acked, one number a line.
  process.stdin.setEncoding('utf8');
  let buffered = '';
  process.stdin.on('data', (chunk: string) => {
    buffered += chunk;
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) if (line) acked = Number(line);
    wake?.();
  });
  let sent = 0;
  while (sent < n) {
    while (sent - acked >= backlog) await new Promise<void>((r) => (wake = r));
    const upTo = Math.min(n, sent + 1000, acked + backlog);
    for (; sent < upTo; sent++) {
      const now = new Date();
      const ok = ch.sendToQueue(queue, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: sent })), {
        messageId: randomUUID(),
        contentType: 'application/json',
        persistent: true,
        timestamp: Math.floor(now.getTime() / 1000),
        headers: { [HEADER.occurredAt]: now.toISOString() },
      });
      if (!ok) await new Promise((r) => ch.once('drain', r));
    }
    await ch.waitForConfirms();
  }
  await ch.close();
  await conn.close();
  process.stdin.destroy();
}

/** Drains `messages` once through the consumer `variant` names, in a process of its own; returns what it measured. */
export async function drainOnce(options: { url: string; messages: number; backlog: number; prefetch: number; variant: Variant }): Promise<DrainRun> {
  const { url, messages, backlog, prefetch, variant } = options;
  const prefix = `bench.drain.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const topology = defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
  const c = [...topology.consumers.values()][0];
  if (!c) throw new Error('drain topology has no consumer');
  const admin = await amqp.connect(url);
  try {
    await declareTopology(admin, topology);
    const flags = [...(variant.semiSpaceMb === undefined ? [] : [`--max-semi-space-size=${variant.semiSpaceMb}`]), ...(variant.loader ? ['--import', 'tsx'] : [])];
    const consumer = spawn(process.execPath, [...flags, CONSUMER, variant.kind, variant.loader ? 'src' : 'dist', url, prefix, String(messages), String(prefetch)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    const feeder = spawn(process.execPath, ['--import', 'tsx', SELF, '--feed', url, c.queue, String(messages), String(backlog)], { cwd: ROOT, stdio: ['pipe', 'inherit', 'inherit'] });
    // The feeder stops reading once it has sent everything: a count written after that is
    // of no use to it, and the broken pipe is no failure.
    feeder.stdin.on('error', () => undefined);
    const exited = (p: typeof feeder | typeof consumer): Promise<number | null> => (p.exitCode !== null ? Promise.resolve(p.exitCode) : new Promise((r) => p.once('exit', r)));
    let run: DrainRun | undefined;
    const lines = createInterface({ input: consumer.stdout });
    lines.on('line', (line) => {
      if (line.startsWith('acked ')) {
        if (feeder.exitCode === null && feeder.stdin.writable) feeder.stdin.write(`${line.slice(6)}\n`);
      } else if (line.startsWith('report ')) run = JSON.parse(line.slice(7)) as DrainRun;
    });
    // A feeder that fails leaves the consumer waiting: stop it.
    void exited(feeder).then((code) => {
      if (code !== 0 && consumer.exitCode === null) consumer.kill();
    });
    const code = await exited(consumer);
    feeder.stdin.end();
    if (feeder.exitCode === null && run === undefined) feeder.kill();
    await exited(feeder);
    if (run === undefined) throw new Error(`the ${variant.kind} consumer exited ${code} without a report`);
    return run;
  } finally {
    const ch = await admin.createChannel();
    for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q);
    await ch.deleteExchange(topology.exchange);
    await ch.close();
    await admin.close();
  }
}

function label(run: DrainRun): string {
  const who = run.kind === 'warren' ? 'warren' : 'bare amqplib';
  const how = run.from === 'src' ? 'node --import tsx, src/' : 'node, dist/';
  const semi = /--max-semi-space-size=(\d+)/.exec(run.loader);
  return `${who} (${how}${semi ? `, --max-semi-space-size=${semi[1]}` : ''})`;
}

function printRuns(report: DrainReport, prefetch: number, backlog: number): void {
  const { runs } = report;
  const mb = (n: number): string => n.toFixed(1).padStart(8);
  console.log(`${report.messages.toLocaleString('en-US')} messages per run, prefetch ${prefetch}, at most ${backlog.toLocaleString('en-US')} queued ahead.`);
  console.log('Measured: the consuming process alone (the publisher and this script run apart), process.memoryUsage() every 50 ms, MB.');
  const w = Math.max(...runs.map((r) => label(r).length));
  console.log(`${'consumer'.padEnd(w)}  start RSS  peak RSS  peak heapUsed  heapTotal  external  arrayBuffers  young gen    msg/s`);
  for (const r of runs) {
    console.log(`${label(r).padEnd(w)}  ${mb(r.base.rss)} ${mb(r.peak.rss)}  ${mb(r.peak.heapUsed).padStart(13)}  ${mb(r.peak.heapTotal).padStart(9)}  ${mb(r.peak.external)}  ${mb(r.peak.arrayBuffers).padStart(12)}  ${mb(r.peak.youngGen).padStart(9)}  ${Math.round(r.perSecond).toLocaleString('en-US').padStart(7)}${r.ok ? '' : '  NOT ALL ACKED FIRST TIME'}`);
  }
  for (const r of runs) console.log(`${label(r).padEnd(w)}  heap at each tenth: ${r.byTenth.map((t) => t.heapUsed.toFixed(1)).join(' ')}; RSS: ${r.byTenth.map((t) => t.rss.toFixed(0)).join(' ')}`);
  const plain = (kind: string): DrainRun | undefined => runs.find((r) => r.kind === kind && r.from === 'dist' && !r.loader.includes('semi'));
  const warren = plain('warren');
  const bare = plain('bare');
  if (warren) console.log(`\nwarren consumer, plain node on dist/: peak RSS ${warren.peak.rss.toFixed(1)} MB, peak heap ${warren.peak.heapUsed.toFixed(1)} MB${bare ? ` (bare amqplib: ${bare.peak.rss.toFixed(1)} MB, ${bare.peak.heapUsed.toFixed(1)} MB)` : ''}`);
  const capped = runs.find((r) => r.kind === 'warren' && r.loader.includes('semi'));
  const cappedBare = runs.find((r) => r.kind === 'bare' && r.loader.includes('semi'));
  if (capped) console.log(`the same with ${/--max-semi-space-size=\d+/.exec(capped.loader)?.[0]}: peak RSS ${capped.peak.rss.toFixed(1)} MB, peak heap ${capped.peak.heapUsed.toFixed(1)} MB${cappedBare ? ` (bare amqplib: ${cappedBare.peak.rss.toFixed(1)} MB, ${cappedBare.peak.heapUsed.toFixed(1)} MB)` : ''}`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const feedAt = process.argv.indexOf('--feed');
  if (feedAt >= 0) {
    const [url, queue, n, backlog] = process.argv.slice(feedAt + 1);
    await feed(url as string, queue as string, Number(n), Number(backlog));
  } else {
    const { values } = parseArgs({
      options: {
        messages: { type: 'string' },
        backlog: { type: 'string' },
        prefetch: { type: 'string' },
        'max-rss-mb': { type: 'string' },
        'with-loader': { type: 'boolean' },
        'semi-space': { type: 'string' },
        only: { type: 'string' },
        url: { type: 'string' },
        json: { type: 'boolean' },
      },
    });
    const url = values.url ?? process.env['WARREN_BENCH_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
    const messages = positive('messages', values.messages, 1_000_000);
    const backlog = positive('backlog', values.backlog, 20_000);
    const prefetch = positive('prefetch', values.prefetch, 50);
    const maxRss = positive('max-rss-mb', values['max-rss-mb'], 100);
    const semi = values['semi-space'] === 'off' ? undefined : positive('semi-space', values['semi-space'], 2);
    const only = values.only;
    const kinds: readonly Variant['kind'][] | undefined = only === undefined ? ['warren', 'bare'] : only === 'warren' || only === 'bare' ? [only] : undefined;
    if (!kinds) {
      console.error(`--only ${values.only}: choose warren or bare.`);
      process.exit(2);
    }
    ensureBuilt();
    // Warren and bare alternate within each setting, the loader-free one first.
    const variants: Variant[] = [];
    for (const loader of values['with-loader'] ? [false, true] : [false]) for (const kind of kinds) variants.push({ kind, loader });
    if (semi !== undefined) for (const kind of kinds) variants.push({ kind, loader: false, semiSpaceMb: semi });
    const runs: DrainRun[] = [];
    for (const variant of variants) {
      const run = await drainOnce({ url, messages, backlog, prefetch, variant });
      if (!values.json) console.log(`${label(run)}: ${run.acked.toLocaleString('en-US')} acked in ${run.seconds.toFixed(1)} s, peak RSS ${run.peak.rss.toFixed(1)} MB`);
      runs.push(run);
    }
    const report: DrainReport = { messages, runs };
    if (values.json) console.log(JSON.stringify(report));
    else {
      console.log();
      printRuns(report, prefetch, backlog);
    }
    const headline = runs.find((r) => r.kind === 'warren' && r.from === 'dist' && !r.loader.includes('semi'));
    const allOk = runs.every((r) => r.ok);
    const good = allOk && (headline === undefined || headline.peak.rss < maxRss);
    if (!good) console.error(allOk ? `warren's peak RSS ${headline?.peak.rss.toFixed(1)} MB is over --max-rss-mb ${maxRss}` : 'not every message was acked the first time');
    process.exit(good ? 0 : 1);
  }
}
