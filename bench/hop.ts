/**
 * Retry hop benchmark: what one hop through the delay ladder costs. A warren consumer
 * whose handler throws a transient error moves each message to its first retry queue
 * (one confirmed publish of a copy with the failure headers, then the ack of the
 * original); the baseline does the same by hand with bare amqplib: consume with the
 * same prefetch, build the copy's headers (the delivery's own, the origin, the error's
 * class, message and first stack lines, the times, the attempt count, the consumer),
 * publish it to the retry queue on a confirm channel, ack the original on its confirm.
 *
 * Only the hop leg is timed: messages moved per second from the work queue into the
 * retry queue, first delivery to last ack, over the same backlog. The retry tier is 10
 * minutes, so no copy comes back while a round runs; each round's copies are counted in
 * the retry queue (every message moved once, none lost or doubled), then purged. Rounds
 * alternate warren and bare (which goes first alternates too); the medians, the median
 * round ratio and the client CPU per message are reported. warren is loaded from the
 * compiled `dist/`, as an application loads it (see bench/built.ts), with its silent
 * logger (a retry is logged at info level; printing 10,000 lines measures the terminal).
 *
 * Run alone with `npx tsx bench/hop.ts`. Brokers: WARREN_BENCH_HOP_URLS (comma separated,
 * default the 3.10 and 4.0 brokers of the development machine, :5672 and :5673). Sizes:
 * WARREN_BENCH_HOP_MESSAGES (default 8,000), WARREN_BENCH_ROUNDS (default 5);
 * WARREN_BENCH_SMALL=1 for a quick check (1,000 messages, 3 rounds).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { HEADER } from '../src/headers.js';
import type { Topology } from '../src/index.js';
import { loadBuilt } from './built.js';
import { brokerLabel, brokerUrls, brokerVersion, median, printRows, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
const MESSAGES = Number(process.env['WARREN_BENCH_HOP_MESSAGES'] ?? (SMALL ? 1_000 : 8_000));
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? (SMALL ? 3 : 5));
const URLS = brokerUrls('WARREN_BENCH_HOP_URLS');
const PREFETCH = 50;
/** The body every message carries: about 200 bytes of JSON. */
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

type Lib = Awaited<ReturnType<typeof loadBuilt>>;

interface Hopped {
  /** Messages moved to the retry queue per second, first delivery to last ack. */
  readonly rate: number;
  /** Client CPU per message, microseconds. */
  readonly cpuUs: number;
}

/** The transient error both handlers throw. */
class CarrierError extends Error {
  override readonly name = 'CarrierError';
}

/** Puts `n` messages in `queue`, shaped as warren's publisher shapes them, with confirms. */
async function fill(model: amqp.ChannelModel, exchange: string, n: number): Promise<void> {
  const ch = await model.createConfirmChannel();
  try {
    for (let i = 0; i < n; i++) {
      const now = new Date();
      // Through the exchange, so the deliveries carry an exchange and routing key as in production.
      const ok = ch.publish(exchange, 'bench.order', Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: i })), {
        messageId: randomUUID(),
        contentType: 'application/json',
        persistent: true,
        timestamp: Math.floor(now.getTime() / 1000),
        headers: { [HEADER.occurredAt]: now.toISOString() },
      });
      if (!ok) await new Promise((r) => ch.once('drain', r));
      if (i % 2000 === 1999) await ch.waitForConfirms();
    }
    await ch.waitForConfirms();
  } finally {
    await ch.close();
  }
}

/** A warren consumer whose handler fails once per message: every message hops to the first retry queue. */
async function warrenHop(lib: Lib, url: string, topology: Topology, name: string, n: number): Promise<Hopped> {
  const warren = await lib.Warren.connect({ url, topology, declare: false, connectionName: 'warren-bench-hop', logger: lib.silentLogger });
  try {
    let first = 0;
    let cpu = process.cpuUsage();
    let finish!: (ms: number) => void;
    let fail!: (error: unknown) => void;
    const finished = new Promise<number>((resolve, reject) => {
      finish = resolve;
      fail = reject;
    });
    const consumer = await warren.consume<{ orderId: number }>(
      name,
      async (order) => {
        if (first === 0) {
          first = performance.now();
          cpu = process.cpuUsage();
        }
        throw new CarrierError(`carrier 503 for order ${order.orderId}`);
      },
      { prefetch: PREFETCH, concurrency: PREFETCH },
    );
    const check = (): void => {
      const s = consumer.stats;
      if (s.acked + s.parked + s.requeued + s.redeliveryMoved + s.duplicate > 0) fail(new Error(`a bench message did not take one retry hop: ${JSON.stringify(s)}`));
      else if (s.retried === n) finish(performance.now());
    };
    consumer.on('outcome', check);
    check();
    const last = await finished;
    const used = process.cpuUsage(cpu);
    return { rate: n / ((last - first) / 1000), cpuUs: (used.user + used.system) / n };
  } finally {
    await warren.close();
  }
}

/** The first lines of a stack below its message line, as the failure headers carry them. */
function stackLines(stack: string | undefined): string {
  if (stack === undefined) return '';
  return stack.split('\n', 11).slice(1).map((l) => l.trim().slice(0, 300)).join('\n');
}

/**
 * The hop by hand: consume (same prefetch), the copy with the delivery's headers plus the
 * failure's, a publish to the retry queue on a confirm channel, the ack on the confirm.
 */
async function bareHop(url: string, consumerName: string, queue: string, retryQueue: string, n: number): Promise<Hopped> {
  const conn = await amqp.connect(url, { noDelay: true });
  try {
    const ch = await conn.createChannel();
    await ch.prefetch(PREFETCH);
    const pub = await conn.createConfirmChannel();
    let first = 0;
    let cpu = process.cpuUsage();
    let done = 0;
    const last = await new Promise<number>((resolve, reject) => {
      ch.consume(queue, (msg) => {
        if (msg === null) return reject(new Error('bare consumer cancelled'));
        if (first === 0) {
          first = performance.now();
          cpu = process.cpuUsage();
        }
        const order = JSON.parse(msg.content.toString('utf8')) as { orderId: number };
        const error = new CarrierError(`carrier 503 for order ${order.orderId}`);
        const now = new Date().toISOString();
        const headers: Record<string, unknown> = {
          ...(msg.properties.headers ?? {}),
          [HEADER.exchange]: msg.fields.exchange,
          [HEADER.routingKey]: msg.fields.routingKey,
          [HEADER.errorClass]: error.name,
          [HEADER.errorMessage]: error.message,
          [HEADER.errorStack]: stackLines(error.stack),
          [HEADER.firstFailedAt]: now,
          [HEADER.lastFailedAt]: now,
          [HEADER.attempts]: 1,
          [HEADER.consumer]: consumerName,
        };
        pub.publish('', retryQueue, msg.content, { ...msg.properties, headers, mandatory: true }, (err: unknown) => {
          if (err) return reject(err instanceof Error ? err : new Error(String(err)));
          ch.ack(msg);
          if (++done === n) resolve(performance.now());
        });
      }).catch(reject);
    });
    const used = process.cpuUsage(cpu);
    await ch.close();
    await pub.close();
    return { rate: n / ((last - first) / 1000), cpuUs: (used.user + used.system) / n };
  } finally {
    await conn.close();
  }
}

/** The hop figures on one broker. */
async function hopOn(lib: Lib, url: string, log: (line: string) => void): Promise<BenchRow[]> {
  const prefix = `bench.hop.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const topology = lib.defineTopology({ exchange: `${prefix}.events`, retry: { delays: ['10m'], maxAttempts: 3 }, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
  const c = [...topology.consumers.values()][0];
  const retryQueue = c?.retryQueues[0];
  if (c === undefined || retryQueue === undefined) throw new Error('bench topology has no consumer with a retry queue');
  const model = await amqp.connect(url, { noDelay: true });
  const version = brokerVersion(model);
  try {
    await lib.declareTopology(model, topology);
    const admin = await model.createChannel();
    const run = async (who: 'warren' | 'bare', n: number): Promise<Hopped> => {
      await fill(model, topology.exchange, n);
      const got = who === 'warren' ? await warrenHop(lib, url, topology, c.name, n) : await bareHop(url, c.name, c.queue, retryQueue, n);
      const moved = (await admin.checkQueue(retryQueue)).messageCount;
      const left = (await admin.checkQueue(c.queue)).messageCount;
      if (moved !== n || left !== 0) throw new Error(`${who}: ${moved} of ${n} copies in the retry queue, ${left} left in the work queue`);
      await admin.purgeQueue(retryQueue);
      return got;
    };
    // Warm both sides (JIT, the broker's queue processes).
    const warm = Math.min(2000, MESSAGES);
    await run('warren', warm);
    await run('bare', warm);
    const got = { warren: [] as Hopped[], bare: [] as Hopped[] };
    const ratios: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? (['bare', 'warren'] as const) : (['warren', 'bare'] as const);
      for (const who of order) got[who].push(await run(who, MESSAGES));
      const w = got.warren.at(-1) as Hopped;
      const b = got.bare.at(-1) as Hopped;
      ratios.push(w.rate / b.rate);
      log(`${brokerLabel(url)} hop round ${round + 1}: warren ${Math.round(w.rate)}/s (${w.cpuUs.toFixed(1)} µs CPU), bare ${Math.round(b.rate)}/s (${b.cpuUs.toFixed(1)} µs CPU), ratio ${(ratios.at(-1) as number).toFixed(3)}`);
    }
    await admin.close();
    return [
      {
        group: `retry hop, work queue to retry queue (${MESSAGES.toLocaleString('en-US')} backlog, prefetch ${PREFETCH}), RabbitMQ ${version} (${brokerLabel(url)})`,
        metric: `messages moved/s, median of ${ROUNDS} (median round ratio ${median(ratios).toFixed(2)})`,
        warren: median(got.warren.map((h) => h.rate)),
        baseline: median(got.bare.map((h) => h.rate)),
        baselineName: 'bare consume-publish-confirm-ack',
        goal: '>= 0.9',
      },
      { group: '  same, client CPU', metric: 'microseconds per message, median', warren: median(got.warren.map((h) => h.cpuUs)), baseline: median(got.bare.map((h) => h.cpuUs)), baselineName: 'bare consume-publish-confirm-ack' },
    ];
  } finally {
    const ch = await model.createChannel();
    for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q).catch(() => undefined);
    await ch.deleteExchange(topology.exchange).catch(() => undefined);
    await ch.close().catch(() => undefined);
    await model.close();
  }
}

/** The retry hop figures on every broker in WARREN_BENCH_HOP_URLS. */
export async function benchHop(): Promise<BenchRow[]> {
  const lib = await loadBuilt();
  const log = (line: string): void => void process.stderr.write(`bench/hop: ${line}\n`);
  const rows: BenchRow[] = [];
  for (const url of URLS) rows.push(...(await hopOn(lib, url, log)));
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchHop());
}
