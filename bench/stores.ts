/**
 * Stores benchmark: per backend, side by side in one run,
 *
 * - messages/s through an idempotent consumer (the guard's transaction, the handler's
 *   insert in it) against the same consumer without the guard (the handler opens the
 *   same transaction itself and does the same insert): the ratio is the guard's cost,
 *   one marker insert in a transaction the handler needs anyway;
 * - outbox rows/s published by the relay with confirms and `mandatory`.
 *
 * Run alone with `npx tsx bench/stores.ts`. Needs RabbitMQ (WARREN_BENCH_AMQP_URL,
 * default amqp://guest:guest@127.0.0.1:5672) and PostgreSQL (WARREN_BENCH_PG_URL,
 * default postgres://postgres@127.0.0.1:5432/test); it works in a schema and queues of
 * its own and removes them afterwards.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { defineTopology, Warren, type Outcome, type Store, type Topology } from '../src/index.js';
import { sqliteStore, type SqliteDatabase } from '../src/store/sqlite/index.js';
import { postgresStore, type PgClient } from '../src/store/postgres/index.js';
import { AMQP_URL, deleteTopology, printRows, type BenchRow } from './report.js';

const PG_URL = process.env['WARREN_BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
/** Messages per consumer run; sized for a 2-core machine. */
const MESSAGES = Number(process.env['WARREN_BENCH_STORE_MESSAGES'] ?? 3000);
/** Outbox rows per relay run. */
const ROWS = Number(process.env['WARREN_BENCH_OUTBOX_ROWS'] ?? 10_000);

interface Backend {
  readonly name: 'sqlite' | 'postgres';
  readonly store: Store<unknown>;
  /** The handler's own write, on the transaction handle. */
  insert(tx: unknown, id: string, payload: string): Promise<void> | void;
  setup(): Promise<void>;
  teardown(): Promise<void>;
}

function sqliteBackend(): Backend {
  const dir = mkdtempSync(join(tmpdir(), 'warren-bench-'));
  const store = sqliteStore({ filename: join(dir, 'bench.db'), pruneIntervalMs: 0 });
  return {
    name: 'sqlite',
    store: store as unknown as Store<unknown>,
    insert: (tx, id, payload) => void (tx as SqliteDatabase).prepare('INSERT INTO bench_orders (id, payload) VALUES (?, ?)').run(id, payload),
    setup: async () => {
      await store.migrate();
      await store.transaction((db) => db.exec('CREATE TABLE bench_orders (id TEXT PRIMARY KEY, payload TEXT NOT NULL)'));
    },
    teardown: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function postgresBackend(): Backend {
  const schema = `warren_bench_${randomBytes(4).toString('hex')}`;
  const store = postgresStore({ connectionString: PG_URL, schema, pruneIntervalMs: 0, poolSize: 12 });
  const table = `"${schema}".bench_orders`;
  return {
    name: 'postgres',
    store: store as unknown as Store<unknown>,
    insert: async (tx, id, payload) => void (await (tx as PgClient).query(`INSERT INTO ${table} (id, payload) VALUES ($1, $2)`, [id, payload])),
    setup: async () => {
      await store.migrate();
      await store.transaction((c) => c.query(`CREATE TABLE ${table} (id text PRIMARY KEY, payload text NOT NULL)`));
    },
    teardown: async () => {
      await store.close();
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).finally(() => c.end());
    },
  };
}

/** A topology of one consumer, removed afterwards. */
function benchTopology(label: string): Topology {
  const prefix = `bench.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  return defineTopology({ exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } });
}


/** Publishes `n` messages with confirms, a window at a time. */
async function fill(warren: Warren, n: number, label: string): Promise<void> {
  const window = 500;
  for (let i = 0; i < n; i += window) {
    await Promise.all(Array.from({ length: Math.min(window, n - i) }, (_, j) => warren.publish('bench.order', { n: i + j, label, note: 'x'.repeat(64) })));
  }
}

/** Messages/s through one consumer, with or without the guard, over a pre-filled queue. */
async function consumeRate(backend: Backend, guarded: boolean, n: number): Promise<number> {
  const topology = benchTopology(`${backend.name}.${guarded ? 'guard' : 'plain'}`);
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    await fill(warren, n, guarded ? 'g' : 'p');
    const name = [...topology.consumers.keys()][0] as string;
    const store = backend.store;
    let done = 0;
    let finish!: () => void;
    let fail!: (error: unknown) => void;
    const finished = new Promise<void>((resolve, reject) => {
      finish = resolve;
      fail = reject;
    });
    const started = performance.now();
    // Every message must succeed first time: a retry would measure something else.
    const onOutcome = (o: Outcome): void => {
      if (o.kind !== 'acked') fail(new Error(`bench message ${o.messageId ?? ''} was ${o.kind}: ${'error' in o ? String(o.error) : ''}`));
      else if (++done === n) finish();
    };
    const consumer = guarded
      ? await warren.consume(name, async (p: unknown, ctx) => backend.insert(ctx.tx, ctx.messageId as string, JSON.stringify(p)), { idempotency: store.idempotency(), prefetch: 50, concurrency: 10, onOutcome })
      : await warren.consume(name, async (p: unknown, ctx) => store.transaction((tx) => backend.insert(tx, ctx.messageId as string, JSON.stringify(p))), { prefetch: 50, concurrency: 10, onOutcome });
    await finished;
    const seconds = (performance.now() - started) / 1000;
    await consumer.close();
    return n / seconds;
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

/** Outbox rows/s published by one relay with confirms, from a table of `n` pending rows. */
async function relayRate(backend: Backend, n: number): Promise<number> {
  const topology = benchTopology(`${backend.name}.outbox`);
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    const store = backend.store;
    for (let i = 0; i < n; i += 500) {
      await store.transaction(async (tx) => {
        for (let j = i; j < Math.min(n, i + 500); j++) await store.outbox.add(tx, 'bench.order', { n: j, note: 'x'.repeat(64) });
      });
    }
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 200 });
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    relay.on('pass', () => {
      if (relay.stats.published >= n) finish();
    });
    const started = performance.now();
    await relay.start();
    await finished;
    const seconds = (performance.now() - started) / 1000;
    await relay.stop();
    if (relay.stats.flagged > 0 || relay.stats.published !== n) throw new Error(`relay published ${relay.stats.published} of ${n}, flagged ${relay.stats.flagged}`);
    return n / seconds;
  } finally {
    await warren.close();
    await deleteTopology(topology);
  }
}

function mean(values: readonly number[]): number {
  return values.reduce((a, b) => a + b, 0) / values.length;
}

/** One row per figure: consumer messages/s with and without the guard, relay rows/s; per backend. */
export async function benchStores(): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const make of [sqliteBackend, postgresBackend]) {
    const backend = make();
    await backend.setup();
    try {
      // Warm up the JIT, the pool and the file; then A-B-B-A, so drift (a growing file,
      // a neighbour's load) falls on both sides alike, and average.
      await consumeRate(backend, true, 300);
      await consumeRate(backend, false, 300);
      const runs = { plain: [] as number[], guarded: [] as number[] };
      for (const guard of [false, true, true, false]) runs[guard ? 'guarded' : 'plain'].push(await consumeRate(backend, guard, MESSAGES));
      const plain = mean(runs.plain);
      const guarded = mean(runs.guarded);
      rows.push({ group: `idempotent consumer (${backend.name})`, metric: 'messages/s', warren: guarded, baseline: plain, baselineName: 'no guard', goal: '>= 0.75 (one insert more)' });
      rows.push({ group: `outbox relay (${backend.name})`, metric: 'rows/s published with confirms', warren: await relayRate(backend, ROWS) });
    } finally {
      await backend.teardown();
    }
  }
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchStores());
}
