/**
 * Replay benchmark:
 *
 * - replay of 10,000 parked messages to their consumer's queue, each copy confirmed
 *   before its original is acknowledged: messages/s from start to the last confirm,
 *   on a classic queue (the default) and a quorum queue;
 * - the same through the built `warren parked replay` executable, process start included
 *   (when dist/ is built);
 * - `--rate 100`: the measured rate, which should be within 10% of 100.
 *
 * Run alone with `npx tsx bench/replay.ts`. Needs RabbitMQ (WARREN_BENCH_AMQP_URL, else
 * WARREN_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672); it works in queues of
 * its own and removes them afterwards.
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
import { AMQP_URL, printRows, type BenchRow } from './report.js';

/** Parked messages per replay run. */
const MESSAGES = Number(process.env['WARREN_BENCH_REPLAY_MESSAGES'] ?? 10_000);
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

async function withTopology<T>(queueType: 'classic' | 'quorum', work: (model: amqp.ChannelModel, topology: Topology, c: ConsumerTopology, opts: TopologyOptions) => Promise<T>): Promise<T> {
  // Nagle off, as warren's own connections: every basic.get is a round trip.
  const model = await amqp.connect(AMQP_URL, { noDelay: true });
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

/** Replays `MESSAGES` parked messages through the library; messages/s, start to last confirm. */
async function replayRate(queueType: 'classic' | 'quorum'): Promise<number> {
  return withTopology(queueType, async (model, topology, c) => {
    // Warm up the JIT and the queues.
    await park(model, topology, c, 500);
    await replayParked(model, c);
    await purgeWork(model, c);
    await park(model, topology, c, MESSAGES);
    const started = performance.now();
    const result = await replayParked(model, c);
    const seconds = (performance.now() - started) / 1000;
    if (result.replayed !== MESSAGES) throw new Error(`replayed ${result.replayed} of ${MESSAGES}`);
    const arrived = await purgeWork(model, c);
    if (arrived !== MESSAGES) throw new Error(`${arrived} of ${MESSAGES} replayed messages reached the work queue`);
    return MESSAGES / seconds;
  });
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

/** One row per figure: replay messages/s (classic, quorum, through the CLI) and the paced rate. */
export async function benchReplay(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const n = MESSAGES.toLocaleString('en-US');
  rows.push({ group: `parked replay (${n}, classic)`, metric: 'messages/s with confirms', warren: await replayRate('classic'), goal: '>= 2000/s' });
  rows.push({ group: `parked replay (${n}, quorum)`, metric: 'messages/s with confirms', warren: await replayRate('quorum') });
  const cli = await cliRate();
  if (cli !== undefined) rows.push({ group: `warren parked replay (${n}, CLI)`, metric: 'messages/s, process start included', warren: cli });
  rows.push({ group: 'parked replay --rate 100', metric: 'measured messages/s', warren: await pacedRate(), goal: 'within 10% of 100' });
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchReplay());
}
