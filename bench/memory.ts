/**
 * Memory benchmark: peak RSS and heap of a warren consumer (and of a bare amqplib one,
 * for scale) draining a 100,000-message backlog, each in a child process of its own so
 * the figure is that process's alone. (Rates and CPU per message against bare amqplib
 * and other clients are bench/clients.ts; a million messages, bench/drain.ts.)
 *
 * Run alone with `npx tsx bench/memory.ts`, on WARREN_BENCH_AMQP_URL, AMQP_URL or
 * WARREN_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672). WARREN_BENCH_MEMORY_MESSAGES
 * sets the backlog; WARREN_BENCH_SMALL=1 makes it small.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { defineTopology, HEADER, Warren, type Topology } from '../src/index.js';
import { AMQP_URL, deleteTopology, printRows, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
const MEMORY_MESSAGES = Number(process.env['WARREN_BENCH_MEMORY_MESSAGES'] ?? (SMALL ? 5_000 : 100_000));
const PREFETCH = 50;
/** The body every message carries: about 200 bytes of JSON. */
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

const SELF = fileURLToPath(import.meta.url);

/** A topology of one consumer with unique names. */
function benchTopology(label: string): Topology {
  const prefix = `bench.core.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  return defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
}

function workQueue(topology: Topology): { name: string; queue: string } {
  const c = [...topology.consumers.values()][0];
  if (!c) throw new Error('bench topology has no consumer');
  return { name: c.name, queue: c.queue };
}


/** Opens a bare amqplib connection with the socket options warren uses. */
function bareConnect(url: string = AMQP_URL): Promise<amqp.ChannelModel> {
  return amqp.connect(url, { noDelay: true });
}

/**
 * Puts `n` messages in `queue`, shaped as warren's publisher shapes them (message id,
 * JSON content type, persistent, timestamp, occurred-at header), with confirms.
 */
async function fill(queue: string, n: number, url: string = AMQP_URL): Promise<void> {
  const conn = await bareConnect(url);
  try {
    const ch = await conn.createConfirmChannel();
    const batch = 2000;
    for (let i = 0; i < n; i += batch) {
      for (let j = i; j < Math.min(n, i + batch); j++) {
        const now = new Date();
        ch.sendToQueue(queue, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: j })), {
          messageId: randomUUID(),
          contentType: 'application/json',
          persistent: true,
          timestamp: Math.floor(now.getTime() / 1000),
          headers: { [HEADER.occurredAt]: now.toISOString() },
        });
      }
      await ch.waitForConfirms();
    }
    await ch.close();
  } finally {
    await conn.close();
  }
}

/** What a memory child reports on stdout. */
interface MemoryReport {
  readonly messages: number;
  readonly baseRssMb: number;
  readonly peakRssMb: number;
  readonly baseHeapMb: number;
  readonly peakHeapMb: number;
  /** Heap in use after the drain and a full GC, less the baseline: what stays. */
  readonly retainedHeapMb: number;
  readonly seconds: number;
}

const MB = 1024 * 1024;

/**
 * Child side: connects, samples memory once settled, drains the backlog with a warren
 * (or bare) consumer while sampling every 20 ms, then prints a {@link MemoryReport}.
 */
async function memoryChild(kind: 'warren' | 'bare', topologyJson: string, n: number): Promise<void> {
  const topology = defineTopology(JSON.parse(topologyJson) as Parameters<typeof defineTopology>[0]);
  const { name, queue } = workQueue(topology);
  let peakRss = 0;
  let peakHeap = 0;
  const sample = (): void => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed);
  };
  let done = 0;
  let finish!: () => void;
  const finished = new Promise<void>((r) => (finish = r));
  let close: () => Promise<void>;
  let start: () => Promise<void>;
  if (kind === 'warren') {
    const warren = await Warren.connect({ url: AMQP_URL, topology, declare: false });
    close = () => warren.close();
    start = async () => {
      const consumer = await warren.consume(name, async () => undefined, { prefetch: PREFETCH, concurrency: PREFETCH });
      const check = (): void => {
        if (consumer.stats.acked === n) finish();
      };
      consumer.on('outcome', check);
      check();
    };
  } else {
    const conn = await bareConnect();
    const ch = await conn.createChannel();
    await ch.prefetch(PREFETCH);
    close = () => conn.close();
    start = async () => {
      await ch.consume(queue, (msg) => {
        if (msg === null) return;
        JSON.parse(msg.content.toString('utf8'));
        ch.ack(msg);
        if (++done === n) finish();
      });
    };
  }
  // The baseline: everything loaded and connected, nothing consumed yet.
  global.gc?.();
  await new Promise((r) => setTimeout(r, 200));
  const base = process.memoryUsage();
  const timer = setInterval(sample, 20);
  const started = performance.now();
  await start();
  await finished;
  sample();
  clearInterval(timer);
  const seconds = (performance.now() - started) / 1000;
  global.gc?.();
  const after = process.memoryUsage();
  await close();
  const report: MemoryReport = { messages: n, baseRssMb: base.rss / MB, peakRssMb: peakRss / MB, baseHeapMb: base.heapUsed / MB, peakHeapMb: peakHeap / MB, retainedHeapMb: (after.heapUsed - base.heapUsed) / MB, seconds };
  process.stdout.write(`${JSON.stringify(report)}\n`);
}

/** Runs {@link memoryChild} in a process of its own and returns its report. */
function runMemoryChild(kind: 'warren' | 'bare', topology: Topology, n: number): Promise<MemoryReport> {
  const c = [...topology.consumers.values()][0];
  if (!c) throw new Error('bench topology has no consumer');
  const json = JSON.stringify({ exchange: topology.exchange, consumers: { [c.name]: { bindings: c.bindings } } });
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', SELF, '--memory-child', kind, json, String(n)], {
      env: { ...process.env, WARREN_BENCH_AMQP_URL: AMQP_URL },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const line = out.trim().split('\n').at(-1);
      if (code !== 0 || line === undefined) return reject(new Error(`memory child (${kind}) exited ${code}: ${out}`));
      resolve(JSON.parse(line) as MemoryReport);
    });
  });
}

/** Consumer memory against bare amqplib, each draining a backlog in a process of its own. */
export async function benchMemory(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const log = (line: string): void => void process.stderr.write(`bench/consume: ${line}\n`);

  // Memory of a consumer draining a large backlog, in a child process each.
  {
    const topology = benchTopology('memory');
    const { queue } = workQueue(topology);
    const setup = await Warren.connect({ url: AMQP_URL, topology });
    await setup.close();
    try {
      await fill(queue, MEMORY_MESSAGES);
      const w = await runMemoryChild('warren', topology, MEMORY_MESSAGES);
      log(`memory: warren ${JSON.stringify(w)}`);
      await fill(queue, MEMORY_MESSAGES);
      const b = await runMemoryChild('bare', topology, MEMORY_MESSAGES);
      log(`memory: bare ${JSON.stringify(b)}`);
      const group = `consumer memory (${MEMORY_MESSAGES.toLocaleString('en-US')} backlog, own process)`;
      rows.push({ group, metric: 'peak RSS delta, MB', warren: w.peakRssMb - w.baseRssMb, baseline: b.peakRssMb - b.baseRssMb, baselineName: 'bare amqplib' });
      rows.push({ group, metric: 'peak heap used, MB', warren: w.peakHeapMb, baseline: b.peakHeapMb, baselineName: 'bare amqplib' });
      rows.push({ group, metric: 'peak RSS, MB', warren: w.peakRssMb, baseline: b.peakRssMb, baselineName: 'bare amqplib' });
      rows.push({ group, metric: 'heap kept after drain + GC, MB', warren: w.retainedHeapMb, baseline: b.retainedHeapMb, baselineName: 'bare amqplib' });
    } finally {
      await deleteTopology(topology);
    }
  }
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const i = process.argv.indexOf('--memory-child');
  if (i >= 0) {
    const [kind, json, n] = process.argv.slice(i + 1);
    await memoryChild(kind === 'bare' ? 'bare' : 'warren', json ?? '{}', Number(n));
  } else {
    printRows(await benchMemory());
  }
}
