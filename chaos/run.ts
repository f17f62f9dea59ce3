/**
 * `npm run chaos`: N messages through the whole pipeline (outbox, relay, publisher,
 * consumer with a delay ladder, parked queue, retry table and its scheduler) while
 * processes are killed, connections closed and the broker and PostgreSQL restarted; then
 * a check that every message did its work exactly once or was parked as it was meant to,
 * printed as a table. Exits 1 on any violation, naming the message ids. See docs/chaos.md.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import * as amqp from 'amqplib';
import { ChaosDb, type DbConfig, type StoreKind } from './db.js';
import { Archive } from '../src/index.js';
import { check, renderReport, type ArchiveFacts, type BrokerState, type Failover, type ParkedCopy, type RunFacts } from './report.js';
import { CONSUMER, CONSUMER_PROCESSES, chaosWindowMs, HELD_TENANT, planChaos, quorumTopology, topology as classicTopology, type ChaosEvent } from './plan.js';
import type { ParentMessage, WorkerConfig, WorkerMessage } from './worker.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..');

// --- arguments ----------------------------------------------------------------

interface Args {
  messages: number;
  broker: '3.10' | '4.0' | '4.3' | 'cluster';
  store: StoreKind;
  seed: number;
  settleTimeoutMs: number | undefined;
  /** kill -9 of the single node too (the cluster run always kills one). */
  kill9?: boolean;
}

const USAGE = `usage: npm run chaos -- [--messages N] [--broker 3.10|4.0|4.3|cluster] [--cluster] [--store postgres|sqlite] [--kill-9] [--seed S] [--settle-timeout SECONDS]

  --messages N          messages through the pipeline (default 20000; at least 100)
  --broker              which RabbitMQ: 3.10 (the machine's, default), 4.0 or 4.3 (the project's
                        chroots), or cluster (three 3.10 nodes in one cluster, quorum queues)
  --cluster             the same as --broker cluster
  --kill-9              on one node, kill its VM hard (kill -9) besides the clean restart; classic
                        queues dead-letter at most once, so a message in a delay tier's hop can be
                        lost (a broker limit, see docs/chaos.md); the cluster run always does it
  --store               where the idempotency guard, outbox and retry table live (default postgres)
  --seed S              repeat a run: the same messages fail the same way, the faults come at the same times
  --settle-timeout S    how long to wait for the pipeline to come to rest after the faults (default 300 + N/33)

Starts its own RabbitMQ node (or three) and PostgreSQL cluster, stops them at the end and
removes their data (their logs are kept beside the run's). Needs root.`;

function fail(message: string): never {
  process.stderr.write(`chaos: ${message}\n\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = { messages: 20_000, broker: '3.10', store: 'postgres', seed: Math.floor(Math.random() * 2 ** 31), settleTimeoutMs: undefined };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i] ?? '';
    if (flag === '--help' || flag === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (flag === '--cluster') {
      args.broker = 'cluster';
      continue;
    }
    if (flag === '--kill-9') {
      args.kill9 = true;
      continue;
    }
    const [name, inline] = flag.includes('=') ? [flag.slice(0, flag.indexOf('=')), flag.slice(flag.indexOf('=') + 1)] : [flag, undefined];
    const value = inline ?? argv[++i];
    if (value === undefined) fail(`${name} needs a value`);
    const int = (min: number, max: number) => {
      const n = Number(value);
      if (!Number.isInteger(n) || n < min || n > max) fail(`${name} ${JSON.stringify(value)} is not a whole number from ${min} to ${max}`);
      return n;
    };
    switch (name) {
      case '--messages': args.messages = int(100, 1_000_000); break;
      case '--seed': args.seed = int(0, 2 ** 32 - 1); break;
      case '--settle-timeout': args.settleTimeoutMs = int(10, 86_400) * 1000; break;
      case '--broker':
        if (value !== '3.10' && value !== '4.0' && value !== '4.3' && value !== 'cluster') fail(`--broker ${JSON.stringify(value)} is not a broker this run knows; use 3.10, 4.0, 4.3 or cluster`);
        args.broker = value;
        break;
      case '--store':
        if (value === 'postgres' || value === 'pg') args.store = 'postgres';
        else if (value === 'sqlite') args.store = 'sqlite';
        else fail(`--store ${JSON.stringify(value)} is not a store; use postgres or sqlite`);
        break;
      default: fail(`unknown option ${JSON.stringify(name)}`);
    }
  }
  return args;
}

// --- services ------------------------------------------------------------------

const BROKERS = {
  '3.10': { amqpPorts: [5690], mgmtPorts: [15690], pgPort: 5499 },
  '4.0': { amqpPorts: [5691], mgmtPorts: [15691], pgPort: 5498 },
  '4.3': { amqpPorts: [5693], mgmtPorts: [15693], pgPort: 5496 },
  // Three nodes of the machine's 3.10 (chaos/services.sh): names and ports of their own,
  // beside the test suite's cluster on 5701-5703.
  cluster: { amqpPorts: [5721, 5722, 5723], mgmtPorts: [15721, 15722, 15723], pgPort: 5497 },
} as const;

type ClusterNode = 'c1' | 'c2' | 'c3';
/** The cluster node behind an address (`127.0.0.1:5722`) or a node name (`warren-chaos-c2@localhost`). */
function clusterNode(addressOrName: string | undefined): ClusterNode | undefined {
  const m = /:572([1-3])$/.exec(addressOrName ?? '') ?? /^warren-chaos-c([1-3])@/.exec(addressOrName ?? '');
  return m ? (`c${m[1]}` as ClusterNode) : undefined;
}

/** Runs chaos/services.sh; resolves with its output, rejects with it on failure. */
function services(...args: string[]): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const p = spawn('bash', [join(here, 'services.sh'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolvePromise(out.trim()) : reject(new Error(`chaos/services.sh ${args.join(' ')} failed (exit ${code}):\n${out.trim()}`))));
  });
}

/** The management API of the run's node, or of the first cluster node that answers. */
class Management {
  private readonly auth = `Basic ${Buffer.from('guest:guest').toString('base64')}`;
  private current = 0;
  constructor(private readonly ports: readonly number[]) {}

  private async call(method: string, path: string): Promise<Response> {
    let last: unknown;
    for (let k = 0; k < this.ports.length; k++) {
      const i = (this.current + k) % this.ports.length;
      try {
        const res = await fetch(`http://127.0.0.1:${this.ports[i]}/api${path}`, { method, headers: { authorization: this.auth, 'x-reason': 'chaos run' }, signal: AbortSignal.timeout(5000) });
        // A node on its way down answers 503; another node knows the same.
        if (res.status >= 500 && k < this.ports.length - 1) continue;
        this.current = i;
        return res;
      } catch (error) {
        last = error;
      }
    }
    throw last instanceof Error ? last : new Error(String(last));
  }

  /** A quorum queue's leader and the members online (cluster nodes). */
  async quorum(name: string): Promise<{ leader: ClusterNode | undefined; online: ClusterNode[] }> {
    const res = await this.call('GET', `/queues/%2F/${encodeURIComponent(name)}`);
    if (!res.ok) throw new Error(`GET /api/queues/${name} answered ${res.status}`);
    const q = (await res.json()) as { leader?: string; online?: string[] };
    return { leader: clusterNode(q.leader), online: (q.online ?? []).map(clusterNode).filter((n): n is ClusterNode => n !== undefined) };
  }

  async connections(): Promise<string[]> {
    const res = await this.call('GET', '/connections?columns=name');
    if (!res.ok) throw new Error(`GET /api/connections answered ${res.status}`);
    return ((await res.json()) as Array<{ name: string }>).map((c) => c.name);
  }

  async closeConnection(name: string): Promise<void> {
    const res = await this.call('DELETE', `/connections/${encodeURIComponent(name)}`);
    if (!res.ok && res.status !== 404) throw new Error(`DELETE /api/connections answered ${res.status}`);
  }

  /** A queue's depth; `dlx`: quorum messages dead-lettered but not yet confirmed by their target. */
  async queue(name: string): Promise<{ messages: number; unacked: number; consumers: number; dlx: number }> {
    const res = await this.call('GET', `/queues/%2F/${encodeURIComponent(name)}`);
    if (!res.ok) throw new Error(`GET /api/queues/${name} answered ${res.status}`);
    const q = (await res.json()) as { messages?: number; messages_ready?: number; messages_unacknowledged?: number; consumers?: number; messages_dlx?: number };
    // A queue whose node (or quorum leader) is out has no figures: that is not an empty queue.
    if (q.messages === undefined && q.messages_ready === undefined) throw new Error(`queue ${name} has no figures right now (its leader is out)`);
    const unacked = q.messages_unacknowledged ?? 0;
    return { messages: q.messages ?? (q.messages_ready ?? 0) + unacked, unacked, consumers: q.consumers ?? 0, dlx: q.messages_dlx ?? 0 };
  }

  async version(): Promise<string> {
    const res = await this.call('GET', '/overview');
    return ((await res.json()) as { rabbitmq_version?: string }).rabbitmq_version ?? 'unknown';
  }
}

// --- child processes --------------------------------------------------------------

/** A worker process, restarted whenever it dies (killed by the run, or on its own). */
class Child {
  private proc: ChildProcess | undefined;
  private wanted = true;
  private killedByUs = false;
  readonly startedAt: number[] = [];
  /** Exits the run did not cause: a process that died on its own is a finding. */
  readonly unexpectedExits: string[] = [];
  /** Last counters of each incarnation. */
  private readonly stats = new Map<number, Readonly<Record<string, number>>>();
  produced: { outbox: number; publisher: number } | undefined;
  finished = false;
  /** The current incarnation said it is up (connected, consuming, started). */
  ready = false;
  /** A consumer's connection: the node it is on now (`host:port`), and what happened to it. */
  node: string | undefined;
  readonly events: Array<{ type: 'connected' | 'lost' | 'handled' | 'started'; at: number; node?: string; pauseMs?: number }> = [];
  private watching = false;

  constructor(
    readonly name: string,
    private readonly config: WorkerConfig,
    private readonly logFile: string,
    private readonly restartDelayMs: number,
    private readonly onLine: (line: string) => void,
  ) {}

  start(): void {
    const incarnation = this.startedAt.length;
    this.startedAt.push(Date.now());
    const log = openSync(this.logFile, 'a');
    this.killedByUs = false;
    this.ready = false;
    const proc = fork(join(here, 'worker.ts'), [], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, CHAOS_CONFIG: JSON.stringify(this.config) },
      stdio: ['ignore', log, log, 'ipc'],
      cwd: root,
    });
    closeSync(log);
    this.proc = proc;
    this.node = undefined;
    this.events.push({ type: 'started', at: Date.now() });
    proc.on('message', (m: WorkerMessage) => {
      if (m.type === 'ready') {
        this.ready = true;
        if (this.watching) this.send('watch');
      } else if (m.type === 'connected') {
        this.node = m.node;
        this.events.push({ type: 'connected', at: m.at, node: m.node });
      } else if (m.type === 'lost') this.events.push({ type: 'lost', at: m.at });
      else if (m.type === 'handled') this.events.push({ type: 'handled', at: m.at, ...(m.pauseMs === undefined ? {} : { pauseMs: m.pauseMs }) });
      else if (m.type === 'stats') this.stats.set(incarnation, m.stats);
      else if (m.type === 'produced') this.produced = { outbox: m.outbox, publisher: m.publisher };
    });
    proc.on('exit', (code, signal) => {
      if (this.proc === proc) this.proc = undefined;
      if (this.armed && signal === 'SIGKILL') this.armedDeaths++;
      this.armed = false;
      if (this.config.role === 'producer' && code === 0) {
        this.finished = true;
        return;
      }
      if (!this.killedByUs && this.wanted) {
        const what = `${this.name} exited on its own (${signal ?? `code ${code}`}); see ${this.logFile}`;
        this.unexpectedExits.push(what);
        this.onLine(what);
      }
      if (this.wanted && this.config.role !== 'producer') setTimeout(() => this.wanted && !this.proc && this.start(), this.restartDelayMs).unref();
    });
  }

  /** Tells the process to SIGKILL itself at a moment of its own choosing (its exit is expected). */
  dieWhen(message: ParentMessage): boolean {
    if (!this.proc?.connected) return false;
    this.killedByUs = true;
    this.armed = true;
    this.proc.send(message, () => undefined);
    return true;
  }

  /** Deaths asked for with {@link dieWhen} that happened. */
  armedDeaths = 0;
  private armed = false;

  /** SIGKILL; the exit handler starts it again after the restart delay. */
  kill(): boolean {
    if (!this.proc) return false;
    this.killedByUs = true;
    this.armed = false;
    this.proc.kill('SIGKILL');
    return true;
  }

  /** Tells a waiting producer to start. */
  go(): void {
    this.proc?.send('go');
  }

  /** A consumer reports its handler runs while a failover is watched (every incarnation). */
  watch(on: boolean): void {
    this.watching = on;
    this.send(on ? 'watch' : 'unwatch');
  }

  private send(m: ParentMessage): void {
    // A process that just died cannot take it; the next incarnation is told when ready.
    if (this.proc?.connected) this.proc.send(m, () => undefined);
  }

  get running(): boolean {
    return this.proc !== undefined;
  }

  /** SIGTERM (a clean stop), SIGKILL after the deadline. */
  async stop(deadlineMs = 20_000): Promise<void> {
    this.wanted = false;
    const proc = this.proc;
    if (!proc || proc.exitCode !== null) return;
    this.killedByUs = true;
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), deadlineMs);
    await exited;
    clearTimeout(timer);
  }

  /** Counters summed over every incarnation (a killed one's last half second is lost). */
  totals(): Record<string, number> {
    const sum: Record<string, number> = {};
    for (const s of this.stats.values()) for (const [k, v] of Object.entries(s)) sum[k] = (sum[k] ?? 0) + v;
    return sum;
  }
}

// --- the run -------------------------------------------------------------------------

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
}

/** A connection to the run's node, or to the first cluster node that takes it. */
async function connectAny(urls: readonly string[]): Promise<amqp.ChannelModel> {
  let last: unknown;
  for (const url of urls) {
    try {
      return await amqp.connect(url, { timeout: 5000 });
    } catch (error) {
      last = error;
    }
  }
  throw last instanceof Error ? last : new Error(String(last));
}

/** Reads the parked queue; on a cluster a read that fails (a leader moving) is tried again. */
async function readParked(urls: readonly string[], queue: string): Promise<ParkedCopy[]> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await readParkedOnce(urls, queue);
    } catch (error) {
      if (attempt >= 10) throw error;
      await sleep(2000);
    }
  }
}

async function readParkedOnce(urls: readonly string[], queue: string): Promise<ParkedCopy[]> {
  const conn = await connectAny(urls);
  // A connection closed by the broker rejects the pending get; it must not also throw an 'error' event.
  conn.on('error', () => undefined);
  try {
    const ch = await conn.createChannel();
    const copies: ParkedCopy[] = [];
    for (;;) {
      const m = await ch.get(queue, { noAck: false });
      if (m === false) break;
      const h = (m.properties.headers ?? {}) as Record<string, unknown>;
      copies.push({
        messageId: String(m.properties.messageId ?? ''),
        reason: String(h['warren-parked-reason'] ?? ''),
        errorClass: String(h['warren-error-class'] ?? ''),
        errorMessage: String(h['warren-error-message'] ?? ''),
        attempts: Number(h['warren-attempts'] ?? 0),
      });
    }
    // Unacked gets go back to the queue when the channel closes: the check reads, never takes.
    await ch.close();
    return copies;
  } finally {
    await conn.close().catch(() => undefined);
  }
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const ports = BROKERS[args.broker];
  const cluster = args.broker === 'cluster';
  const topology = cluster ? quorumTopology : classicTopology;
  const postgres = args.store === 'postgres';
  const window = chaosWindowMs(args.messages, cluster);
  const settleTimeoutMs = args.settleTimeoutMs ?? 300_000 + args.messages * 30;
  const runStarted = Date.now();
  const runDir = join(root, '.warren', 'chaos', `${args.broker}-${args.store}`);
  rmSync(runDir, { recursive: true, force: true });
  mkdirSync(runDir, { recursive: true });
  const say = (line: string) => process.stdout.write(`chaos: ${line}\n`);

  say(`seed ${args.seed} (repeat with --seed ${args.seed}), ${args.messages} messages, ${cluster ? 'a cluster of three RabbitMQ 3.10 nodes (quorum queues)' : `RabbitMQ ${args.broker}`}, ${postgres ? 'PostgreSQL' : 'SQLite'} store, faults over ${seconds(window)}; logs in ${runDir}`);

  const amqpUrls = ports.amqpPorts.map((p) => `amqp://guest:guest@127.0.0.1:${p}`);
  const mgmt = new Management(ports.mgmtPorts);
  // The broker's services: one node (3.10, 4.0 or 4.3), or the cluster's three.
  const brokerServices = (action: 'start' | 'stop'): Promise<string> => (cluster ? services('cluster', action) : services('rabbit', action, args.broker));
  const dbConfig: DbConfig = { store: args.store, pgUrl: `postgres://postgres@127.0.0.1:${ports.pgPort}/chaos`, sqliteFile: join(runDir, 'chaos.db') };
  const downFile = join(runDir, 'inventory-down');
  const children: Child[] = [];
  let db: ChaosDb | undefined;
  let servicesUp = { rabbit: false, pg: false };

  let cleaning: Promise<void> | undefined;
  const cleanup = () => (cleaning ??= stopAll());
  const stopAll = async () => {
    await Promise.all(children.map((c) => c.stop(5000)));
    await db?.close().catch(() => undefined);
    db = undefined;
    // Stopped, then their data removed; their logs are kept in the run's directory.
    if (servicesUp.rabbit) {
      await brokerServices('stop').catch((e: unknown) => say(String(e)));
      await (cluster ? services('cluster', 'clean', join(runDir, 'rabbit')) : services('rabbit', 'clean', args.broker, join(runDir, 'rabbit'))).catch((e: unknown) => say(String(e)));
    }
    if (servicesUp.pg) {
      await services('pg', 'stop', String(ports.pgPort)).catch((e: unknown) => say(String(e)));
      await services('pg', 'clean', String(ports.pgPort), join(runDir, 'postgresql')).catch((e: unknown) => say(String(e)));
    }
    servicesUp = { rabbit: false, pg: false };
  };
  let interrupted = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true;
      say(`${signal}: stopping the run's processes and services`);
      void cleanup().finally(() => process.exit(130));
    });
  }

  try {
    // Services of the run's own: restarting them disturbs nothing else on the machine.
    if (args.broker === '4.0' || args.broker === '4.3') {
      const chroot = args.broker === '4.0' ? (process.env['WARREN_RABBIT4_DIR'] ?? '/var/lib/warren/rabbit4') : (process.env['WARREN_RABBIT43_DIR'] ?? '/var/lib/warren/rabbit43');
      if (!existsSync(chroot)) {
        // Only built: the run's node is a second one in the chroot; the suite's broker stays down.
        say(`the RabbitMQ ${args.broker} chroot ${chroot} is not built yet; building it with scripts/rabbitmq4.sh`);
        await new Promise<void>((ok, ko) => spawn('bash', [join(root, 'scripts', 'rabbitmq4.sh'), 'build', args.broker], { stdio: 'inherit' }).on('exit', (c) => (c === 0 ? ok() : ko(new Error(`scripts/rabbitmq4.sh build ${args.broker} failed`)))));
      }
    }
    servicesUp.rabbit = true;
    const starting = [brokerServices('start').then(say)];
    if (postgres) {
      servicesUp.pg = true;
      starting.push(services('pg', 'start', String(ports.pgPort)).then(say));
    }
    await Promise.all(starting);
    const brokerVersion = await mgmt.version();

    db = await ChaosDb.open(dbConfig, { poolSize: 4 });
    await db.setup();
    // The run's one operator action: hold tenant `held` and never lift it.
    await db.store.retryTable.pause({ tenant: HELD_TENANT }, { actor: 'chaos' });
    writeFileSync(downFile, 'inventory is down\n');

    const events = planChaos(args.messages, args.seed, { postgres, cluster, kill9: args.kill9 === true });
    const base = { amqpUrl: cluster ? amqpUrls : (amqpUrls[0] as string), cluster, db: dbConfig, downFile, messages: args.messages, seed: args.seed, produceMs: Math.round(window * 0.7) };
    const log = (name: string) => join(runDir, `${name}.log`);
    const child = (role: WorkerConfig['role'], name: string, restartDelayMs: number) => {
      const c = new Child(name, { ...base, role, name }, log(name), restartDelayMs, say);
      children.push(c);
      return c;
    };
    const relay = child('relay', 'relay', 1000);
    const scheduler = child('scheduler', 'scheduler', 1000);
    const consumers = Array.from({ length: CONSUMER_PROCESSES }, (_, i) => child('consumer', `consumer-${i + 1}`, 300));
    const producer = child('producer', 'producer', 0);
    const ingester = child('ingester', 'ingester', 1000);
    for (const c of children) c.start();
    // Under load a process takes a while to start; the clock starts when all are up.
    const readyBy = Date.now() + 180_000;
    while (!children.every((c) => c.ready)) {
      if (Date.now() > readyBy) throw new Error(`processes not up after 180 s: ${children.filter((c) => !c.ready).map((c) => c.name).join(', ')}; see their logs in ${runDir}`);
      if (interrupted) return 130;
      await sleep(200);
    }
    say(`all processes up after ${seconds(Date.now() - runStarted)}; producing and injecting faults`);
    producer.go();

    // --- faults ---
    const queues = topology.consumer(CONSUMER);
    const t0 = Date.now();
    const done: Array<{ event: ChaosEvent; ok: boolean; detail: string; tookMs: number; at: string }> = [];
    const failovers: Failover[] = [];
    /**
     * One cluster node out: stopped cleanly (then started again once every consumer
     * handles messages again, at most 60 s later), or killed with kill -9 and started
     * again at once. Records, per consumer, whether its connection was on that node, how
     * long after it was lost the consumer was attached on another node and handling
     * messages again, and the longest pause in its handling.
     */
    const failover = async (what: string, node: ClusterNode, how: 'stop' | 'kill'): Promise<string> => {
      const t = Date.now();
      const on = new Map(consumers.map((c) => [c, clusterNode(c.node)] as const));
      for (const c of consumers) c.watch(true);
      const lines: string[] = [];
      let stopMs: number;
      let startMs: number;
      // A consumer has resumed once it handles a message after the node went, on its new connection if it lost its own.
      const resumedAt = (c: Child, from: number): number | undefined => {
        const lost = c.events.find((x) => x.at >= t && (x.type === 'lost' || x.type === 'started'));
        const attached = lost ? c.events.find((x) => x.at >= lost.at && x.type === 'connected') : undefined;
        if (lost && !attached) return undefined;
        return c.events.find((x) => x.type === 'handled' && x.at >= Math.max(from, attached?.at ?? 0))?.at;
      };
      const waitResumed = async (from: number) => {
        const until = Date.now() + 60_000;
        while (Date.now() < until && !interrupted && consumers.some((c) => resumedAt(c, from) === undefined)) await sleep(200);
      };
      try {
        if (how === 'stop') {
          lines.push(await services('cluster', 'stop-node', node));
          stopMs = Date.now() - t;
          await waitResumed(Date.now());
          const s0 = Date.now();
          lines.push(await services('cluster', 'start-node', node));
          startMs = Date.now() - s0;
        } else {
          lines.push(await services('cluster', 'kill-node', node));
          stopMs = 0;
          startMs = Date.now() - t;
          await waitResumed(t);
        }
      } catch (error) {
        // The node is not left out for the rest of the run: one more start.
        for (const c of consumers) c.watch(false);
        await services('cluster', 'start-node', node).catch((e: unknown) => say(`node ${node} could not be started again: ${String(e)}`));
        throw error;
      }
      // The queue's member on that node back online before the next fault.
      const backBy = Date.now() + 60_000;
      while (Date.now() < backBy && (await mgmt.quorum(queues.queue).catch(() => ({ online: [] as ClusterNode[] }))).online.length < 3) await sleep(500);
      const end = Date.now();
      for (const c of consumers) c.watch(false);
      // A loss counts when it comes with the node going (a closed connection later is another fault).
      const lostBy = t + stopMs + 5000;
      const per = consumers.map((c) => {
        const lost = c.events.find((x) => x.at >= t && x.at <= lostBy && x.type === 'lost');
        const restarted = c.events.find((x) => x.at >= t && x.at <= end && x.type === 'started');
        const attached = lost ? c.events.find((x) => x.at >= lost.at && x.type === 'connected') : undefined;
        const handled = attached ? c.events.find((x) => x.type === 'handled' && x.at >= attached.at) : undefined;
        const pauses = c.events.filter((x) => x.type === 'handled' && x.at >= t && x.at <= end && x.pauseMs !== undefined).map((x) => x.pauseMs ?? 0);
        return {
          name: c.name,
          node: on.get(c) ?? '?',
          onStopped: on.get(c) === node,
          restartedByRun: restarted !== undefined,
          lostAfterMs: lost ? lost.at - t : undefined,
          attachMs: lost && attached ? attached.at - lost.at : undefined,
          attachedTo: clusterNode(attached?.node),
          resumeMs: lost && handled ? handled.at - lost.at : undefined,
          longestPauseMs: pauses.length ? Math.max(...pauses) : undefined,
        };
      });
      const f: Failover = { what, node, how, stopMs, startMs, consumers: per };
      failovers.push(f);
      for (const c of per) {
        say(
          `          ${c.name} on ${c.node}${c.onStopped ? ' (the node out)' : ''}: ` +
            (c.lostAfterMs === undefined ? 'kept its connection' : `connection lost ${c.lostAfterMs} ms after the fault, attached on ${c.attachedTo ?? '?'} ${c.attachMs ?? '?'} ms later, handling again ${c.resumeMs ?? '(not seen)'} ms after the loss`) +
            `; longest pause in handling ${c.longestPauseMs ?? '-'} ms${c.restartedByRun ? ' (also SIGKILLed by the run meanwhile)' : ''}`,
        );
      }
      return `${what}: ${lines.map((l) => l.split('\n').pop()).join('; ')}`;
    };
    const leaderNode = async (): Promise<ClusterNode> => (await mgmt.quorum(queues.queue)).leader ?? 'c1';
    /**
     * Runs a kill -9 and reports the parked queue's depth before it and once the broker is
     * back: nothing takes from that queue, so every message confirmed into it must still be
     * there (more may come meanwhile, never fewer).
     */
    const parkedAcross = async (kill: () => Promise<string>): Promise<string> => {
      const depth = async () => (await mgmt.queue(queues.parkedQueue).catch(() => undefined))?.messages;
      const before = await depth();
      const out = await kill();
      let after: number | undefined;
      for (let tries = 0; tries < 20 && after === undefined; tries++) {
        await sleep(1000);
        after = await depth();
      }
      const verdict = before === undefined || after === undefined ? 'not readable' : after >= before ? 'none lost' : `${before - after} LOST`;
      return `${out}; parked queue ${before ?? '?'} before the kill, ${after ?? '?'} after (${verdict})`;
    };
    const fire = async (e: ChaosEvent): Promise<void> => {
      const started = Date.now();
      let ok = true;
      let detail = '';
      try {
        switch (e.kind) {
          case 'kill-consumer': {
            const c = consumers[e.target] ?? consumers[0];
            ok = c?.kill() ?? false;
            detail = ok ? `SIGKILL ${c?.name}` : `${c?.name} was not running`;
            break;
          }
          case 'close-connection': {
            // Processes may be starting or reconnecting: wait a little for a connection to close.
            let names: string[] = [];
            for (let tries = 0; tries < 20 && names.length === 0; tries++) {
              names = await mgmt.connections().catch(() => []);
              if (names.length === 0) await sleep(500);
            }
            const name = names[Math.floor(e.pick * names.length)];
            if (name === undefined) {
              ok = false;
              detail = 'no connection open';
            } else {
              await mgmt.closeConnection(name);
              detail = name;
            }
            break;
          }
          case 'restart-broker':
            detail = await services('rabbit', 'restart', args.broker);
            break;
          case 'kill-broker':
            detail = await parkedAcross(() => services('rabbit', 'kill', args.broker));
            break;
          case 'stop-consumer-node': {
            const n = clusterNode(consumers[0]?.node) ?? clusterNode(consumers[1]?.node) ?? 'c1';
            detail = await failover(`node ${n} (consumer-1's) stopped`, n, 'stop');
            break;
          }
          case 'stop-leader-node': {
            const n = await leaderNode();
            detail = await failover(`node ${n} (the work queue's leader) stopped`, n, 'stop');
            break;
          }
          case 'kill-node': {
            const n = await leaderNode();
            detail = await parkedAcross(() => failover(`node ${n} (the work queue's leader) killed with kill -9`, n, 'kill'));
            break;
          }
          case 'restart-postgres':
            detail = await services('pg', 'restart', String(ports.pgPort));
            break;
          case 'kill-relay':
            ok = relay.kill();
            detail = ok ? 'SIGKILL relay' : 'relay was not running';
            break;
          case 'kill-scheduler':
            ok = scheduler.kill();
            detail = ok ? 'SIGKILL scheduler' : 'scheduler was not running';
            break;
          case 'kill-ingester':
            ok = ingester.kill();
            detail = ok ? 'SIGKILL ingester' : 'ingester was not running';
            break;
          case 'kill-ingester-mid-batch':
            ok = ingester.dieWhen('die-after-commit');
            detail = ok ? 'ingester told to die after its next committed batch, before the ack' : 'ingester was not running';
            break;
          case 'inventory-down':
            writeFileSync(downFile, 'inventory is down\n');
            detail = 'inventory health check fails';
            break;
          case 'inventory-up':
            rmSync(downFile, { force: true });
            detail = 'inventory health check passes';
            break;
        }
      } catch (error) {
        ok = false;
        // The first line, and the last of the script's output (its error).
        const lines = (error instanceof Error ? error.message : String(error)).split('\n').filter((l) => l.trim() !== '');
        detail = lines.length > 1 ? `${lines[0]} ${lines[lines.length - 1]}` : (lines[0] ?? '');
      }
      done.push({ event: e, ok, detail, tookMs: Date.now() - started, at: new Date(started).toISOString() });
      if (e.kind === 'restart-broker' || e.kind === 'kill-broker' || e.kind.endsWith('-node') || e.kind === 'restart-postgres' || e.kind.startsWith('inventory') || !ok) {
        say(`${seconds(started - t0).padStart(6)}  ${e.kind}: ${detail}${ok ? '' : ' (not done)'}`);
      }
    };
    const pending: Promise<void>[] = [];
    // The broker restart (or kill) is waited for, and the faults after it move back by as
    // long as it took: a fault fired while the broker is down (a connection to close) would
    // hit nothing. A cluster stays up while one node is out: the node faults run one after
    // the other beside the rest, which goes on.
    let shift = 0;
    let nodeFaults = Promise.resolve();
    for (const e of events) {
      const wait = t0 + e.at + shift - Date.now();
      if (wait > 0) await sleep(wait);
      if (interrupted) break;
      if (e.kind === 'restart-broker' || e.kind === 'kill-broker') {
        const started = Date.now();
        await fire(e);
        shift += Date.now() - started;
      } else if (e.kind.endsWith('-node')) {
        nodeFaults = nodeFaults.then(() => fire(e));
        pending.push(nodeFaults);
      } else {
        pending.push(fire(e));
      }
    }
    await Promise.all(pending);
    rmSync(downFile, { force: true });
    const faultsEnded = Date.now();
    say(`faults done after ${seconds(faultsEnded - t0)}; waiting for the producer and for the pipeline to come to rest (at most ${seconds(settleTimeoutMs)})`);

    // --- settle: wait until nothing moves, with progress ---
    // At rest: the work queue and tiers empty, the parked queue too (the ingester took
    // everything into the archive), the outbox sent, only held rows in the retry table.
    const watched = [queues.queue, ...queues.retryQueues];
    // Cluster: dead-lettered messages a quorum queue holds without moving them (RabbitMQ
    // 3.10 after a leader's kill -9): since when, and the replica restarts that freed them.
    const heldSince = new Map<string, number>();
    const nudges: Array<{ queue: string; leader: string; messages: number; heldMs: number }> = [];
    const runDb = db;
    const settle = async (timeoutMs: number): Promise<{ settled: boolean; lastState: string }> => {
      const deadline = Date.now() + timeoutMs;
      let quiet = 0;
      let lastProgress = 0;
      let settled = false;
      let lastState = '';
      while (Date.now() < deadline && !interrupted) {
        if (!producer.finished && !producer.running && producer.unexpectedExits.length > 0) throw new Error(`the producer died (${producer.unexpectedExits.join('; ')}); the run cannot tell what was published`);
        try {
          const [depths, lag, progress, parked] = await Promise.all([Promise.all(watched.map((q) => mgmt.queue(q))), runDb.store.outbox.lag(), runDb.progress(), mgmt.queue(queues.parkedQueue)]);
          const rows = await runDb.retryRows();
          const unheld = rows.filter((r) => r.tenant !== HELD_TENANT).length;
          const inQueues = depths.reduce((n, d) => n + d.messages, 0);
          const still = producer.finished && lag.pending === 0 && inQueues === 0 && unheld === 0 && parked.messages === 0;
          quiet = still ? quiet + 1 : 0;
          if (cluster) {
            for (const [i, q] of watched.entries()) {
              const dlx = depths[i]?.dlx ?? 0;
              if (dlx === 0) heldSince.delete(q);
              else if (!heldSince.has(q)) heldSince.set(q, Date.now());
              else if (Date.now() - (heldSince.get(q) ?? 0) > 30_000) {
                const leader = (await mgmt.quorum(q)).leader;
                if (!leader) continue;
                const heldMs = Date.now() - (heldSince.get(q) ?? 0);
                say(`  queue ${q} has held ${dlx} dead-lettered messages for ${seconds(heldMs)} without moving them; restarting its leader replica on ${leader}`);
                say(`  ${await services('cluster', 'restart-member', leader, q)}`);
                nudges.push({ queue: q, leader, messages: dlx, heldMs });
                heldSince.delete(q);
              }
            }
          }
          lastState =
            `${progress.effects}/${progress.expected} side effects` +
            `${producer.finished ? '' : ' (producer still publishing)'}, parked ${parked.messages}, work queue ${depths[0]?.messages ?? 0} (${depths[0]?.unacked ?? 0} unacked)` +
            `, tiers ${depths.slice(1).map((d) => d.messages).join('/')}${depths.some((d) => d.dlx > 0) ? ` (${depths.reduce((n, d) => n + d.dlx, 0)} dead-lettered, not yet moved by the broker)` : ''}, retry table ${rows.length} (${rows.length - unheld} held), outbox ${lag.pending} pending`;
          if (quiet >= 5) {
            settled = true;
            break;
          }
        } catch (error) {
          quiet = 0;
          lastState = `not readable right now: ${error instanceof Error ? error.message : String(error)}`;
        }
        if (Date.now() - lastProgress >= 5000) {
          lastProgress = Date.now();
          say(`  ${seconds(Date.now() - t0).padStart(6)}  ${lastState}`);
        }
        await sleep(1000);
      }
      return { settled, lastState };
    };
    const { settled, lastState } = await settle(settleTimeoutMs);
    const settledAt = Date.now();
    say(settled ? `at rest after ${seconds(settledAt - faultsEnded)}: ${lastState}` : `NOT at rest after ${seconds(settleTimeoutMs)}: ${lastState}`);

    // --- the archive: read what it holds, replay it, and come to rest again ---
    // Every parking is a row by now; the permanent failures succeed when replayed (as
    // after a fix), each must be handled once, and none parked again.
    const archiveRows = await db.archiveRows(CONSUMER);
    const effectsBefore = await db.effects();
    let replay: ArchiveFacts['replay'];
    let replayError: string | undefined;
    let replaySettled = false;
    const replayStarted = Date.now();
    if (settled && !interrupted) {
      const model = await connectAny(amqpUrls);
      model.on('error', () => undefined);
      try {
        const r = await new Archive(db.store).replay(model, queues, { filter: { consumer: CONSUMER }, actor: 'chaos run' });
        replay = { matched: r.matched, replayed: r.replayed, alreadyDone: r.alreadyDone, stopReason: r.stopReason, error: r.error };
        say(`replayed ${r.replayed} of ${archiveRows.length} archive rows (${r.alreadyDone} skipped as done, ${r.stopReason}); waiting for them to be handled`);
      } catch (error) {
        replayError = error instanceof Error ? error.message : String(error);
        say(`the replay from the archive failed: ${replayError}`);
      } finally {
        await model.close().catch(() => undefined);
      }
      if (replay) {
        const after = await settle(60_000 + args.messages * 5);
        replaySettled = after.settled;
        say(after.settled ? `at rest after the replay, ${seconds(Date.now() - replayStarted)}: ${after.lastState}` : `NOT at rest after the replay: ${after.lastState}`);
      }
    } else replayError = 'the pipeline did not come to rest first';
    const replayMs = Date.now() - replayStarted;

    // --- stop everything, then read what happened ---
    await Promise.all(children.map((c) => c.stop()));
    const [expected, effects, markers, retryRows, outbox, lag] = await Promise.all([
      db.expected(),
      db.effects(),
      db.markers(CONSUMER),
      db.retryRows(),
      db.outboxStates(),
      db.store.outbox.lag(),
    ]);
    const archiveAfter = await db.archiveRows(CONSUMER);
    const broker: BrokerState = {
      queues: await Promise.all([queues.queue, ...queues.retryQueues, queues.parkedQueue].map(async (q) => ({ name: q, ...(await mgmt.queue(q)) }))),
      parked: await readParked(amqpUrls, queues.parkedQueue),
    };
    const consumerTotals: Record<string, number> = {};
    for (const c of consumers) for (const [k, v] of Object.entries(c.totals())) consumerTotals[k] = (consumerTotals[k] ?? 0) + v;
    const facts: RunFacts = {
      seed: args.seed,
      messages: args.messages,
      brokerLabel: cluster ? `a cluster of three RabbitMQ ${brokerVersion} nodes, quorum queues` : `RabbitMQ ${brokerVersion}`,
      storeLabel: postgres ? 'PostgreSQL 15' : 'SQLite',
      expected,
      effects,
      markers,
      retryRows,
      outbox,
      outboxLag: lag,
      broker,
      archive: { rows: archiveRows, effectsBefore, replay, ...(replayError === undefined ? {} : { replayError }), replaySettled, after: archiveAfter, ingesterTotals: { ...ingester.totals(), midBatchKills: ingester.armedDeaths } },
      produced: producer.produced,
      settled,
      faults: done.map((d) => ({ kind: d.event.kind, ok: d.ok, detail: d.detail, tookMs: d.tookMs, at: d.at })),
      unexpectedExits: children.flatMap((c) => c.unexpectedExits),
      restarts: Object.fromEntries(children.map((c) => [c.name, c.startedAt.length - 1])),
      consumerTotals,
      relayTotals: relay.totals(),
      schedulerTotals: scheduler.totals(),
      failovers,
      ...(cluster ? { heldDeadLetters: nudges } : {}),
      timings: { faultsMs: faultsEnded - t0, settleMs: settledAt - faultsEnded, replayMs, totalMs: Date.now() - runStarted },
    };
    const result = check(facts);
    process.stdout.write(`\n${renderReport(facts, result)}\n`);
    writeFileSync(
      join(runDir, 'report.json'),
      JSON.stringify({ facts: { ...facts, effects: Object.fromEntries(effects), markers: [...markers], archive: { ...facts.archive, effectsBefore: Object.fromEntries(effectsBefore) } }, result }, null, 2),
    );
    return result.violations.length === 0 ? 0 : 1;
  } finally {
    await cleanup();
    say(`services stopped; run took ${seconds(Date.now() - runStarted)}`);
  }
}

// A bug in the run itself must not leave its broker and database running: it is printed,
// the run goes on to its cleanup, and exits 2 whatever the check said.
let internalError = false;
process.on('uncaughtException', (error) => {
  internalError = true;
  process.stderr.write(`chaos: unexpected error in the run itself: ${error.stack ?? error.message}\n`);
});

main().then(
  (code) => process.exit(internalError ? 2 : code),
  (error: unknown) => {
    process.stderr.write(`chaos: the run itself failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(2);
  },
);
