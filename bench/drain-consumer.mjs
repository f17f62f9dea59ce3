// The consuming side of `npm run drain` (bench/drain.ts starts it): plain JavaScript, so
// the process it measures carries no TypeScript loader unless the bench asks for one.
//
//   node bench/drain-consumer.mjs KIND FROM URL PREFIX MESSAGES PREFETCH
//
// KIND is `warren` (a warren consumer, handler `async () => undefined`) or `bare` (amqplib
// alone: basic.consume, JSON.parse, ack). FROM is `dist` (the compiled package) or `src`
// (the TypeScript sources; needs `--import tsx`). It drains MESSAGES from the queue of the
// topology named by PREFIX, writes `acked N` lines as it goes (the bench passes them on to
// the feeder) and, at the end, one `report {json}` line: process.memoryUsage() peaks, the
// breakdown at the peak RSS, and heap and RSS at each tenth of the messages.
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { clearInterval, setInterval } from 'node:timers';
import { getHeapSpaceStatistics } from 'node:v8';
import * as amqp from 'amqplib';

const MB = 1024 * 1024;
const [kind, from, url, prefix, count, prefetchText] = process.argv.slice(2);
const messages = Number(count);
const prefetch = Number(prefetchText);
const round = (bytes) => Math.round((bytes / MB) * 10) / 10;

/** The memory figures of this process, in MB: process.memoryUsage() and V8's young generation. */
function memory() {
  const m = process.memoryUsage();
  const young = getHeapSpaceStatistics().find((s) => s.space_name === 'new_space');
  return { rss: round(m.rss), heapTotal: round(m.heapTotal), heapUsed: round(m.heapUsed), external: round(m.external), arrayBuffers: round(m.arrayBuffers), youngGen: round(young?.space_size ?? 0) };
}

let acked = 0;
let failed = 0;
let finish;
const finished = new Promise((resolve) => (finish = resolve));
let close;

if (kind === 'warren') {
  const { defineTopology, Warren } = await import(from === 'src' ? '../src/index.ts' : '../dist/index.js');
  const topology = defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
  const warren = await Warren.connect({ url, topology, connectionName: 'warren-drain' });
  const consumer = await warren.consume(`${prefix}.work`, async () => undefined, { prefetch, concurrency: prefetch });
  consumer.on('outcome', () => {
    const s = consumer.stats;
    acked = s.acked;
    failed = s.retried + s.parked + s.requeued + s.redeliveryMoved + s.duplicate;
    if (failed > 0 || acked >= messages) finish();
  });
  close = () => warren.close();
} else if (kind === 'bare') {
  const conn = await amqp.connect(url, { noDelay: true });
  const ch = await conn.createChannel();
  await ch.prefetch(prefetch);
  await ch.consume(`${prefix}.work`, (msg) => {
    if (msg === null) return;
    JSON.parse(msg.content.toString('utf8'));
    ch.ack(msg);
    if (msg.fields.redelivered) failed++;
    if (++acked >= messages || failed > 0) finish();
  });
  close = () => conn.close();
} else {
  process.stderr.write(`unknown consumer kind ${kind}\n`);
  process.exit(2);
}

const base = memory();
const peak = { ...base };
let atPeakRss = base;
const sampler = setInterval(() => {
  const m = memory();
  for (const k of Object.keys(peak)) if (m[k] > peak[k]) peak[k] = m[k];
  if (m.rss >= atPeakRss.rss) atPeakRss = m;
}, 50);
const byTenth = [];
const tenth = Math.max(1, Math.floor(messages / 10));
let told = 0;
const tell = setInterval(() => {
  while (acked >= (byTenth.length + 1) * tenth && byTenth.length < 10) {
    const m = memory();
    byTenth.push({ heapUsed: m.heapUsed, rss: m.rss });
  }
  if (acked !== told) process.stdout.write(`acked ${(told = acked)}\n`);
}, 20);
const started = performance.now();
await finished;
const seconds = (performance.now() - started) / 1000;
clearInterval(sampler);
clearInterval(tell);
while (byTenth.length < 10 && acked >= (byTenth.length + 1) * tenth) byTenth.push({ heapUsed: memory().heapUsed, rss: memory().rss });
const report = { kind, from, loader: process.execArgv.join(' '), messages, acked, failed, seconds, perSecond: acked / seconds, base, peak, atPeakRss, byTenth, ok: failed === 0 && acked === messages };
process.stdout.write(`acked ${acked}\nreport ${JSON.stringify(report)}\n`);
await close();
