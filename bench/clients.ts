/**
 * The client comparison: bare amqplib, warren and other RabbitMQ clients for Node doing
 * the same work on the same broker, each in a process of its own running plain
 * JavaScript (warren from its compiled `dist/`), on every broker given.
 *
 * - publish: confirmed, `mandatory`, persistent publishes of a ~100 B JSON body with a
 *   message id, content type and timestamp, through a topic exchange to one queue, in
 *   three caller patterns: `window` (the caller keeps 256 unconfirmed), `burst` (all
 *   started at once, then awaited) and `serial` (each confirmed before the next);
 * - consume: a backlog drained with prefetch 100, one ack per message, the JSON parsed.
 *
 * The baseline is bare amqplib as a performance-minded user writes it
 * (bench/clients/amqplib.mjs: a ConfirmChannel callback per message, `randomUUID()`, no
 * header). Beside it, "amqplib, promise per publish" is bare amqplib in warren's caller
 * pattern (a promise per publish, warren's occurred-at header): what that pattern costs
 * by itself. For each client and pattern: messages/s and the client process's own CPU
 * (user + system) per message, the median of alternating rounds (the clients take turns
 * going first) with every round shown, so a round the broker made slow is seen as such,
 * and the ratio of the medians to bare amqplib's.
 *
 * Run alone with `npx tsx bench/clients.ts`. Brokers: WARREN_BENCH_BROKERS, `name=url`
 * pairs separated by commas (default `3.10=amqp://guest:guest@127.0.0.1:5672,4.0=...:5673,
 * 4.3=...:5674`); a broker that does not answer is skipped, with a line saying so.
 * Clients: WARREN_BENCH_CLIENTS (default all: amqplib, amqplib-promise, warren,
 * rabbitmq-client, cloudamqp, rascal). Patterns: WARREN_BENCH_PATTERNS (default
 * `window,burst,serial,consume`). Sizes: WARREN_BENCH_MESSAGES (50,000),
 * WARREN_BENCH_SERIAL_MESSAGES (3,000), WARREN_BENCH_ROUNDS (3); WARREN_BENCH_SMALL=1
 * makes them small. WARREN_BENCH_CHILD_FLAGS are node flags for every client's process
 * (`--cpu-prof --cpu-prof-dir=DIR` profiles each round).
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { defineTopology, Warren, type Topology } from '../src/index.js';
import { ensureBuilt } from './built.js';
import { brokerVersion, median, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
const MESSAGES = Number(process.env['WARREN_BENCH_MESSAGES'] ?? (SMALL ? 3_000 : 50_000));
const SERIAL = Number(process.env['WARREN_BENCH_SERIAL_MESSAGES'] ?? (SMALL ? 300 : 3_000));
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? 3);
const WARM = SMALL ? 500 : 2_000;
const WINDOW = 256;
const PREFETCH = 100;
export const ROUTING_KEY = 'bench.order';

/** The clients, in the order of the table; the first is the baseline. */
export const CLIENT_NAMES: Record<string, string> = {
  amqplib: 'bare amqplib',
  'amqplib-promise': 'amqplib, promise per publish',
  warren: 'warren',
  'rabbitmq-client': 'rabbitmq-client',
  cloudamqp: '@cloudamqp/amqp-client',
  rascal: 'Rascal',
};
const BASELINE = 'amqplib';
type Pattern = 'window' | 'burst' | 'serial' | 'consume';
const ALL_PATTERNS: readonly Pattern[] = ['window', 'burst', 'serial', 'consume'];

function listFrom<T extends string>(variable: string, all: readonly T[]): T[] {
  const given = process.env[variable];
  if (given === undefined || given.trim() === '') return [...all];
  return given.split(',').map((s) => {
    const item = s.trim() as T;
    if (!all.includes(item)) throw new Error(`${variable}: ${JSON.stringify(s)} is not one of ${all.join(', ')}`);
    return item;
  });
}

/** The brokers to compare on: `name=url` pairs. */
export function benchBrokers(): { name: string; url: string }[] {
  const given = process.env['WARREN_BENCH_BROKERS'] ?? '3.10=amqp://guest:guest@127.0.0.1:5672,4.0=amqp://guest:guest@127.0.0.1:5673,4.3=amqp://guest:guest@127.0.0.1:5674';
  return given.split(',').map((pair) => pair.trim()).filter(Boolean).map((pair) => {
    const at = pair.indexOf('=');
    if (at <= 0) throw new Error(`WARREN_BENCH_BROKERS: ${JSON.stringify(pair)} is not name=url (e.g. 3.10=amqp://guest:guest@127.0.0.1:5672)`);
    return { name: pair.slice(0, at), url: pair.slice(at + 1) };
  });
}

/** One round of one client: what its process printed. */
export interface Figures {
  readonly rate: number;
  readonly cpuUs: number;
  readonly n: number;
}

const CLIENTS_DIR = fileURLToPath(new URL('./clients/', import.meta.url));
/** Flags for every client's node, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile them. */
const CHILD_FLAGS = (process.env['WARREN_BENCH_CHILD_FLAGS'] ?? '').split(' ').filter(Boolean);

/**
 * Runs one client's round in a process of its own (plain node: no loader flags or
 * NODE_OPTIONS passed on), under `wrap` when given (e.g. valgrind and its flags).
 */
export function runChild(client: string, config: Record<string, unknown>, wrap: readonly string[] = []): Promise<Figures> {
  const env = { ...process.env };
  delete env['NODE_OPTIONS'];
  const args = [...CHILD_FLAGS, `${CLIENTS_DIR}${client}.mjs`, JSON.stringify({ client, ...config })];
  return new Promise((resolve, reject) => {
    const child = wrap.length > 0 ? spawn(wrap[0] as string, [...wrap.slice(1), process.execPath, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] }) : spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const line = out.trim().split('\n').at(-1);
      if (code !== 0 || line === undefined || line === '') return reject(new Error(`${client} ${String(config['mode'])} exited ${code}: ${err.trim() || out.trim()}`));
      resolve(JSON.parse(line) as Figures);
    });
  });
}

/** Puts `n` messages shaped like the lean baseline's in `queue`, through the exchange, with confirms. */
export async function fill(ch: amqp.ConfirmChannel, exchange: string, n: number): Promise<void> {
  const batch = 5_000;
  for (let i = 0; i < n; i += batch) {
    for (let j = i; j < Math.min(n, i + batch); j++) {
      ch.publish(exchange, ROUTING_KEY, Buffer.from(JSON.stringify({ orderId: j, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(24) })), {
        persistent: true,
        mandatory: true,
        contentType: 'application/json',
        timestamp: Math.floor(Date.now() / 1000),
        messageId: randomUUID(),
      });
    }
    await ch.waitForConfirms();
  }
}

/** Connects, or says why not within 3 s. */
async function probe(url: string): Promise<amqp.ChannelModel | string> {
  try {
    return await amqp.connect(url, { timeout: 3000 });
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const us = (n: number): string => n.toFixed(1);

/** The comparison on one broker: a table, and warren's rows against the goals. */
async function onBroker(broker: { name: string; url: string }, clients: readonly string[], patterns: readonly Pattern[], log: (line: string) => void, out: string[]): Promise<BenchRow[]> {
  const model = await probe(broker.url);
  if (typeof model === 'string') {
    const line = `RabbitMQ ${broker.name} (${broker.url.replace(/\/\/[^@]*@/, '//')}): not running (${model}); skipped`;
    log(line);
    out.push(line, '');
    return [];
  }
  const version = brokerVersion(model);
  const port = new URL(broker.url).port || '5672';
  const prefix = `bench.clients.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const options = { exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } };
  const topology: Topology = defineTopology(options);
  const c = [...topology.consumers.values()][0];
  if (c === undefined) throw new Error('bench topology has no consumer');
  const setup = await Warren.connect({ url: broker.url, topology });
  await setup.close();
  const rows: BenchRow[] = [];
  try {
    const admin = await model.createChannel();
    const filler = await model.createConfirmChannel();
    const depth = async (): Promise<number> => (await admin.checkQueue(c.queue)).messageCount;
    const base = { url: broker.url, exchange: topology.exchange, routingKey: ROUTING_KEY, queue: c.queue, consumer: c.name, topology: options, window: WINDOW, prefetch: PREFETCH };
    /** got[pattern][client] = the rounds' figures. */
    const got = new Map<Pattern, Map<string, Figures[]>>();
    for (const pattern of patterns) {
      const perClient = new Map<string, Figures[]>(clients.map((k) => [k, []]));
      got.set(pattern, perClient);
      const n = pattern === 'serial' ? SERIAL : MESSAGES;
      const warm = Math.min(WARM, n);
      for (let round = 0; round < ROUNDS; round++) {
        // Each client goes first in turn: drift on a busy machine favours none.
        const turn = clients.map((_, i) => clients[(i + round) % clients.length] as string);
        const parts: string[] = [];
        for (const client of turn) {
          await admin.purgeQueue(c.queue);
          if (pattern === 'consume') await fill(filler, topology.exchange, warm + n);
          const figures = await runChild(client, { ...base, mode: pattern, n, warm });
          const left = await depth();
          const expected = pattern === 'consume' ? 0 : warm + n;
          // A consumer's last acks may still be on their way when its process has exited.
          if (left !== expected && !(pattern === 'consume' && left <= PREFETCH)) throw new Error(`${client} ${pattern}: the queue holds ${left} messages, expected ${expected}`);
          (perClient.get(client) as Figures[]).push(figures);
          parts.push(`${client} ${int(figures.rate)}/s ${us(figures.cpuUs)} µs`);
        }
        log(`${broker.name} ${pattern} round ${round + 1}: ${parts.join(', ')}`);
      }
    }
    await admin.purgeQueue(c.queue);
    await filler.close();
    await admin.close();

    // The table: per pattern and client, medians with every round, and ratios to the baseline.
    out.push(`RabbitMQ ${version} (:${port}), ${int(MESSAGES)} messages (serial ${int(SERIAL)}), window ${WINDOW}, prefetch ${PREFETCH}, ${ROUNDS} rounds: median (each round), ratio to ${CLIENT_NAMES[BASELINE]}`);
    const head = ['pattern', 'client', 'msg/s', 'ratio', 'rounds, msg/s', 'CPU µs/msg', 'ratio', 'rounds, µs'];
    const lines: string[][] = [];
    for (const pattern of patterns) {
      const perClient = got.get(pattern) as Map<string, Figures[]>;
      const baseRounds = perClient.get(BASELINE);
      const baseRate = baseRounds ? median(baseRounds.map((f) => f.rate)) : Number.NaN;
      const baseCpu = baseRounds ? median(baseRounds.map((f) => f.cpuUs)) : Number.NaN;
      for (const client of clients) {
        const rounds = perClient.get(client) as Figures[];
        const rate = median(rounds.map((f) => f.rate));
        const cpu = median(rounds.map((f) => f.cpuUs));
        lines.push([
          client === clients[0] ? pattern : '',
          CLIENT_NAMES[client] ?? client,
          int(rate),
          (rate / baseRate).toFixed(2),
          rounds.map((f) => int(f.rate)).join(' '),
          us(cpu),
          (cpu / baseCpu).toFixed(2),
          rounds.map((f) => us(f.cpuUs)).join(' '),
        ]);
        if (client === 'warren' && baseRounds) {
          const what = pattern === 'consume' ? `consume, prefetch ${PREFETCH}, default consumer` : `confirmed publish, ${pattern}`;
          rows.push({ group: `${what}, RabbitMQ ${version} (:${port})`, metric: `client CPU µs/message, median of ${ROUNDS}`, warren: cpu, baseline: baseCpu, baselineName: CLIENT_NAMES[BASELINE] as string, goal: pattern === 'serial' ? '' : '<= 1.10' });
          rows.push({ group: '  same', metric: `messages/s, median of ${ROUNDS}`, warren: rate, baseline: baseRate, baselineName: CLIENT_NAMES[BASELINE] as string, goal: pattern === 'consume' ? '>= 0.95' : '' });
        }
      }
    }
    const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
    const fmt = (cells: string[]): string => cells.map((cell, i) => (i >= 2 && i !== 4 && i !== 7 ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0))).join('  ').trimEnd();
    out.push(fmt(head), widths.map((w) => '-'.repeat(w)).join('  '), ...lines.map(fmt), '');
  } finally {
    const ch = await model.createChannel();
    for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q);
    await ch.deleteExchange(topology.exchange);
    await model.close();
  }
  return rows;
}

/** The comparison on every broker: prints its tables, returns warren's rows against the goals. */
export async function benchClients(): Promise<BenchRow[]> {
  ensureBuilt();
  const clients = listFrom('WARREN_BENCH_CLIENTS', Object.keys(CLIENT_NAMES));
  if (clients[0] !== BASELINE) clients.unshift(BASELINE);
  const patterns = listFrom('WARREN_BENCH_PATTERNS', ALL_PATTERNS);
  const log = (line: string): void => void process.stderr.write(`bench/clients: ${line}\n`);
  const out: string[] = [];
  const rows: BenchRow[] = [];
  for (const broker of benchBrokers()) rows.push(...(await onBroker(broker, clients, patterns, log, out)));
  console.log();
  for (const line of out) console.log(line);
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { printRows } = await import('./report.js');
  printRows(await benchClients());
}
