/**
 * Replay benchmark:
 *
 * - replay of 5,000 parked messages to their consumer's queue, each copy confirmed
 *   before its original is acknowledged: messages/s from start to the last confirm,
 *   on a classic queue (the default) and a quorum queue, on every broker given, beside
 *   a bare amqplib loop doing the same move by hand: consume the parked queue with a
 *   prefetch of 500 (warren's `maxInFlight`, the changes a walk commits in one
 *   transaction; warren's walk reads ahead twice that, its default `readAhead`, and a
 *   bare prefetch of 1,000 measured the same as 500 within the noise), publish each copy
 *   (the replay headers warren writes) to the work queue on a confirm channel, ack the
 *   original on its confirm. Both run on the same open
 *   connection and are timed from the call to the last settlement: warren's last
 *   commit-ok, the bare side's last ack sent (which favours the bare side a little).
 *   A third side does the move by hand as warren does, in transactions: publish each
 *   copy and ack its original on one transactional channel, one commit per 500. It is
 *   the ceiling of any walk that commits on one channel, and its ratio (printed for
 *   reference) separates what warren's walk costs from what transactions cost. A fourth
 *   does the same on two transactional channels committing in turn (250 each), to show
 *   what overlapping commits would give. Each round runs the four in turn, in a
 *   rotating order; medians, the median round ratio
 *   and the client CPU per message are reported. warren is loaded from the compiled
 *   `dist/` (bench/built.ts);
 * - the same through the built `warren parked replay` executable, process start included
 *   (when dist/ is built);
 * - `--rate 100`: the measured rate, which should be within 10% of 100.
 *
 * Run alone with `npx tsx bench/replay.ts`. The replay rows run on every broker of
 * WARREN_BENCH_REPLAY_URLS (comma separated, default the 3.10 and 4.0 brokers of the
 * development machine, :5672 and :5673); the CLI and paced rows on WARREN_BENCH_AMQP_URL,
 * else WARREN_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672). It works in queues
 * of its own and removes them afterwards. Sizes: WARREN_BENCH_REPLAY_MESSAGES (default
 * 5,000), WARREN_BENCH_REPLAY_ROUNDS (default 3); WARREN_BENCH_SMALL=1 for a quick
 * check (1,000 messages, 3 rounds).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { declareTopology, defineTopology, HEADER, replayParked, topologySpec, type ConsumerTopology, type Topology, type TopologyOptions } from '../src/index.js';
import { loadBuilt } from './built.js';
import { AMQP_URL, brokerLabel, brokerUrls, brokerVersion, median, printRows, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
/** Parked messages per replay run. */
const MESSAGES = Number(process.env['WARREN_BENCH_REPLAY_MESSAGES'] ?? (SMALL ? 1_000 : 5_000));
const ROUNDS = Number(process.env['WARREN_BENCH_REPLAY_ROUNDS'] ?? 3);
const URLS = brokerUrls('WARREN_BENCH_REPLAY_URLS');
/** warren's default `maxInFlight`: the bare loop's prefetch. */
const WINDOW = 500;
/** Messages for the paced run: 5 s at 100/s. */
const PACED = Number(process.env['WARREN_BENCH_REPLAY_PACED'] ?? 500);
const MAIN = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));

function options(queueType: 'classic' | 'quorum'): TopologyOptions {
  const prefix = `wb.replay.${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
  return { exchange: `${prefix}.events`, queueType, retry: { delays: ['5s'], maxAttempts: 3 }, consumers: { billing: { queue: `${prefix}.billing`, bindings: ['order.created'] } } };
}

/** Parks `n` messages as warren's consumer would (headers, JSON body), with confirms. */
async function park(model: amqp.ChannelModel, topology: Topology, c: ConsumerTopology, n: number): Promise<void> {
  const ch = await model.createConfirmChannel();
  try {
    const at = new Date().toISOString();
    for (let i = 0; i < n; i++) {
      const ok = ch.sendToQueue(c.parkedQueue, Buffer.from(JSON.stringify({ orderId: i, customer: `c-${i % 97}`, lines: [{ sku: 'A-1', qty: 2 }] })), {
        messageId: `bench-${i}`,
        contentType: 'application/json',
        persistent: true,
        headers: {
          [HEADER.attempts]: 3,
          [HEADER.exchange]: topology.exchange,
          [HEADER.routingKey]: 'order.created',
          [HEADER.consumer]: c.name,
          [HEADER.firstFailedAt]: at,
          [HEADER.lastFailedAt]: at,
          [HEADER.errorClass]: 'HttpError',
          [HEADER.errorMessage]: `carrier 503 for order ${i}`,
          [HEADER.errorStack]: 'at send (/app/carrier.js:10:5)',
          [HEADER.parkedReason]: 'max-attempts',
          [HEADER.parkedAt]: at,
        },
      });
      if (!ok) await new Promise((r) => ch.once('drain', r));
      if (i % 2000 === 1999) await ch.waitForConfirms();
    }
    await ch.waitForConfirms();
  } finally {
    await ch.close();
  }
}

async function purgeWork(model: amqp.ChannelModel, c: ConsumerTopology): Promise<number> {
  const ch = await model.createChannel();
  try {
    return (await ch.purgeQueue(c.queue)).messageCount;
  } finally {
    await ch.close();
  }
}

async function remove(model: amqp.ChannelModel, topology: Topology): Promise<void> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  for (const q of topologySpec(topology).queues) await ch.deleteQueue(q.name).catch(() => undefined);
  await ch.deleteExchange(topology.exchange).catch(() => undefined);
  await ch.close().catch(() => undefined);
}

async function withTopology<T>(queueType: 'classic' | 'quorum', work: (model: amqp.ChannelModel, topology: Topology, c: ConsumerTopology, opts: TopologyOptions) => Promise<T>, url: string = AMQP_URL): Promise<T> {
  // Nagle off, as warren's own connections: a walk's commits and cancels are round trips.
  const model = await amqp.connect(url, { noDelay: true });
  const opts = options(queueType);
  const topology = defineTopology(opts);
  try {
    await declareTopology(model, topology);
    return await work(model, topology, topology.consumer('billing'), opts);
  } finally {
    await remove(model, topology);
    await model.close();
  }
}

/** What one replay run measured: messages/s from the call to the last settlement, client CPU per message (µs). */
interface Replayed {
  readonly rate: number;
  readonly cpuUs: number;
}

/**
 * The move by hand: consume the parked queue (prefetch {@link WINDOW}), publish each copy
 * with the replay headers to the work queue on a confirm channel, ack the original on its
 * confirm; done when `n` are acked and the consuming channel is closed.
 */
async function bareReplay(model: amqp.ChannelModel, c: ConsumerTopology, n: number): Promise<number> {
  const ch = await model.createChannel();
  const pub = await model.createConfirmChannel();
  await ch.prefetch(WINDOW);
  let tag = '';
  let done = 0;
  let inFlight = 0;
  let returned = 0;
  pub.on('return', () => returned++);
  await new Promise<void>((resolve, reject) => {
    ch.consume(c.parkedQueue, (msg) => {
      if (msg === null) return reject(new Error('bare replay cancelled'));
      if (done + inFlight >= n) return; // not of this run: it goes back when the channel closes
      inFlight++;
      pub.publish('', c.queue, msg.content, { ...movedProperties(msg), mandatory: true }, (err: unknown) => {
        if (err) return reject(err instanceof Error ? err : new Error(String(err)));
        ch.ack(msg);
        inFlight--;
        if (++done === n) resolve();
      });
    }).then((ok) => (tag = ok.consumerTag), reject);
  });
  const finished = performance.now();
  // A quorum queue settles acks asynchronously: a channel closed at once can have some
  // acked messages returned (and delivered again). Stop the consumer, give the acks
  // time to settle, then close (not timed).
  await ch.cancel(tag);
  await new Promise((r) => setTimeout(r, 500));
  await ch.close();
  await pub.close();
  if (returned > 0) throw new Error(`${returned} bare copies were returned unroutable`);
  return finished;
}

/** AMQP 0-9-1 transaction methods, which amqplib has no wrapper for. */
const TX = { select: 0x5a000a, selectOk: 0x5a000b, commit: 0x5a0014, commitOk: 0x5a0015 } as const;
type RpcChannel = amqp.Channel & { rpc(method: number, fields: Record<string, unknown>, expect: number): Promise<unknown> };

/**
 * The move by hand as warren makes it, each copy and the acknowledgement of its original
 * in one transaction, on `channels` transactional channels, each consuming the parked
 * queue: publish each copy and ack its original on the channel that received it, and
 * commit {@link WINDOW} / `channels` at a time, one commit at a time per channel
 * (RabbitMQ takes no other method on a channel until its commit-ok). The read-ahead in all
 * is twice {@link WINDOW}, as warren's walk. On one channel this is the most a walk that
 * commits on one channel can do; on two, commits overlap, but the channels take messages
 * from the queue in no set order between them (a walk built so would have to give each
 * its own stretch of the queue). Done at the last commit-ok.
 */
async function bareTxReplay(model: amqp.ChannelModel, c: ConsumerTopology, n: number, channels: number): Promise<number> {
  const batchSize = Math.ceil(WINDOW / channels);
  let taken = 0;
  let committed = 0;
  let returned = 0;
  const lanes: { ch: RpcChannel; waiting: amqp.ConsumeMessage[]; inflight: boolean; tag: string }[] = [];
  for (let i = 0; i < channels; i++) {
    const ch = (await model.createChannel()) as RpcChannel;
    await ch.rpc(TX.select, {}, TX.selectOk);
    await ch.prefetch(2 * batchSize);
    ch.on('return', () => returned++);
    lanes.push({ ch, waiting: [], inflight: false, tag: '' });
  }
  await new Promise<void>((resolve, reject) => {
    const commit = (lane: (typeof lanes)[number]): void => {
      if (lane.inflight || lane.waiting.length === 0 || (lane.waiting.length < batchSize && taken < n)) return;
      const batch = lane.waiting.splice(0, batchSize);
      for (const msg of batch) {
        lane.ch.publish('', c.queue, msg.content, { ...movedProperties(msg), mandatory: true });
        lane.ch.ack(msg);
      }
      lane.inflight = true;
      lane.ch.rpc(TX.commit, {}, TX.commitOk).then(() => {
        lane.inflight = false;
        committed += batch.length;
        if (committed === n) resolve();
        else commit(lane);
      }, reject);
    };
    for (const lane of lanes) {
      lane.ch
        .consume(c.parkedQueue, (msg) => {
          if (msg === null) return reject(new Error('bare transactional replay cancelled'));
          if (taken >= n) return; // not of this run: it goes back when the channel closes
          taken++;
          lane.waiting.push(msg);
          // The last one taken: every channel commits what it holds.
          if (taken === n) for (const l of lanes) commit(l);
          else commit(lane);
        })
        .then((ok) => (lane.tag = ok.consumerTag), reject);
    }
  });
  const finished = performance.now();
  for (const lane of lanes) {
    await lane.ch.cancel(lane.tag);
    await lane.ch.close();
  }
  if (returned > 0) throw new Error(`${returned} bare transactional copies were returned unroutable`);
  return finished;
}

/** The copy's properties as the bare loops write them: the replay headers warren writes. */
function movedProperties(msg: amqp.ConsumeMessage): amqp.Options.Publish {
  const h: Record<string, unknown> = { ...(msg.properties.headers ?? {}) };
  delete h[HEADER.attempts];
  delete h['x-death'];
  const replays = h[HEADER.replays];
  h[HEADER.replays] = (typeof replays === 'number' ? replays : 0) + 1;
  h[HEADER.replayedAt] = new Date().toISOString();
  const p = msg.properties;
  return { messageId: p.messageId, contentType: p.contentType, persistent: true, headers: h };
}

/**
 * warren's replay and the bare loop on one broker and queue type, alternating, each round
 * over `MESSAGES` freshly parked messages; every copy counted in the work queue.
 */
async function replayVsBare(lib: Awaited<ReturnType<typeof loadBuilt>>, url: string, queueType: 'classic' | 'quorum', log: (line: string) => void): Promise<BenchRow[]> {
  return withTopology(
    queueType,
    async (model, topology, c) => {
      const version = brokerVersion(model);
      // warren's replay on a connection of its own, as the CLI and a Warren have: the walk
      // batches its connection's socket writes, which the bare loops must not get.
      const own = await amqp.connect(url, { noDelay: true });
      try {
        type Who = 'warren' | 'bare' | 'bareTx' | 'bareTx2';
        const run = async (who: Who, n: number): Promise<Replayed> => {
          await park(model, topology, c, n);
          const cpu = process.cpuUsage();
          const started = performance.now();
          let finished: number;
          let used: NodeJS.CpuUsage;
          if (who === 'warren') {
            const result = await lib.replayParked(own, c);
            finished = performance.now();
            used = process.cpuUsage(cpu);
            if (result.replayed !== n) throw new Error(`replayed ${result.replayed} of ${n}`);
          } else {
            finished = who === 'bare' ? await bareReplay(model, c, n) : await bareTxReplay(model, c, n, who === 'bareTx' ? 1 : 2);
            used = process.cpuUsage(cpu);
          }
          const seconds = (finished - started) / 1000;
          const arrived = await purgeWork(model, c);
          if (arrived !== n) throw new Error(`${who}: ${arrived} of ${n} replayed messages reached the work queue`);
          return { rate: n / seconds, cpuUs: (used.user + used.system) / n };
        };
        // Warm up the JIT and the queues.
        for (const who of ['warren', 'bare', 'bareTx', 'bareTx2'] as const) await run(who, Math.min(500, MESSAGES));
        const got: Record<Who, Replayed[]> = { warren: [], bare: [], bareTx: [], bareTx2: [] };
        const ratios: number[] = [];
        const txRatios: number[] = [];
        const orders: readonly (readonly Who[])[] = [
          ['bare', 'warren', 'bareTx', 'bareTx2'],
          ['warren', 'bareTx2', 'bare', 'bareTx'],
          ['bareTx', 'bare', 'bareTx2', 'warren'],
          ['bareTx2', 'bareTx', 'warren', 'bare'],
        ];
        for (let round = 0; round < ROUNDS; round++) {
          for (const who of orders[round % orders.length] as readonly Who[]) got[who].push(await run(who, MESSAGES));
          const w = got.warren.at(-1) as Replayed;
          const b = got.bare.at(-1) as Replayed;
          const t = got.bareTx.at(-1) as Replayed;
          const t2 = got.bareTx2.at(-1) as Replayed;
          ratios.push(w.rate / b.rate);
          txRatios.push(w.rate / t.rate);
          log(
            `${brokerLabel(url)} ${queueType} round ${round + 1}: warren ${Math.round(w.rate)}/s (${w.cpuUs.toFixed(1)} µs CPU), bare ${Math.round(b.rate)}/s (${b.cpuUs.toFixed(1)} µs CPU), ` +
              `bare transactional ${Math.round(t.rate)}/s (${t.cpuUs.toFixed(1)} µs CPU), on two channels ${Math.round(t2.rate)}/s, ratio ${(ratios.at(-1) as number).toFixed(3)}, to transactional ${(txRatios.at(-1) as number).toFixed(3)}`,
          );
        }
        const bare = `bare consume-publish-confirm-ack, prefetch ${WINDOW}`;
        const bareTx = `bare, one transaction per ${WINDOW}`;
        const bareTx2 = `bare, two channels, one transaction per ${WINDOW / 2} on each`;
        const rate = (who: Who): number => median(got[who].map((r) => r.rate));
        const cpu = (who: Who): number => median(got[who].map((r) => r.cpuUs));
        return [
          {
            group: `parked replay (${MESSAGES.toLocaleString('en-US')}, ${queueType}), RabbitMQ ${version} (${brokerLabel(url)})`,
            metric: `messages/s with confirms, median of ${ROUNDS} (median round ratio ${median(ratios).toFixed(2)})`,
            warren: rate('warren'),
            baseline: rate('bare'),
            baselineName: bare,
            goal: '>= 0.9',
          },
          { group: '  same, client CPU', metric: 'microseconds per message, median', warren: cpu('warren'), baseline: cpu('bare'), baselineName: bare },
          {
            group: '  same, against the move by hand in transactions',
            metric: `messages/s, median (median round ratio ${median(txRatios).toFixed(2)})`,
            warren: rate('warren'),
            baseline: rate('bareTx'),
            baselineName: bareTx,
            goal: '(reference)',
          },
          { group: '  same, client CPU', metric: 'microseconds per message, median', warren: cpu('warren'), baseline: cpu('bareTx'), baselineName: bareTx },
          { group: '  same, against the move by hand on two transactional channels in turn', metric: 'messages/s, median', warren: rate('warren'), baseline: rate('bareTx2'), baselineName: bareTx2, goal: '(reference)' },
        ];
      } finally {
        await own.close();
      }
    },
    url,
  );
}

function runCli(args: readonly string[], env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

/** The same replay through the built executable, process start and topology load included. */
async function cliRate(): Promise<number | undefined> {
  if (!existsSync(MAIN)) return undefined;
  return withTopology('classic', async (model, topology, c, opts) => {
    const dir = await mkdtemp(join(tmpdir(), 'warren-bench-'));
    try {
      const path = join(dir, 'topology.mjs');
      await writeFile(path, `export default ${JSON.stringify(opts)};\n`);
      await park(model, topology, c, MESSAGES);
      const started = performance.now();
      const r = await runCli(['parked', 'replay', 'billing'], { WARREN_TOPOLOGY: path, WARREN_AMQP_URL: AMQP_URL });
      const seconds = (performance.now() - started) / 1000;
      if (r.code !== 0) throw new Error(`warren parked replay exited ${r.code}: ${r.stderr}`);
      const arrived = await purgeWork(model, c);
      if (arrived !== MESSAGES) throw new Error(`${arrived} of ${MESSAGES} replayed messages reached the work queue`);
      return MESSAGES / seconds;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}

/** Replays `PACED` messages at 100/s; the measured rate (intervals per second, first publish to last confirm). */
async function pacedRate(): Promise<number> {
  return withTopology('classic', async (model, topology, c) => {
    await park(model, topology, c, PACED);
    const result = await replayParked(model, c, { ratePerSecond: 100 });
    if (result.replayed !== PACED) throw new Error(`replayed ${result.replayed} of ${PACED}`);
    return result.ratePerSecond;
  });
}

/** One row per figure: replay against the bare loop (each broker, classic and quorum), through the CLI, and the paced rate. */
export async function benchReplay(): Promise<BenchRow[]> {
  const lib = await loadBuilt();
  const log = (line: string): void => void process.stderr.write(`bench/replay: ${line}\n`);
  const rows: BenchRow[] = [];
  const n = MESSAGES.toLocaleString('en-US');
  for (const url of URLS) {
    for (const queueType of ['classic', 'quorum'] as const) rows.push(...(await replayVsBare(lib, url, queueType, log)));
  }
  const cli = await cliRate();
  if (cli !== undefined) rows.push({ group: `warren parked replay (${n}, CLI)`, metric: 'messages/s, process start included', warren: cli });
  rows.push({ group: 'parked replay --rate 100', metric: 'measured messages/s', warren: await pacedRate(), goal: 'within 10% of 100' });
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchReplay());
}
