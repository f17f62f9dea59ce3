/**
 * Core benchmark: what warren's consumer and publisher cost against bare amqplib doing
 * the same work on the same broker, in one run.
 *
 * - consume: messages/s drained from a pre-filled backlog by a warren consumer (success
 *   path) and by a bare amqplib consumer with the same prefetch and one manual ack per
 *   message. Both read the same queue, the same messages (same size and properties),
 *   both parse the JSON body and do nothing else; timed from the first delivery to the
 *   last ack. Rounds alternate warren and bare (which goes first alternates too), on
 *   every broker given; the medians and the median of each round's ratio are reported,
 *   with the client CPU per message. warren is loaded from the compiled `dist/` (built
 *   first when older than `src/`), as an application loads it (see bench/built.ts).
 * - publish: confirmed publishes/s through warren's Publisher and through a bare
 *   ConfirmChannel with the same in-flight window, `mandatory`, persistent, a JSON body
 *   serialized per message and a message id per message.
 * - memory: peak RSS and heap of a warren consumer (and of a bare one, for scale)
 *   draining a 100,000-message backlog, each in a child process of its own so the
 *   figure is that process's alone.
 *
 * Run alone with `npx tsx bench/consume.ts`. The consume figures run on every broker of
 * WARREN_BENCH_CONSUME_URLS (comma separated, default the 3.10 and 4.0 brokers of the
 * development machine, amqp://guest:guest@127.0.0.1:5672 and :5673); publish and memory
 * on WARREN_BENCH_AMQP_URL, AMQP_URL or WARREN_AMQP_URL (default the first). It declares
 * queues of its own and deletes them afterwards. Sized for a 2-core machine: a few
 * minutes. WARREN_BENCH_CONSUME_MESSAGES (default 30,000), WARREN_BENCH_PUBLISH_MESSAGES,
 * WARREN_BENCH_MEMORY_MESSAGES and WARREN_BENCH_ROUNDS (default 5) change the sizes;
 * WARREN_BENCH_SMALL=1 makes them all small (a quick check that it runs).
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { defineTopology, HEADER, Warren, type Topology } from '../src/index.js';
import { loadBuilt } from './built.js';
import { AMQP_URL, brokerLabel, brokerUrls, brokerVersion, deleteTopology, median, printRows, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
const CONSUME_MESSAGES = Number(process.env['WARREN_BENCH_CONSUME_MESSAGES'] ?? (SMALL ? 3_000 : 30_000));
const PUBLISH_MESSAGES = Number(process.env['WARREN_BENCH_PUBLISH_MESSAGES'] ?? (SMALL ? 3_000 : 30_000));
const MEMORY_MESSAGES = Number(process.env['WARREN_BENCH_MEMORY_MESSAGES'] ?? (SMALL ? 5_000 : 100_000));
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? (SMALL ? 3 : 5));
/** The brokers the consume figures run on. */
const CONSUME_URLS = brokerUrls('WARREN_BENCH_CONSUME_URLS');
const PREFETCH = 50;
const WINDOW = 256;
const ROUTING_KEY = 'bench.order';
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

/** What a drain measured, first delivery to last ack: messages/s and client CPU per message (µs). */
interface Drained {
  readonly rate: number;
  readonly cpuUs: number;
}

const cpuSince = (start: NodeJS.CpuUsage, n: number): number => {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
};

/** Messages/s of a warren consumer over a backlog of `n`, first delivery to last ack. */
async function warrenDrain(topology: Topology, n: number, url: string = AMQP_URL, lib: { Warren: typeof Warren } = { Warren }): Promise<Drained> {
  const { name } = workQueue(topology);
  const warren = await lib.Warren.connect({ url, topology, declare: false, connectionName: 'warren-bench' });
  try {
    let first = 0;
    let cpu = process.cpuUsage();
    let finish!: (ms: number) => void;
    let fail!: (error: unknown) => void;
    const finished = new Promise<number>((resolve, reject) => {
      finish = resolve;
      fail = reject;
    });
    // An async handler, as applications write them; it does no work.
    const consumer = await warren.consume(name, async () => {
      if (first === 0) {
        first = performance.now();
        cpu = process.cpuUsage();
      }
    }, { prefetch: PREFETCH, concurrency: PREFETCH });
    // Every message must succeed the first time: a retry would measure something else.
    // Outcomes can come before `consume()` returns, so count with the stats, not the events.
    const check = (): void => {
      const s = consumer.stats;
      if (s.retried + s.parked + s.requeued + s.redeliveryMoved + s.duplicate > 0) fail(new Error(`a bench message was not acked: ${JSON.stringify(s)}`));
      else if (s.acked === n) finish(performance.now());
    };
    consumer.on('outcome', check);
    check();
    const last = await finished;
    const cpuUs = cpuSince(cpu, n);
    return { rate: n / ((last - first) / 1000), cpuUs };
  } finally {
    await warren.close();
  }
}

/** Messages/s of a bare amqplib consumer, same prefetch, one ack per message, JSON parsed. */
async function bareDrain(queue: string, n: number, url: string = AMQP_URL): Promise<Drained> {
  const conn = await bareConnect(url);
  try {
    const ch = await conn.createChannel();
    await ch.prefetch(PREFETCH);
    let first = 0;
    let cpu = process.cpuUsage();
    let done = 0;
    let sink = 0;
    const last = await new Promise<number>((resolve, reject) => {
      ch.consume(queue, (msg) => {
        if (msg === null) return reject(new Error('bare consumer cancelled'));
        if (first === 0) {
          first = performance.now();
          cpu = process.cpuUsage();
        }
        sink += (JSON.parse(msg.content.toString('utf8')) as { orderId: number }).orderId;
        ch.ack(msg);
        if (++done === n) resolve(performance.now());
      }).catch(reject);
    });
    const cpuUs = cpuSince(cpu, n);
    if (sink < 0) throw new Error('unreachable');
    await ch.close();
    return { rate: n / ((last - first) / 1000), cpuUs };
  } finally {
    await conn.close();
  }
}

/** Confirmed publishes/s through warren's Publisher (maxInFlight `WINDOW`). */
async function warrenPublish(topology: Topology, n: number): Promise<number> {
  const warren = await Warren.connect({ url: AMQP_URL, topology, declare: false, publisher: { maxInFlight: WINDOW } });
  try {
    // Callers publish as an application would, each awaiting its confirm; twice as many
    // as the window, so the publisher's own limit holds the window full, as the bare
    // loop does. (Starting all n at once measures the caller's memory, not the publisher.)
    const started = performance.now();
    let next = 0;
    const caller = async (): Promise<void> => {
      while (next < n) await warren.publish(ROUTING_KEY, { ...PAYLOAD, orderId: next++ });
    };
    await Promise.all(Array.from({ length: 2 * WINDOW }, caller));
    return n / ((performance.now() - started) / 1000);
  } finally {
    await warren.close();
  }
}

/** Confirmed publishes/s through a bare ConfirmChannel, at most `WINDOW` unconfirmed, `mandatory`. */
async function barePublish(topology: Topology, n: number): Promise<number> {
  const conn = await bareConnect();
  try {
    const ch = await conn.createConfirmChannel();
    let returned = 0;
    ch.on('return', () => returned++);
    const started = performance.now();
    await new Promise<void>((resolve, reject) => {
      let sent = 0;
      let confirmed = 0;
      let inFlight = 0;
      let waitingDrain = false;
      const pump = (): void => {
        while (sent < n && inFlight < WINDOW && !waitingDrain) {
          const now = new Date();
          inFlight++;
          const ok = ch.publish(topology.exchange, ROUTING_KEY, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: sent++ })), {
            mandatory: true,
            persistent: true,
            messageId: randomUUID(),
            contentType: 'application/json',
            timestamp: Math.floor(now.getTime() / 1000),
            headers: { [HEADER.occurredAt]: now.toISOString() },
          }, (err: unknown) => {
            if (err) return reject(err instanceof Error ? err : new Error(String(err)));
            inFlight--;
            if (++confirmed === n) resolve();
            else pump();
          });
          if (!ok) {
            waitingDrain = true;
            ch.once('drain', () => {
              waitingDrain = false;
              pump();
            });
          }
        }
      };
      pump();
    });
    const rate = n / ((performance.now() - started) / 1000);
    if (returned > 0) throw new Error(`${returned} bare publishes were returned unroutable`);
    await ch.close();
    return rate;
  } finally {
    await conn.close();
  }
}

async function purge(queue: string): Promise<void> {
  const conn = await bareConnect();
  try {
    const ch = await conn.createChannel();
    await ch.purgeQueue(queue);
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

/**
 * The consume figures on one broker: warren and bare alternating (which goes first
 * alternates too), each draining the same backlog; medians, the median round ratio and
 * the client CPU per message.
 */
async function consumeOn(url: string, log: (line: string) => void): Promise<BenchRow[]> {
  // warren as an application loads it (see bench/built.ts).
  const lib = await loadBuilt();
  const topology = benchTopology('consume');
  const { queue } = workQueue(topology);
  const setup = await Warren.connect({ url, topology });
  await setup.close();
  const probe = await bareConnect(url);
  const version = brokerVersion(probe);
  await probe.close();
  try {
    // Warm up both paths (JIT, broker queue process) on a smaller backlog.
    const warm = Math.min(5000, CONSUME_MESSAGES);
    await fill(queue, warm, url);
    await warrenDrain(topology, warm, url, lib);
    await fill(queue, warm, url);
    await bareDrain(queue, warm, url);
    const got = { warren: [] as Drained[], bare: [] as Drained[] };
    const ratios: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? (['warren', 'bare'] as const) : (['bare', 'warren'] as const);
      for (const who of order) {
        await fill(queue, CONSUME_MESSAGES, url);
        got[who].push(who === 'warren' ? await warrenDrain(topology, CONSUME_MESSAGES, url, lib) : await bareDrain(queue, CONSUME_MESSAGES, url));
      }
      const w = got.warren.at(-1) as Drained;
      const b = got.bare.at(-1) as Drained;
      ratios.push(w.rate / b.rate);
      log(`${brokerLabel(url)} consume round ${round + 1}: warren ${Math.round(w.rate)} msg/s (${w.cpuUs.toFixed(1)} µs CPU), bare ${Math.round(b.rate)} msg/s (${b.cpuUs.toFixed(1)} µs CPU), ratio ${(ratios.at(-1) as number).toFixed(3)}`);
    }
    return [
      {
        group: `consume, success path (${CONSUME_MESSAGES.toLocaleString('en-US')} backlog, prefetch ${PREFETCH}), RabbitMQ ${version} (${brokerLabel(url)})`,
        metric: `messages/s, median of ${ROUNDS} (median round ratio ${median(ratios).toFixed(2)})`,
        warren: median(got.warren.map((d) => d.rate)),
        baseline: median(got.bare.map((d) => d.rate)),
        baselineName: 'bare amqplib',
        goal: '>= 0.95',
      },
      { group: '  same, client CPU', metric: 'microseconds per message, median', warren: median(got.warren.map((d) => d.cpuUs)), baseline: median(got.bare.map((d) => d.cpuUs)), baselineName: 'bare amqplib' },
    ];
  } finally {
    await deleteTopology(topology, url);
  }
}

/** The core figures: consume and publish rates against bare amqplib, and consumer memory. */
export async function benchCore(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const log = (line: string): void => void process.stderr.write(`bench/consume: ${line}\n`);

  // (a) consume, success path, on every broker given.
  for (const url of CONSUME_URLS) rows.push(...(await consumeOn(url, log)));

  // (b) confirmed publishes.
  {
    const topology = benchTopology('publish');
    const { queue } = workQueue(topology);
    const setup = await Warren.connect({ url: AMQP_URL, topology });
    await setup.close();
    try {
      const warm = Math.min(5000, PUBLISH_MESSAGES);
      await warrenPublish(topology, warm);
      await barePublish(topology, warm);
      await purge(queue);
      const w: number[] = [];
      const b: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 === 0 ? (['warren', 'bare'] as const) : (['bare', 'warren'] as const);
        for (const who of order) {
          const rate = who === 'warren' ? await warrenPublish(topology, PUBLISH_MESSAGES) : await barePublish(topology, PUBLISH_MESSAGES);
          await purge(queue);
          (who === 'warren' ? w : b).push(rate);
          log(`publish round ${round + 1}: ${who} ${Math.round(rate)} msg/s`);
        }
      }
      rows.push({ group: `confirmed publish (window ${WINDOW}, mandatory)`, metric: 'publishes/s, median', warren: median(w), baseline: median(b), baselineName: 'bare ConfirmChannel', goal: '>= 0.9' });
    } finally {
      await deleteTopology(topology);
    }
  }

  // (c) memory of a consumer draining a large backlog, in a child process each.
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
    printRows(await benchCore());
  }
}
