/**
 * Metrics benchmark: what warren/metrics costs, in one run on this machine's broker.
 *
 * - consume: messages/s drained from a pre-filled backlog by a warren consumer with
 *   warrenMetrics() on (every outcome counted, every handler timed) and by the same
 *   consumer without; rounds alternate, the median is reported.
 * - publish: confirmed publishes/s through warren.publish with metrics on and off
 *   (every confirm counted and timed), same window, same messages.
 * - scrape: a topology of 50 consumers (250 queues): the first scrape (the broker read
 *   through the management API, and through AMQP passive declares when it does not
 *   answer) and a scrape served from the cache.
 *
 * WARREN_BENCH_METRICS_MESSAGES and WARREN_BENCH_ROUNDS change the sizes.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import * as amqp from 'amqplib';
import { defineTopology, HEADER, Warren, type Topology } from '../src/index.js';
import { declareTopology } from '../src/topology/apply.js';
import { warrenMetrics } from '../src/metrics/index.js';
import { AMQP_URL, deleteTopology, type BenchRow } from './report.js';

const MESSAGES = Number(process.env['WARREN_BENCH_METRICS_MESSAGES'] ?? 30_000);
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? 3);
const MGMT_URL = process.env['WARREN_BENCH_MGMT_URL'] ?? process.env['WARREN_MANAGEMENT_URL'] ?? 'http://guest:guest@127.0.0.1:15672';
const PREFETCH = 50;
const WINDOW = 256;
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

function prefix(label: string): string {
  return `bench.metrics.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

async function fill(queue: string, n: number): Promise<void> {
  const conn = await amqp.connect(AMQP_URL, { noDelay: true });
  try {
    const ch = await conn.createConfirmChannel();
    for (let i = 0; i < n; i += 2000) {
      for (let j = i; j < Math.min(n, i + 2000); j++) {
        ch.sendToQueue(queue, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: j })), {
          messageId: randomUUID(),
          contentType: 'application/json',
          persistent: true,
          headers: { [HEADER.occurredAt]: new Date().toISOString() },
        });
      }
      await ch.waitForConfirms();
    }
    await ch.close();
  } finally {
    await conn.close();
  }
}

/** Drains `MESSAGES` from a fresh backlog; messages/s from first delivery to last outcome. */
async function consumeRound(withMetrics: boolean): Promise<number> {
  const p = prefix('consume');
  const name = `${p}.work`;
  const topology = defineTopology({ exchange: `${p}.events`, consumers: { [name]: { bindings: ['bench.#'] } } });
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    await fill(topology.consumer(name).queue, MESSAGES);
    const metrics = withMetrics ? warrenMetrics({ warren, broker: false }) : undefined;
    let first = 0;
    let done = 0;
    let resolve!: () => void;
    const finished = new Promise<void>((r) => (resolve = r));
    await warren.consume(name, async () => {
      if (first === 0) first = performance.now();
    }, {
      prefetch: PREFETCH,
      onOutcome: () => {
        if (++done === MESSAGES) resolve();
      },
    });
    await finished;
    const rate = MESSAGES / ((performance.now() - first) / 1000);
    if (metrics) {
      // The figures are real: every message counted once.
      const text = await metrics.registry.metrics();
      if (!text.includes(`warren_consumer_handler_duration_seconds_count{consumer="${name}",outcome="acked"} ${MESSAGES}`)) throw new Error('the metrics did not count every message');
      await metrics.close();
    }
    return rate;
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

/** Confirmed publishes/s through warren.publish with `WINDOW` in flight. */
async function publishRound(withMetrics: boolean): Promise<number> {
  const p = prefix('publish');
  const topology = defineTopology({ exchange: `${p}.events`, consumers: { [`${p}.sink`]: { bindings: ['bench.#'] } } });
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    const metrics = withMetrics ? warrenMetrics({ warren, broker: false }) : undefined;
    const started = performance.now();
    let next = 0;
    const worker = async () => {
      while (next < MESSAGES) {
        next += 1;
        await warren.publish('bench.order', { ...PAYLOAD, orderId: next });
      }
    };
    await Promise.all(Array.from({ length: WINDOW }, worker));
    const rate = MESSAGES / ((performance.now() - started) / 1000);
    if (metrics) {
      const text = await metrics.registry.metrics();
      if (!text.includes(`warren_publish_confirm_duration_seconds_count ${MESSAGES}`)) throw new Error('the metrics did not count every publish');
      await metrics.close();
    }
    return rate;
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

/** Scrape times for a topology of 50 consumers (3 retry tiers each: 250 queues). */
async function scrapeTimes(): Promise<{ coldMs: number; cachedMs: number; amqpColdMs: number; queues: number }> {
  const p = prefix('scrape');
  const consumers: Record<string, { bindings: string[] }> = {};
  for (let i = 0; i < 50; i++) consumers[`${p}.c${String(i).padStart(2, '0')}`] = { bindings: [`bench.c${i}`] };
  const topology: Topology = defineTopology({ exchange: `${p}.events`, consumers });
  const conn = await amqp.connect(AMQP_URL, { noDelay: true });
  try {
    await declareTopology(conn, topology);
    const management = warrenMetrics({ topology, connection: async () => conn, broker: { management: { url: MGMT_URL }, cacheMs: 5000 } });
    let t = performance.now();
    const text = await management.registry.metrics();
    const coldMs = performance.now() - t;
    if (!text.includes('warren_broker_up{source="management"} 1')) throw new Error('the management API did not answer');
    const cached: number[] = [];
    for (let i = 0; i < 20; i++) {
      t = performance.now();
      await management.registry.metrics();
      cached.push(performance.now() - t);
    }
    if (management.broker?.reads !== 1) throw new Error('cached scrapes read the broker again');
    await management.close();
    const viaAmqp = warrenMetrics({ topology, connection: async () => conn, broker: { management: false, cacheMs: 5000 } });
    t = performance.now();
    const amqpText = await viaAmqp.registry.metrics();
    const amqpColdMs = performance.now() - t;
    if (!amqpText.includes('warren_broker_up{source="amqp"} 1')) throw new Error('the AMQP reading failed');
    await viaAmqp.close();
    return { coldMs, cachedMs: median(cached), amqpColdMs, queues: topology.consumers.size * 5 };
  } finally {
    await conn.close();
    await deleteTopology(topology);
  }
}

export async function benchMetrics(): Promise<BenchRow[]> {
  const consume: { on: number[]; off: number[] } = { on: [], off: [] };
  const publish: { on: number[]; off: number[] } = { on: [], off: [] };
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which goes first, so neither always meets a warmer broker.
    const order = r % 2 === 0 ? [true, false] : [false, true];
    for (const on of order) (on ? consume.on : consume.off).push(await consumeRound(on));
    for (const on of order) (on ? publish.on : publish.off).push(await publishRound(on));
  }
  const scrape = await scrapeTimes();
  return [
    { group: `consume with metrics (${MESSAGES.toLocaleString('en-US')} backlog, prefetch ${PREFETCH})`, metric: 'msg/s', warren: median(consume.on), baseline: median(consume.off), baselineName: 'metrics off', goal: '≥ 0.95' },
    { group: `confirmed publish with metrics (window ${WINDOW})`, metric: 'msg/s', warren: median(publish.on), baseline: median(publish.off), baselineName: 'metrics off', goal: '≥ 0.95' },
    { group: `scrape, 50 consumers (${scrape.queues} queues), management API, cold`, metric: 'ms', warren: scrape.coldMs },
    { group: 'scrape, 50 consumers, served from the cache', metric: 'ms', warren: scrape.cachedMs },
    { group: 'scrape, 50 consumers, AMQP passive declares, cold', metric: 'ms', warren: scrape.amqpColdMs },
  ];
}
