/**
 * Publish benchmark: warren's Publisher against a bare amqplib ConfirmChannel doing the
 * same work per message (a JSON body serialized per message, a message id, the
 * occurred-at header, `mandatory`, persistent, through the topic exchange), in the three
 * ways applications call a publisher, on every broker given:
 *
 * - window: the caller keeps up to 256 publishes outstanding itself: 256 loops, each
 *   awaiting its publish before the next (bare: the same loops around a promise of the
 *   ConfirmChannel's callback);
 * - serial: each publish awaited before the next (bare: one publish, await its confirm);
 * - burst: the caller starts every publish at once (20,000 by default), then awaits them
 *   all; warren's `maxInFlight` 256 holds those past the window in line. Two bare
 *   baselines, each printed with its ratio:
 *   - "all at once", the same caller pattern: every ConfirmChannel publish started at
 *     once, each a promise of its callback, all awaited together (amqplib buffers what
 *     the socket does not take). The goal is judged against this one.
 *   - "256-pump": a hand-written callback pump that never holds more than 256
 *     unconfirmed, the one the burst pattern was first measured against. It is not the
 *     same caller pattern (its caller never holds 20,000 promises, nor 20,000 bodies
 *     stamped at the call), so its ratio is printed for reference, without a goal.
 *   A fourth side is warren as an application gets it, with no publisher option
 *   (`maxInFlight` 1,000), against the same caller pattern.
 *
 * Rounds alternate bare and warren (in burst, the two bare baselines and warren take
 * turns going first), and the median of each side is reported with the ratio, so drift
 * in a loaded machine favours neither. Beside each rate, the client CPU per message:
 * on a loaded machine the rate follows the broker's share of the cores, the CPU this
 * process spends per message much less so.
 *
 * warren is loaded from the compiled `dist/` (built first when older than `src/`), as an
 * application loads the package: under the TypeScript loader every closure would also
 * pay its function-naming helper, which the bare side here pays far less of.
 *
 * Run alone with `npx tsx bench/publish.ts`. Brokers: WARREN_BENCH_PUBLISH_URLS (comma
 * separated, default the 3.10 and 4.0 brokers of the development machine,
 * amqp://guest:guest@127.0.0.1:5672 and :5673). Sizes: WARREN_BENCH_PUBLISH_MESSAGES
 * (window and burst, default 20,000), WARREN_BENCH_SERIAL_MESSAGES (default 3,000),
 * WARREN_BENCH_ROUNDS (default 5); WARREN_BENCH_PUBLISH_PATTERNS picks patterns (default
 * `window,serial,burst`).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { HEADER } from '../src/headers.js';
import type { Topology, Warren } from '../src/index.js';
import { loadBuilt } from './built.js';
import { printRows, type BenchRow } from './report.js';

const URLS = (process.env['WARREN_BENCH_PUBLISH_URLS'] ?? 'amqp://guest:guest@127.0.0.1:5672,amqp://guest:guest@127.0.0.1:5673').split(',').map((s) => s.trim()).filter(Boolean);
const MESSAGES = Number(process.env['WARREN_BENCH_PUBLISH_MESSAGES'] ?? 20_000);
const SERIAL = Number(process.env['WARREN_BENCH_SERIAL_MESSAGES'] ?? 3_000);
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? 5);
const WINDOW = 256;
const ROUTING_KEY = 'bench.order';
/** The body every message carries: about 200 bytes of JSON. */
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

type Pattern = 'window' | 'serial' | 'burst';
/**
 * warren, the bare baseline of the same caller pattern, and (burst only) the bare
 * 256-pump and warren with its default `maxInFlight` (1,000).
 */
type Side = 'warren' | 'warren-default' | 'bare' | 'bare-pump';
const SIDES: readonly Side[] = ['warren', 'warren-default', 'bare', 'bare-pump'];
/** How a baseline is named in the rows. */
const BASELINE: Record<Side, string> = {
  warren: 'warren',
  'warren-default': 'warren, default maxInFlight 1,000',
  bare: 'bare ConfirmChannel, same caller pattern',
  'bare-pump': `bare ConfirmChannel, ${WINDOW}-pump`,
};
const PATTERNS: readonly Pattern[] = (process.env['WARREN_BENCH_PUBLISH_PATTERNS'] ?? 'window,serial,burst').split(',').map((p) => {
  const pattern = p.trim() as Pattern;
  if (!['window', 'serial', 'burst'].includes(pattern)) throw new Error(`WARREN_BENCH_PUBLISH_PATTERNS: ${JSON.stringify(p)} is not window, serial or burst`);
  return pattern;
});

/** The properties the bare side stamps: what warren's publisher stamps. */
function bareProperties(): amqp.Options.Publish {
  const now = new Date();
  return {
    mandatory: true,
    persistent: true,
    messageId: randomUUID(),
    contentType: 'application/json',
    timestamp: Math.floor(now.getTime() / 1000),
    headers: { [HEADER.occurredAt]: now.toISOString() },
  };
}

/** Bare: a callback pump holding at most `WINDOW` unconfirmed (the burst pattern's "256-pump" baseline). */
function barePump(ch: amqp.ConfirmChannel, exchange: string, n: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let sent = 0;
    let confirmed = 0;
    let inFlight = 0;
    let waitingDrain = false;
    const onConfirm = (err: unknown): void => {
      if (err) return reject(err instanceof Error ? err : new Error(String(err)));
      inFlight--;
      if (++confirmed === n) resolve();
      else pump();
    };
    const pump = (): void => {
      while (sent < n && inFlight < WINDOW && !waitingDrain) {
        inFlight++;
        const ok = ch.publish(exchange, ROUTING_KEY, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: sent++ })), bareProperties(), onConfirm);
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
}

/** Bare: one publish, its confirm as a promise. */
function barePublishOne(ch: amqp.ConfirmChannel, exchange: string, i: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    ch.publish(exchange, ROUTING_KEY, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: i })), bareProperties(), (err: unknown) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve()));
  });
}

/** Bare: `WINDOW` loops, each awaiting its publish before the next (the caller keeps the window). */
async function bareWindow(ch: amqp.ConfirmChannel, exchange: string, n: number): Promise<void> {
  let next = 0;
  const caller = async (): Promise<void> => {
    while (next < n) await barePublishOne(ch, exchange, next++);
  };
  await Promise.all(Array.from({ length: WINDOW }, caller));
}

/** Bare: every publish started at once, each a promise of its callback, all awaited together (the burst pattern's "all at once" baseline). */
async function bareBurst(ch: amqp.ConfirmChannel, exchange: string, n: number): Promise<void> {
  const all: Promise<void>[] = new Array(n);
  for (let i = 0; i < n; i++) all[i] = barePublishOne(ch, exchange, i);
  await Promise.all(all);
}

/** Bare: one publish, then its confirm, then the next. */
async function bareSerial(ch: amqp.ConfirmChannel, exchange: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    await new Promise<void>((resolve, reject) => {
      ch.publish(exchange, ROUTING_KEY, Buffer.from(JSON.stringify({ ...PAYLOAD, orderId: i })), bareProperties(), (err: unknown) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve()));
    });
  }
}

async function warrenRun(warren: Warren, pattern: Pattern, n: number): Promise<void> {
  if (pattern === 'serial') {
    for (let i = 0; i < n; i++) await warren.publish(ROUTING_KEY, { ...PAYLOAD, orderId: i });
  } else if (pattern === 'window') {
    let next = 0;
    const caller = async (): Promise<void> => {
      while (next < n) await warren.publish(ROUTING_KEY, { ...PAYLOAD, orderId: next++ });
    };
    await Promise.all(Array.from({ length: WINDOW }, caller));
  } else {
    const all: Promise<unknown>[] = new Array(n);
    for (let i = 0; i < n; i++) all[i] = warren.publish(ROUTING_KEY, { ...PAYLOAD, orderId: i });
    await Promise.all(all);
  }
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

function brokerLabel(url: string): string {
  const port = new URL(url).port || '5672';
  return `:${port}`;
}

/** The three patterns on one broker, bare and warren alternating. */
async function benchBroker(url: string, log: (line: string) => void): Promise<BenchRow[]> {
  const { defineTopology, Warren } = await loadBuilt();
  const prefix = `bench.publish.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const topology: Topology = defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
  const queue = [...topology.consumers.values()][0]?.queue as string;
  const warren = await Warren.connect({ url, topology, publisher: { maxInFlight: WINDOW } });
  // The same publisher as an application gets it: no publisher options at all.
  const warrenDefault = await Warren.connect({ url, topology });
  const conn = await amqp.connect(url, { noDelay: true });
  const rows: BenchRow[] = [];
  try {
    const ch = await conn.createConfirmChannel();
    let returned = 0;
    ch.on('return', () => returned++);
    const admin = await conn.createChannel();
    const version = String((conn.connection as unknown as { serverProperties?: { version?: string } }).serverProperties?.version ?? '?');
    const sizes: Record<Pattern, number> = { window: MESSAGES, serial: SERIAL, burst: MESSAGES };
    /** Who runs a pattern: warren, and the bare baselines of that caller pattern (burst has two). */
    const sides: Record<Pattern, readonly Side[]> = { window: ['warren', 'bare'], serial: ['warren', 'bare'], burst: ['warren', 'bare', 'bare-pump', 'warren-default'] };
    // Client CPU per message beside the rate: on a loaded machine the rate follows the
    // broker's share of the cores, the CPU this process spends per message does not.
    const cpu: Record<Side, Record<Pattern, number[]>> = { warren: { window: [], serial: [], burst: [] }, 'warren-default': { window: [], serial: [], burst: [] }, bare: { window: [], serial: [], burst: [] }, 'bare-pump': { window: [], serial: [], burst: [] } };
    const run = async (who: Side, pattern: Pattern, n: number): Promise<number> => {
      const cpuStart = process.cpuUsage();
      const started = performance.now();
      if (who === 'warren') await warrenRun(warren, pattern, n);
      else if (who === 'warren-default') await warrenRun(warrenDefault, pattern, n);
      else if (who === 'bare-pump') await barePump(ch, topology.exchange, n);
      else if (pattern === 'serial') await bareSerial(ch, topology.exchange, n);
      else if (pattern === 'window') await bareWindow(ch, topology.exchange, n);
      else await bareBurst(ch, topology.exchange, n);
      const rate = n / ((performance.now() - started) / 1000);
      const used = process.cpuUsage(cpuStart);
      cpu[who][pattern].push((used.user + used.system) / n);
      await admin.purgeQueue(queue);
      return rate;
    };
    // Warm every side (JIT, the broker's queue process).
    for (const pattern of PATTERNS) for (const who of sides[pattern]) await run(who, pattern, Math.min(2000, sizes[pattern]));
    for (const p of PATTERNS) for (const who of SIDES) cpu[who][p].length = 0;
    for (const pattern of PATTERNS) {
      const order = sides[pattern];
      const rates = new Map<Side, number[]>(order.map((who) => [who, []]));
      /** Per baseline, warren's rate over the baseline's in each round. */
      const ratios = new Map<Side, number[]>(order.map((who) => [who, []]));
      for (let round = 0; round < ROUNDS; round++) {
        // Each side goes first in turn: drift in a loaded machine favours none.
        const turn = order.map((_, i) => order[(i + round) % order.length] as Side);
        const got = new Map<Side, number>();
        for (const who of turn) got.set(who, await run(who, pattern, sizes[pattern]));
        const w = got.get('warren') as number;
        for (const who of order) (rates.get(who) as number[]).push(got.get(who) as number);
        const parts = [`warren ${Math.round(w)}/s`];
        for (const who of order.slice(1)) {
          if (who === 'warren-default') continue;
          const b = got.get(who) as number;
          (ratios.get(who) as number[]).push(w / b);
          parts.push(`${BASELINE[who]} ${Math.round(b)}/s (ratio ${(w / b).toFixed(3)})`);
        }
        if (got.has('warren-default')) {
          const d = got.get('warren-default') as number;
          const b = got.get('bare') as number;
          (ratios.get('warren-default') as number[]).push(d / b);
          parts.push(`${BASELINE['warren-default']} ${Math.round(d)}/s (ratio to the same caller pattern ${(d / b).toFixed(3)})`);
        }
        log(`${brokerLabel(url)} ${pattern} round ${round + 1}: ${parts.join(', ')}`);
      }
      const what = { window: `caller keeps ${WINDOW} outstanding`, serial: 'each awaited in turn', burst: `${sizes.burst.toLocaleString('en-US')} at once, maxInFlight ${WINDOW}` }[pattern];
      for (const who of order.slice(1)) {
        if (who === 'warren-default') continue;
        // The goal is judged against the same caller pattern; another baseline is for reference.
        const same = who === 'bare';
        const versus = order.length > 2 ? `, vs ${BASELINE[who]}` : '';
        rows.push({
          group: `publish, ${what}, RabbitMQ ${version} (${brokerLabel(url)})${versus}`,
          metric: `publishes/s, median of ${ROUNDS} (median round ratio ${median(ratios.get(who) as number[]).toFixed(2)})`,
          warren: median(rates.get('warren') as number[]),
          baseline: median(rates.get(who) as number[]),
          baselineName: BASELINE[who],
          ...(same ? { goal: '>= 0.95' } : { goal: '(reference)' }),
        });
        rows.push({ group: `  same, client CPU`, metric: 'microseconds per message, median', warren: median(cpu.warren[pattern]), baseline: median(cpu[who][pattern]), baselineName: BASELINE[who] });
      }
      if (order.includes('warren-default')) {
        // What an application that sets no publisher option gets in the same caller pattern.
        rows.push({
          group: `publish, ${sizes.burst.toLocaleString('en-US')} at once, default maxInFlight (1,000), RabbitMQ ${version} (${brokerLabel(url)}), vs ${BASELINE.bare}`,
          metric: `publishes/s, median of ${ROUNDS} (median round ratio ${median(ratios.get('warren-default') as number[]).toFixed(2)})`,
          warren: median(rates.get('warren-default') as number[]),
          baseline: median(rates.get('bare') as number[]),
          baselineName: BASELINE.bare,
          goal: '>= 0.95',
        });
        rows.push({ group: `  same, client CPU`, metric: 'microseconds per message, median', warren: median(cpu['warren-default'][pattern]), baseline: median(cpu.bare[pattern]), baselineName: BASELINE.bare });
      }
    }
    if (returned > 0) throw new Error(`${returned} bare publishes were returned unroutable`);
    await ch.close();
    await admin.deleteQueue(queue);
    for (const c of topology.consumers.values()) for (const q of [...c.retryQueues, c.parkedQueue]) await admin.deleteQueue(q);
    await admin.deleteExchange(topology.exchange);
    await admin.close();
  } finally {
    await warren.close();
    await warrenDefault.close();
    await conn.close();
  }
  return rows;
}

/** The publish figures on every broker in WARREN_BENCH_PUBLISH_URLS. */
export async function benchPublish(): Promise<BenchRow[]> {
  const log = (line: string): void => void process.stderr.write(`bench/publish: ${line}\n`);
  const rows: BenchRow[] = [];
  for (const url of URLS) rows.push(...(await benchBroker(url, log)));
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchPublish());
}
