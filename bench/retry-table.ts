/**
 * Retry-table benchmark: per backend, side by side in one run,
 *
 * - drain-rate accuracy: N due rows, a scheduler at 50 rows/s, and the rate at which
 *   they reach a plain consumer, from the first arrival to the last, beside the
 *   configured 50 (the ratio is the accuracy); and the most arrivals in any 1-second
 *   window, which the token bucket keeps at the rate plus one batch;
 * - drain throughput: M due rows and a scheduler with no rate limit, rows/s from its
 *   start until the consumer has them all, beside the outbox relay alone publishing M
 *   outbox rows to the same queue: the ratio is what moving rows from the table into
 *   the outbox costs on top of the relay.
 *
 * Run alone with `npx tsx bench/retry-table.ts`. Needs RabbitMQ (WARREN_BENCH_AMQP_URL,
 * default amqp://guest:guest@127.0.0.1:5672) and PostgreSQL (WARREN_BENCH_PG_URL,
 * default postgres://postgres@127.0.0.1:5432/test); it works in a schema, a temporary
 * SQLite file and queues of its own and removes them afterwards.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { defineTopology, Warren, type Store, type Topology } from '../src/index.js';
import type { RetryRowInput } from '../src/retry-table/index.js';
import { sqliteStore } from '../src/store/sqlite/index.js';
import { postgresStore } from '../src/store/postgres/index.js';
import { AMQP_URL, deleteTopology, printRows, type BenchRow } from './report.js';

const PG_URL = process.env['WARREN_BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
/** Rows drained at the configured rate; at 50/s, 300 rows take six seconds. */
const PACED_ROWS = Number(process.env['WARREN_BENCH_RETRY_PACED_ROWS'] ?? 300);
/** The configured rate of the paced drain, rows/s. */
const RATE = Number(process.env['WARREN_BENCH_RETRY_RATE'] ?? 50);
/** Rows drained with no rate limit (and outbox rows the relay publishes alone); sized for a 2-core machine. */
const DRAIN_ROWS = Number(process.env['WARREN_BENCH_RETRY_DRAIN_ROWS'] ?? 10_000);
/** A run that sees no arrival for this long has stalled: fail rather than hang. */
const STALL_MS = 30_000;

interface Backend {
  readonly name: 'sqlite' | 'postgres';
  readonly store: Store<unknown>;
  /** Inserts due rows in one transaction with the backend's SQL: setup for the throughput run, kept out of its time. */
  insertMany(rows: readonly RetryRowInput[]): Promise<void>;
  teardown(): Promise<void>;
}

const COLUMNS = 'message_id, correlation_id, consumer, queue, parked_queue, exchange, routing_key, content, properties, attempt, next_attempt_at, last_error, error_class, dependency, tenant, paused, created_at, updated_at';

async function sqliteBackend(): Promise<Backend> {
  const dir = mkdtempSync(join(tmpdir(), 'warren-bench-'));
  const store = sqliteStore({ filename: join(dir, 'bench.db'), pruneIntervalMs: 0 });
  await store.migrate();
  return {
    name: 'sqlite',
    store: store as unknown as Store<unknown>,
    insertMany: (rows) =>
      store.transaction((db) => {
        const insert = db.prepare(`INSERT INTO ${store.tables.retry} (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)`);
        const now = Date.now();
        for (const r of rows) {
          insert.run(r.messageId, r.correlationId, r.consumer, r.queue, r.parkedQueue, r.exchange, r.routingKey, r.content, r.properties, r.attempt, r.nextAttemptAt?.getTime() ?? null, r.lastError, r.errorClass, r.dependency, r.tenant, now, now);
        }
      }),
    teardown: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function postgresBackend(): Promise<Backend> {
  const schema = `warren_bench_${randomBytes(4).toString('hex')}`;
  const store = postgresStore({ connectionString: PG_URL, schema, pruneIntervalMs: 0 });
  const teardown = async (): Promise<void> => {
    await store.close();
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).finally(() => c.end());
  };
  try {
    await store.migrate();
  } catch (error) {
    await teardown();
    throw error;
  }
  return {
    name: 'postgres',
    store: store as unknown as Store<unknown>,
    // One statement: the rows as one JSON array, unpacked by PostgreSQL.
    insertMany: (rows) =>
      store.transaction(async (c) => {
        const json = JSON.stringify(rows.map((r) => ({ ...r, properties: JSON.parse(r.properties) as unknown })));
        await c.query(
          `INSERT INTO ${store.tables.retry} (${COLUMNS})
           SELECT "messageId", "correlationId", consumer, queue, "parkedQueue", exchange, "routingKey", content, properties, attempt, "nextAttemptAt", "lastError", "errorClass", dependency, tenant, false, now(), now()
           FROM jsonb_to_recordset($1::jsonb) AS x("messageId" text, "correlationId" text, consumer text, queue text, "parkedQueue" text, exchange text, "routingKey" text, content text,
             properties jsonb, attempt int, "nextAttemptAt" timestamptz, "lastError" text, "errorClass" text, dependency text, tenant text)`,
          [json],
        );
      }),
    teardown,
  };
}

/** A topology of one consumer, removed afterwards. */
function benchTopology(label: string): { topology: Topology; name: string } {
  const prefix = `bench.retry.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const name = `${prefix}.work`;
  return { topology: defineTopology({ exchange: `${prefix}.events`, consumers: { [name]: { bindings: ['bench.#'] } } }), name };
}

/** Due rows addressed to the consumer, as a handler's failure would leave them. */
function dueRows(topology: Topology, name: string, n: number, label: string): RetryRowInput[] {
  const c = topology.consumer(name);
  const due = new Date(Date.now() - 1000);
  const properties = JSON.stringify({ contentType: 'application/json', timestamp: Date.now(), headers: {} });
  return Array.from({ length: n }, (_, i) => ({
    messageId: `${label}-${i}`,
    correlationId: null,
    consumer: name,
    queue: c.queue,
    parkedQueue: c.parkedQueue,
    exchange: topology.exchange,
    routingKey: 'bench.order',
    content: JSON.stringify({ n: i, note: 'x'.repeat(64) }),
    properties,
    attempt: 1,
    nextAttemptAt: due,
    lastError: 'carrier answered 503',
    errorClass: 'CarrierDownError',
    dependency: 'carrier',
    tenant: null,
  }));
}

/** Arrival times of `n` distinct messages at a plain consumer; rejects on a duplicate or a stall. */
async function arrivals(warren: Warren, name: string, n: number, options: { prefetch?: number; concurrency?: number } = {}) {
  const times: number[] = [];
  const seen = new Set<string>();
  let finish!: () => void;
  let fail!: (error: unknown) => void;
  const done = new Promise<void>((resolve, reject) => {
    finish = resolve;
    fail = reject;
  });
  let last = performance.now();
  const watch = setInterval(() => {
    if (performance.now() - last > STALL_MS) fail(new Error(`no message for ${STALL_MS / 1000} s: ${times.length} of ${n} arrived`));
  }, 1000);
  const consumer = await warren.consume(
    name,
    (_p: unknown, ctx) => {
      const now = performance.now();
      const id = ctx.messageId as string;
      if (seen.has(id)) fail(new Error(`message ${id} arrived twice`));
      seen.add(id);
      times.push(now);
      last = now;
      if (times.length === n) finish();
    },
    options,
  );
  return {
    times,
    done: done.finally(() => clearInterval(watch)),
    close: async () => {
      clearInterval(watch);
      await consumer.close();
    },
  };
}

/** The most entries of `times` (sorted, ms) in any window of `windowMs`. */
function peak(times: readonly number[], windowMs: number): number {
  let best = 0;
  let start = 0;
  for (let end = 0; end < times.length; end++) {
    while ((times[end] as number) - (times[start] as number) > windowMs) start++;
    best = Math.max(best, end - start + 1);
  }
  return best;
}

/** Rows inserted through `store.retryTable.insert` (as a consumer does), drained at `rate`: the rate they arrive at, first to last, and the busiest second. */
async function pacedDrain(backend: Backend, n: number, rate: number): Promise<{ rate: number; peak: number; batch: number }> {
  const { topology, name } = benchTopology(`${backend.name}.paced`);
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    const table = backend.store.retryTable;
    for (const row of dueRows(topology, name, n, 'paced')) await table.insert(row);
    const got = await arrivals(warren, name, n);
    const scheduler = table.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: rate });
    try {
      await scheduler.start();
      await got.done;
    } finally {
      await scheduler.stop();
      await got.close();
    }
    const first = got.times[0] as number;
    const last = got.times[n - 1] as number;
    return { rate: (n - 1) / ((last - first) / 1000), peak: peak(got.times, 1000), batch: scheduler.batchSize };
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

/**
 * Rows/s from start until a consumer has all `n`: through a scheduler with no rate limit
 * (rows in the retry table), or through the relay alone (the same messages as outbox
 * rows, addressed to the same queue).
 */
async function drainRate(backend: Backend, n: number, via: 'scheduler' | 'relay'): Promise<number> {
  const { topology, name } = benchTopology(`${backend.name}.${via}`);
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    const store = backend.store;
    const rows = dueRows(topology, name, n, via);
    if (via === 'scheduler') await backend.insertMany(rows);
    else {
      for (let i = 0; i < n; i += 500) {
        await store.transaction(async (tx) => {
          for (const r of rows.slice(i, i + 500)) await store.outbox.add(tx, r.queue, JSON.parse(r.content), { exchange: '', messageId: r.messageId });
        });
      }
    }
    const got = await arrivals(warren, name, n, { prefetch: 100, concurrency: 20 });
    const runner =
      via === 'scheduler'
        ? store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: Infinity })
        : store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    let seconds: number;
    try {
      const started = performance.now();
      await runner.start();
      await got.done;
      seconds = (performance.now() - started) / 1000;
    } finally {
      await runner.stop();
      await got.close();
    }
    return n / seconds;
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

/** Per backend: the paced drain's rate and busiest second, and the unlimited drain's rows/s beside the relay alone. */
export async function benchRetryTable(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const make of [sqliteBackend, postgresBackend]) {
    const backend = await make();
    try {
      const paced = await pacedDrain(backend, PACED_ROWS, RATE);
      rows.push({ group: `retry-table drain at ${RATE}/s (${backend.name})`, metric: 'rows/s at the consumer', warren: paced.rate, baseline: RATE, baselineName: 'configured rate', goal: '0.95–1.05' });
      rows.push({ group: `retry-table drain at ${RATE}/s (${backend.name})`, metric: 'most rows in any 1 s', warren: paced.peak, baseline: RATE + paced.batch, baselineName: 'rate + one batch', goal: '<= 1.05 (arrival jitter)' });
      // Warm up the JIT, the statements and the file, then measure.
      await drainRate(backend, 500, 'relay');
      await drainRate(backend, 500, 'scheduler');
      const relay = await drainRate(backend, DRAIN_ROWS, 'relay');
      const scheduler = await drainRate(backend, DRAIN_ROWS, 'scheduler');
      rows.push({ group: `retry-table drain, no limit (${backend.name})`, metric: `rows/s of ${DRAIN_ROWS.toLocaleString('en-US')} at the consumer`, warren: scheduler, baseline: relay, baselineName: 'relay alone', goal: '>= 0.80 (one move per batch)' });
    } finally {
      await backend.teardown();
    }
  }
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchRetryTable());
}
