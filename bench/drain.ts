/**
 * `npm run drain -- --messages N`: a warren consumer drains N messages while a feeder,
 * in a process of its own, publishes them (confirmed, at most `--backlog` ahead of the
 * consumer), and this process samples its memory every 50 ms. Prints the peak RSS and
 * heap, the heap at each tenth of the run (flat is the goal: nothing kept per message),
 * and the rate. Exits 1 if a message was not acked the first time or the RSS grew past
 * `--max-growth-mb` over its level once connected. (Run through tsx, the process starts
 * at about 88 MB RSS, some 50 MB of it tsx's loader; the same application compiled starts
 * near 40 MB. The growth is what draining costs.)
 *
 *   npm run drain -- --messages 1000000
 *   npm run drain -- --messages 20000 --json     one line of JSON (what test/drain.test.ts reads)
 *
 * Options: --messages (default 1,000,000), --backlog (most messages queued ahead of the
 * consumer, default 20,000), --prefetch (default 50), --max-growth-mb (default 50), --url
 * (default WARREN_BENCH_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672). It declares
 * queues of its own and deletes them afterwards.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import * as amqp from 'amqplib';
import { defineTopology, HEADER, Warren } from '../src/index.js';

const SELF = fileURLToPath(import.meta.url);
const MB = 1024 * 1024;
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

/** What a drain run reports. */
export interface DrainReport {
  readonly messages: number;
  readonly acked: number;
  readonly seconds: number;
  readonly perSecond: number;
  readonly baseRssMb: number;
  readonly peakRssMb: number;
  readonly peakHeapMb: number;
  /** Heap used at each tenth of the messages acked. */
  readonly heapByTenthMb: readonly number[];
  readonly ok: boolean;
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

/** Consumer side: drains `messages` with a warren consumer, sampling memory. */
export async function drain(options: { url: string; messages: number; backlog: number; prefetch: number; log?: (line: string) => void }): Promise<DrainReport> {
  const { url, messages, backlog, prefetch } = options;
  const log = options.log ?? (() => undefined);
  const prefix = `bench.drain.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const topology = defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
  const c = [...topology.consumers.values()][0];
  if (!c) throw new Error('drain topology has no consumer');
  const warren = await Warren.connect({ url, topology, connectionName: 'warren-drain' });
  const feeder = spawn(process.execPath, ['--import', 'tsx', SELF, '--feed', url, c.queue, String(messages), String(backlog)], { stdio: ['pipe', 'inherit', 'inherit'] });
  // The feeder stops reading once it has sent everything: a count written after that is
  // of no use to it, and the broken pipe is no failure.
  feeder.stdin?.on('error', () => undefined);
  let feederFailed: Error | undefined;
  feeder.once('exit', (code) => {
    if (code !== 0) feederFailed = new Error(`the feeder exited ${code}`);
  });
  let report: DrainReport;
  try {
    global.gc?.();
    const base = process.memoryUsage();
    let peakRss = base.rss;
    let peakHeap = base.heapUsed;
    const sampler = setInterval(() => {
      const m = process.memoryUsage();
      if (m.rss > peakRss) peakRss = m.rss;
      if (m.heapUsed > peakHeap) peakHeap = m.heapUsed;
    }, 50);
    const heapByTenth: number[] = [];
    const tenth = Math.max(1, Math.floor(messages / 10));
    let failed = false;
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    const started = performance.now();
    const consumer = await warren.consume(c.name, async () => undefined, { prefetch, concurrency: prefetch });
    let told = 0;
    const tell = setInterval(() => {
      const acked = consumer.stats.acked;
      if (acked !== told && feeder.exitCode === null && feeder.stdin?.writable) feeder.stdin.write(`${(told = acked)}\n`);
      if (feederFailed) finish();
    }, 20);
    let nextTenth = tenth;
    const check = (): void => {
      const s = consumer.stats;
      if (s.retried + s.parked + s.requeued + s.redeliveryMoved + s.duplicate > 0) {
        failed = true;
        finish();
      }
      while (s.acked >= nextTenth && heapByTenth.length < 10) {
        heapByTenth.push(process.memoryUsage().heapUsed / MB);
        log(`${s.acked.toLocaleString('en-US')} acked, rss ${(process.memoryUsage().rss / MB).toFixed(1)} MB, heap ${(heapByTenth.at(-1) as number).toFixed(1)} MB`);
        nextTenth += tenth;
      }
      if (s.acked >= messages) finish();
    };
    consumer.on('outcome', check);
    await finished;
    const seconds = (performance.now() - started) / 1000;
    clearInterval(sampler);
    clearInterval(tell);
    const acked = consumer.stats.acked;
    report = {
      messages,
      acked,
      seconds,
      perSecond: acked / seconds,
      baseRssMb: base.rss / MB,
      peakRssMb: peakRss / MB,
      peakHeapMb: peakHeap / MB,
      heapByTenthMb: heapByTenth,
      ok: !failed && feederFailed === undefined && acked === messages,
    };
  } finally {
    feeder.stdin?.end();
    if (feeder.exitCode === null) await new Promise((r) => feeder.once('exit', r));
    await warren.close();
    const conn = await amqp.connect(url);
    try {
      const ch = await conn.createChannel();
      for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q);
      await ch.deleteExchange(topology.exchange);
      await ch.close();
    } finally {
      await conn.close();
    }
  }
  return report;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const feedAt = process.argv.indexOf('--feed');
  if (feedAt >= 0) {
    const [url, queue, n, backlog] = process.argv.slice(feedAt + 1);
    await feed(url as string, queue as string, Number(n), Number(backlog));
  } else {
    const { values } = parseArgs({ options: { messages: { type: 'string' }, backlog: { type: 'string' }, prefetch: { type: 'string' }, 'max-growth-mb': { type: 'string' }, url: { type: 'string' }, json: { type: 'boolean' } } });
    const url = values.url ?? process.env['WARREN_BENCH_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
    const messages = positive('messages', values.messages, 1_000_000);
    const maxGrowth = positive('max-growth-mb', values['max-growth-mb'], 50);
    const report = await drain({
      url,
      messages,
      backlog: positive('backlog', values.backlog, 20_000),
      prefetch: positive('prefetch', values.prefetch, 50),
      ...(values.json ? {} : { log: (line: string) => console.log(line) }),
    });
    if (values.json) console.log(JSON.stringify(report));
    else {
      console.log(`drained ${report.acked.toLocaleString('en-US')} of ${messages.toLocaleString('en-US')} in ${report.seconds.toFixed(1)} s (${Math.round(report.perSecond).toLocaleString('en-US')} msg/s)`);
      console.log(`RSS: ${report.baseRssMb.toFixed(1)} MB at start, peak ${report.peakRssMb.toFixed(1)} MB (+${(report.peakRssMb - report.baseRssMb).toFixed(1)} MB); heap peak ${report.peakHeapMb.toFixed(1)} MB`);
      console.log(`heap at each tenth, MB: ${report.heapByTenthMb.map((h) => h.toFixed(1)).join(' ')}`);
    }
    const growth = report.peakRssMb - report.baseRssMb;
    const good = report.ok && growth < maxGrowth;
    if (!good) console.error(report.ok ? `RSS grew ${growth.toFixed(1)} MB, over --max-growth-mb ${maxGrowth}` : 'not every message was acked the first time');
    process.exit(good ? 0 : 1);
  }
}
