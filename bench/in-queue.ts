/**
 * Retry inside the queue (`retry.inQueue`, RabbitMQ 4.3's delayed retry) against tier
 * queues, on the same quorum consumer and the same schedule: 200 ms, 400 ms, 600 ms.
 *
 * - **A retry storm.** A backlog of messages whose handler fails three times and then
 *   succeeds, prefetch and concurrency 50. Per retry: the bytes this process wrote to the
 *   broker and its CPU, each beyond a run of the same messages that never fail; how late
 *   each message came back against its schedule (the time from the handler's throw to its
 *   next run, less the scheduled wait), median, p95 and max; and the whole storm's time.
 * - **A restart.** With `WARREN_BENCH_RESTART_CMD` (a shell command that stops and starts
 *   the broker at `WARREN_BENCH_INQUEUE_URL`; never the shared brokers of the machine),
 *   messages that failed once and wait 30 s are left waiting, the consumer is closed, the
 *   broker restarted, a new consumer started: how many come back, with which attempt
 *   number, and how long after their failure (does the wait survive the restart?).
 *
 * Run alone with `npx tsx bench/in-queue.ts`. Broker: WARREN_BENCH_INQUEUE_URL (default
 * the 4.3 broker of the development machine, :5674). Size: WARREN_BENCH_INQUEUE_MESSAGES
 * (default 500); WARREN_BENCH_SMALL=1 for a quick check (100).
 */
import { execSync } from 'node:child_process';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { defineTopology, Warren, type RetryOptions, type Topology } from '../src/index.js';
import { brokerLabel, brokerVersion, deleteTopology, median, printRows, type BenchRow } from './report.js';

const SMALL = process.env['WARREN_BENCH_SMALL'] === '1';
const URL_43 = process.env['WARREN_BENCH_INQUEUE_URL'] ?? 'amqp://guest:guest@127.0.0.1:5674';
const MESSAGES = Number(process.env['WARREN_BENCH_INQUEUE_MESSAGES'] ?? (SMALL ? 100 : 500));
const RESTART = process.env['WARREN_BENCH_RESTART_CMD'];
const FAILS = 3;
const STEP_MS = 200;
const PREFETCH = 50;

type Mode = 'tiers' | 'in-queue';

/** Bytes this process wrote to any socket: the broker connections are the only ones. */
let written = 0;
const write = net.Socket.prototype.write as (this: net.Socket, chunk: unknown, ...rest: unknown[]) => boolean;
net.Socket.prototype.write = function (this: net.Socket, chunk: unknown, ...rest: unknown[]): boolean {
  written += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk instanceof Uint8Array ? chunk.byteLength : 0;
  return write.call(this, chunk, ...rest);
} as typeof net.Socket.prototype.write;

function retryOf(mode: Mode, stepMs: number, fails: number): RetryOptions {
  const maxAttempts = fails + 2;
  return mode === 'tiers' ? { delays: Array.from({ length: fails }, (_, i) => stepMs * (i + 1)), maxAttempts } : { inQueue: { min: stepMs, max: stepMs * fails }, maxAttempts };
}

function topologyOf(mode: Mode, retry: RetryOptions): Topology {
  const prefix = `bench.inq.${mode}.${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  return defineTopology({ exchange: `${prefix}.events`, queueType: 'quorum', consumers: { [`${prefix}.c`]: { bindings: ['x'], retry } } });
}

function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] as number;
}

function waitUntil(check: () => boolean, what: string, ms: number): Promise<void> {
  const until = Date.now() + ms;
  return new Promise((resolve, reject) => {
    const tick = (): void => {
      if (check()) resolve();
      else if (Date.now() > until) reject(new Error(`timed out waiting for ${what}`));
      else setTimeout(tick, 5);
    };
    tick();
  });
}

interface Storm {
  readonly bytes: number;
  readonly cpuUs: number;
  readonly totalMs: number;
  readonly lateMs: readonly number[];
}

/** `MESSAGES` messages, each failing `fails` times then succeeding. */
async function storm(mode: Mode, fails: number): Promise<Storm> {
  const topology = topologyOf(mode, retryOf(mode, STEP_MS, Math.max(fails, 1)));
  const c = [...topology.consumers.values()][0]!;
  const warren = await Warren.connect({ url: URL_43, topology });
  try {
    const runs = new Map<string, number>();
    const failedAt = new Map<string, number>();
    const lateMs: number[] = [];
    let done = 0;
    const consumer = await warren.consume(
      c.name,
      (_p, ctx) => {
        const id = ctx.messageId as string;
        const now = performance.now();
        const n = (runs.get(id) ?? 0) + 1;
        runs.set(id, n);
        const before = failedAt.get(id);
        if (before !== undefined) lateMs.push(now - before - STEP_MS * (n - 1));
        if (n <= fails) {
          failedAt.set(id, performance.now());
          throw new Error('the carrier timed out');
        }
        done++;
      },
      { prefetch: PREFETCH, concurrency: PREFETCH },
    );
    const bytes0 = written;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(Array.from({ length: MESSAGES }, (_, i) => warren.publish('x', { order: i, note: 'x'.repeat(120) })));
    await waitUntil(() => done === MESSAGES, `${MESSAGES} messages handled (${mode})`, 120_000);
    const totalMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    if (consumer.stats.parked !== 0) throw new Error(`${consumer.stats.parked} parked in a storm that should park none`);
    return { bytes: written - bytes0, cpuUs: cpu.user + cpu.system, totalMs, lateMs };
  } finally {
    await warren.close();
    await deleteTopology(topology, URL_43).catch(() => undefined);
  }
}

interface Restarted {
  readonly back: number;
  readonly attempts: readonly number[];
  /** From each message's failure to its run after the restart, ms. */
  readonly afterFailureMs: readonly number[];
  /** How long the restart took, ms. */
  readonly restartMs: number;
}

/** The wait of the messages left waiting across a restart: longer than the restart takes. */
const RESTART_WAIT_MS = 30_000;

/** Messages waiting {@link RESTART_WAIT_MS} after one failure, across a consumer close and a broker restart. */
async function restart(mode: Mode, n: number): Promise<Restarted> {
  const topology = topologyOf(mode, mode === 'tiers' ? { delays: [RESTART_WAIT_MS], maxAttempts: 4 } : { inQueue: { min: RESTART_WAIT_MS, max: RESTART_WAIT_MS }, maxAttempts: 4 });
  const c = [...topology.consumers.values()][0]!;
  let warren = await Warren.connect({ url: URL_43, topology });
  const failedAt = new Map<string, number>();
  try {
    const first = await warren.consume(c.name, (_p, ctx) => {
      failedAt.set(ctx.messageId as string, performance.now());
      throw new Error('fails once');
    });
    await Promise.all(Array.from({ length: n }, (_, i) => warren.publish('x', { order: i })));
    await waitUntil(() => first.stats.retried === n, `${n} first failures (${mode})`, 60_000);
    await warren.close();
    const down = performance.now();
    execSync(RESTART as string, { stdio: 'ignore', timeout: 180_000 });
    const restartMs = performance.now() - down;
    warren = await Warren.connect({ url: URL_43, topology, connectTimeoutMs: 60_000 });
    const attempts: number[] = [];
    const afterFailureMs: number[] = [];
    await warren.consume(c.name, (_p, ctx) => {
      attempts.push(ctx.attempt);
      const failed = failedAt.get(ctx.messageId as string);
      if (failed !== undefined) afterFailureMs.push(performance.now() - failed);
    });
    await waitUntil(() => attempts.length >= n, `${n} messages back after the restart (${mode})`, RESTART_WAIT_MS + 30_000).catch(() => undefined);
    return { back: attempts.length, attempts, afterFailureMs, restartMs };
  } finally {
    await warren.close();
    await deleteTopology(topology, URL_43).catch(() => undefined);
  }
}

/** The figures, on the broker at WARREN_BENCH_INQUEUE_URL. */
export async function benchInQueue(): Promise<BenchRow[]> {
  const log = (line: string): void => void process.stderr.write(`bench/in-queue: ${line}\n`);
  const probe = await amqp.connect(URL_43);
  const version = brokerVersion(probe);
  await probe.close();
  const at = `RabbitMQ ${version} (${brokerLabel(URL_43)})`;
  const retries = MESSAGES * FAILS;
  const rows: BenchRow[] = [];
  log(`${at}: ${MESSAGES} messages, ${FAILS} failures each, schedule ${STEP_MS}/${2 * STEP_MS}/${3 * STEP_MS} ms`);
  const base = await storm('in-queue', 0);
  const got: Partial<Record<Mode, Storm>> = {};
  for (const mode of ['tiers', 'in-queue', 'tiers', 'in-queue'] as const) {
    const s = await storm(mode, FAILS);
    // Of two rounds each, the second is kept: the first warms the broker's queue creation.
    got[mode] = s;
    log(`${mode}: ${Math.round(s.totalMs)} ms, late median ${median(s.lateMs).toFixed(1)} ms`);
  }
  const tiers = got.tiers as Storm;
  const inq = got['in-queue'] as Storm;
  const perRetry = (s: Storm, of: (x: Storm) => number) => (of(s) - of(base)) / retries;
  const group = `retry storm, ${MESSAGES} messages x ${FAILS} failures (prefetch ${PREFETCH}), ${at}`;
  rows.push(
    { group, metric: 'bytes written by the client per retry', warren: perRetry(inq, (s) => s.bytes), baseline: perRetry(tiers, (s) => s.bytes), baselineName: 'tier queues' },
    { group: '  same', metric: 'client CPU per retry, microseconds', warren: perRetry(inq, (s) => s.cpuUs), baseline: perRetry(tiers, (s) => s.cpuUs), baselineName: 'tier queues' },
    { group: '  same', metric: 'late against the schedule, median ms', warren: median(inq.lateMs), baseline: median(tiers.lateMs), baselineName: 'tier queues' },
    { group: '  same', metric: 'late against the schedule, p95 ms', warren: quantile(inq.lateMs, 0.95), baseline: quantile(tiers.lateMs, 0.95), baselineName: 'tier queues' },
    { group: '  same', metric: 'late against the schedule, max ms', warren: Math.max(...inq.lateMs), baseline: Math.max(...tiers.lateMs), baselineName: 'tier queues' },
    { group: '  same', metric: `whole storm, ms (schedule alone ${STEP_MS * 6})`, warren: inq.totalMs, baseline: tiers.totalMs, baselineName: 'tier queues' },
  );
  if (RESTART !== undefined) {
    const n = SMALL ? 20 : 100;
    for (const mode of ['tiers', 'in-queue'] as const) {
      const r = await restart(mode, n);
      const second = r.attempts.filter((a) => a === 2).length;
      log(`restart, ${mode}: ${r.back}/${n} back, ${second} on attempt 2, the restart took ${Math.round(r.restartMs)} ms, back ${Math.round(Math.min(...r.afterFailureMs))}..${Math.round(Math.max(...r.afterFailureMs))} ms after their failure`);
      rows.push(
        { group: `restart of the broker with ${n} messages waiting ${RESTART_WAIT_MS / 1000} s, ${mode}`, metric: `messages back (of ${n}); on attempt 2`, warren: r.back, baseline: second, baselineName: 'on attempt 2' },
        { group: '  same', metric: `back after their failure, min ms (schedule ${RESTART_WAIT_MS})`, warren: Math.min(...r.afterFailureMs), baseline: Math.max(...r.afterFailureMs), baselineName: 'max' },
        { group: '  same', metric: 'the restart took, ms', warren: r.restartMs },
      );
    }
  } else {
    log('no WARREN_BENCH_RESTART_CMD: the restart is not measured');
  }
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchInQueue());
}
