/**
 * One process of a chaos run, started (and killed, and started again) by chaos/run.ts:
 *
 *   consumer   the idempotent handler: one side-effect row per message, in its transaction
 *   relay      the outbox relay: publishes the producer's rows and the scheduler's
 *   scheduler  the retry-table scheduler, with the inventory health check
 *   producer   commits the run's messages through the outbox, a few through the publisher
 *   ingester   the failure archive's ingester: moves what the consumers park into the store
 *
 * Its settings come in CHAOS_CONFIG (JSON); it reports counters to the parent over IPC
 * and stops cleanly on SIGTERM.
 */
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { PermanentError, uuidv7, WaitForConditionError, Warren, type Logger, type Outcome } from '../src/index.js';
import { ChaosDb, type DbConfig } from './db.js';
import { CONSUMER, DEPENDENCY, HELD_TENANT, planMessages, quorumTopology, topology as classicTopology, type ChaosPayload } from './plan.js';

/** What the orchestrator passes to every process. */
export interface WorkerConfig {
  readonly role: 'consumer' | 'relay' | 'scheduler' | 'producer' | 'ingester';
  /** Label in logs and in the broker's connection names, e.g. `consumer-1`. */
  readonly name: string;
  /** One node's URL, or the cluster's nodes (the connection fails over from one to the next). */
  readonly amqpUrl: string | readonly string[];
  /** A cluster run: quorum queues. */
  readonly cluster: boolean;
  readonly db: DbConfig;
  /** While this file exists, the inventory dependency is down. */
  readonly downFile: string;
  readonly messages: number;
  readonly seed: number;
  /** How long the producer spreads its messages over. */
  readonly produceMs: number;
}

/** Messages a worker sends its parent. */
export type WorkerMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'stats'; readonly stats: Readonly<Record<string, number>> }
  | { readonly type: 'produced'; readonly outbox: number; readonly publisher: number }
  /** A consumer's connection: up on a node (`host:port`), or lost. */
  | { readonly type: 'connected'; readonly node: string; readonly at: number }
  | { readonly type: 'lost'; readonly at: number }
  /**
   * While the parent watches a failover: a handler run started after a pause of 100 ms or
   * more (`pauseMs`, since the run before it; absent for the process's first run).
   */
  | { readonly type: 'handled'; readonly at: number; readonly pauseMs: number | undefined };

/** Messages the parent sends a worker. */
export type ParentMessage = 'go' | 'watch' | 'unwatch' | 'die-after-commit';

const config = JSON.parse(process.env['CHAOS_CONFIG'] ?? 'null') as WorkerConfig | null;
if (!config) throw new Error('CHAOS_CONFIG is not set: this file is started by chaos/run.ts');
const cfg: WorkerConfig = config;
const topology = cfg.cluster ? quorumTopology : classicTopology;

/** Log lines go to stdout, which the orchestrator keeps in the run's directory. */
function line(level: string, message: string, fields?: Record<string, unknown>): void {
  process.stdout.write(`${new Date().toISOString()} ${cfg.name} ${level} ${message}${fields ? ` ${JSON.stringify(fields)}` : ''}\n`);
}
const logger: Logger = {
  debug: () => undefined,
  info: (m, f) => line('info', m, f),
  warn: (m, f) => line('warn', m, f),
  error: (m, f) => line('error', m, f),
};

function report(message: WorkerMessage): void {
  if (process.connected) process.send?.(message);
}

const stopping: Array<() => Promise<void>> = [];
let stopRequested = false;
process.once('SIGTERM', () => {
  stopRequested = true;
  void (async () => {
    for (const stop of stopping.reverse()) await stop().catch((e: unknown) => line('error', 'while stopping', { error: String(e) }));
    process.exit(0);
  })();
});

function connect(): Promise<Warren> {
  return Warren.connect({
    url: typeof cfg.amqpUrl === 'string' ? cfg.amqpUrl : [...cfg.amqpUrl],
    topology,
    connectionName: `chaos ${cfg.name}`,
    // A process started while the broker restarts waits for it.
    connectTimeoutMs: 180_000,
    reconnect: { initialDelayMs: 100, maxDelayMs: 2000 },
    logger,
  });
}

async function consumer(): Promise<void> {
  const db = await ChaosDb.open(cfg.db, { poolSize: 14 });
  const counts: Record<string, number> = { runs: 0, committed: 0 };
  const warren = await connect();
  stopping.push(() => db.close(), () => warren.close());
  // What the parent needs to time a failover: where the connection is, when it was lost,
  // and, while it watches, when handler runs start.
  if (warren.connection.node) report({ type: 'connected', node: warren.connection.node.address, at: Date.now() });
  warren.connection.on('connected', (_generation: number, node: { address: string }) => report({ type: 'connected', node: node.address, at: Date.now() }));
  warren.connection.on('disconnected', () => report({ type: 'lost', at: Date.now() }));
  let watching = false;
  let lastHandled = 0;
  process.on('message', (m: ParentMessage) => {
    if (m === 'watch') watching = true;
    else if (m === 'unwatch') watching = false;
  });
  await warren.consume<ChaosPayload, unknown>(
    CONSUMER,
    async (p, ctx) => {
      counts['runs'] = (counts['runs'] ?? 0) + 1;
      const now = Date.now();
      if (watching && now - lastHandled >= 100) report({ type: 'handled', at: now, pauseMs: lastHandled > 0 ? now - lastHandled : undefined });
      lastHandled = now;
      const waits = Number(ctx.headers['warren-waits'] ?? 0);
      switch (p.kind) {
        case 'permanent':
          // Replayed from the archive once the run is at rest, as after a fix: then it succeeds.
          if (Number(ctx.headers['warren-replays'] ?? 0) < 1) throw new PermanentError(`chaos: message ${p.seq} fails for good`);
          break;
        case 'transient':
          if (ctx.attempt <= p.failures) throw new Error(`chaos: message ${p.seq} fails transiently, run ${ctx.attempt} of ${p.failures + 1}`);
          break;
        case 'held':
          if (waits < 1) throw new WaitForConditionError(DEPENDENCY, { tenant: HELD_TENANT, delayMs: 300, cause: new Error('inventory unavailable') });
          break;
        case 'wait':
          if (waits < 1 || existsSync(cfg.downFile)) throw new WaitForConditionError(DEPENDENCY, { delayMs: 300, cause: new Error('inventory unavailable') });
          break;
        case 'ok':
          break;
      }
      await db.effect(ctx.tx, ctx.messageId ?? '', CONSUMER, ctx.attempt);
      counts['committed'] = (counts['committed'] ?? 0) + 1;
    },
    {
      idempotency: db.store.idempotency(),
      retryTable: { table: db.store.retryTable, maxAttempts: 20 },
      prefetch: 20,
      concurrency: 10,
      timeoutMs: 30_000,
      onOutcome: (o: Outcome) => {
        counts[o.kind] = (counts[o.kind] ?? 0) + 1;
      },
    },
  );
  setInterval(() => report({ type: 'stats', stats: counts }), 500).unref();
  report({ type: 'ready' });
}

async function relay(): Promise<void> {
  const db = await ChaosDb.open(cfg.db, { poolSize: 4 });
  const warren = await connect();
  const r = db.store.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 100, logger });
  stopping.push(() => db.close(), () => warren.close(), () => r.stop());
  await r.start();
  setInterval(() => report({ type: 'stats', stats: { ...r.stats } }), 500).unref();
  report({ type: 'ready' });
}

async function scheduler(): Promise<void> {
  const db = await ChaosDb.open(cfg.db, { poolSize: 4 });
  const s = db.store.retryTable.scheduler({
    // The relay process publishes what the scheduler moves to the outbox (relay: false),
    // so killing the relay also holds the retry table's stream; this publisher is never used.
    publisher: { send: () => Promise.reject(new Error('the chaos scheduler runs without a relay of its own')) },
    exchange: topology.exchange,
    relay: false,
    ratePerSecond: 200,
    checks: { [DEPENDENCY]: { check: () => !existsSync(cfg.downFile), intervalMs: 200, failuresToPause: 2, timeoutMs: 1000 } },
    logger,
  });
  stopping.push(() => db.close(), () => s.stop());
  s.health?.on('pause', (e: unknown) => line('info', 'health check paused the dependency', e as Record<string, unknown>));
  s.health?.on('resume', (e: unknown) => line('info', 'health check resumed the dependency', e as Record<string, unknown>));
  await s.start();
  line('info', 'scheduler started', { health: s.health?.states() });
  report({ type: 'ready' });
  setInterval(() => report({ type: 'stats', stats: { ...s.stats, ...Object.fromEntries(Object.entries(s.health?.stats ?? {}).map(([k, v]) => [`health_${k}`, v])) } }), 500).unref();
}

async function producer(): Promise<void> {
  const db = await ChaosDb.open(cfg.db, { poolSize: 4 });
  const warren = await connect();
  stopping.push(() => db.close(), () => warren.close());
  const plan = planMessages(cfg.messages, cfg.seed);
  const batchSize = 10;
  // Production starts when every process of the run is up, together with the faults.
  const go = new Promise<void>((resolve) => process.once('message', () => resolve()));
  report({ type: 'ready' });
  await go;
  const started = Date.now();
  const direct: Promise<void>[] = [];
  let outbox = 0;
  let publisher = 0;
  for (let i = 0; i < plan.length && !stopRequested; i += batchSize) {
    // Spread evenly over produceMs; a stall (the database restarting) is caught up after.
    const due = started + (i / plan.length) * cfg.produceMs;
    if (due > Date.now()) await sleep(due - Date.now());
    const batch = plan.slice(i, i + batchSize).map((m) => ({
      seq: m.seq,
      messageId: uuidv7(),
      kind: m.kind,
      via: m.via,
      routingKey: 'order.created',
      payload: { seq: m.seq, kind: m.kind, failures: m.failures } satisfies ChaosPayload,
    }));
    for (let attempt = 1; ; attempt++) {
      try {
        await db.addBatch(batch);
        break;
      } catch (error) {
        logger.warn('could not commit a batch; trying again', { seq: batch[0]?.seq, attempt, error: String(error) });
        await sleep(Math.min(2000, 100 * attempt));
      }
    }
    for (const m of batch) {
      if (m.via === 'outbox') {
        outbox++;
        continue;
      }
      publisher++;
      // Recorded first, published after: a publish that fails goes again with the same id.
      direct.push(
        (async () => {
          for (let attempt = 1; ; attempt++) {
            try {
              await warren.publish(m.routingKey, m.payload, { messageId: m.messageId });
              return;
            } catch (error) {
              logger.warn('publish failed; publishing again with the same id', { seq: m.seq, attempt, error: String(error) });
              await sleep(Math.min(2000, 100 * attempt));
            }
          }
        })(),
      );
    }
  }
  await Promise.all(direct);
  report({ type: 'produced', outbox, publisher });
  await warren.close();
  await db.close();
  process.exit(0);
}

async function ingester(): Promise<void> {
  const db = await ChaosDb.open(cfg.db, { poolSize: 4 });
  // Told so, the process dies (SIGKILL) right after a batch's insert committed, before the
  // ingester acks it: the crash between the two that invariant 14 is about.
  let dieAfterCommit = false;
  process.on('message', (m: ParentMessage) => {
    if (m === 'die-after-commit') dieAfterCommit = true;
  });
  const tables = db.store.archive;
  const archive = new Proxy(tables, {
    get(target, prop) {
      if (prop === 'insert') {
        return async (rows: Parameters<typeof tables.insert>[0]) => {
          const result = await target.insert(rows);
          if (dieAfterCommit && result.inserted > 0) {
            line('info', 'killing itself between a committed batch and its ack', { inserted: result.inserted, messageIds: rows.map((r) => r.messageId) });
            process.kill(process.pid, 'SIGKILL');
          }
          return result;
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  // The archive's ingester in this process, on the warren's connection: insert committed
  // first, ack second; a copy that comes again after a kill is recognised and kept once.
  const warren = await Warren.connect({
    url: typeof cfg.amqpUrl === 'string' ? cfg.amqpUrl : [...cfg.amqpUrl],
    topology,
    connectionName: `chaos ${cfg.name}`,
    connectTimeoutMs: 180_000,
    reconnect: { initialDelayMs: 100, maxDelayMs: 2000 },
    logger,
    archive: { store: { archive }, retry: { initialDelayMs: 100, maxDelayMs: 2000 } },
  });
  stopping.push(() => db.close(), () => warren.close());
  const stats = () => {
    const sum: Record<string, number> = { archived: 0, duplicates: 0, batches: 0 };
    for (const s of warren.archive?.state() ?? []) {
      sum['archived'] = (sum['archived'] ?? 0) + s.archived;
      sum['duplicates'] = (sum['duplicates'] ?? 0) + s.duplicates;
      sum['batches'] = (sum['batches'] ?? 0) + s.batches;
    }
    return sum;
  };
  setInterval(() => report({ type: 'stats', stats: stats() }), 500).unref();
  report({ type: 'ready' });
}

const roles = { consumer, relay, scheduler, producer, ingester } as const;
roles[cfg.role]().catch((error: unknown) => {
  line('error', 'failed to start', { error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  process.exit(1);
});
