/** What only the PostgreSQL backend has: a shared pool, LISTEN/NOTIFY, aborted transactions, server-side termination. */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { StoreError, StoreUnavailableError } from '../../errors.js';
import { connectWarren, depth, onTeardown, PG_URL, rawConnection, testTopology, waitFor } from '../../../test/helpers.js';
import { TcpProxy } from '../testing/tcp-proxy.js';
import { sleep } from '../options.js';
import { postgresStore, type PgClient, type PostgresStoreOptions } from './index.js';
import type { PostgresInternals } from './internals.js';

function schema(): string {
  const name = `wt_${randomBytes(4).toString('hex')}`;
  onTeardown(async () => {
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`).finally(() => c.end());
  });
  return name;
}

function open<C extends pg.PoolClient = pg.PoolClient>(options: PostgresStoreOptions<C>) {
  const store = postgresStore<C>({ pruneIntervalMs: 0, ...options });
  onTeardown(() => store.close());
  return store;
}

function pool(connectionString = PG_URL): pg.Pool {
  const p = new pg.Pool({ connectionString, max: 4 });
  p.on('error', () => undefined);
  onTeardown(() => p.end());
  return p;
}

describe('PostgreSQL store', () => {
  it('shares your pool: handlers get its PoolClient, and close() leaves the pool open', async () => {
    const p = pool();
    const store = open<pg.PoolClient>({ pool: p, schema: schema() });
    let pid = 0;
    await store.idempotency().run('m-1', 'c', async (tx) => {
      pid = (await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? 0;
    });
    expect(pid).toBeGreaterThan(0);
    await store.close();
    expect((await p.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });

  it('does not commit when the handler swallowed an error and left the transaction aborted', async () => {
    const store = open({ connectionString: PG_URL, schema: schema() });
    const guard = store.idempotency();
    const error = await guard.run('m-1', 'c', async (tx) => {
      await tx.query('SELECT * FROM no_such_table').catch(() => undefined);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/SAVEPOINT/);
    // Nothing committed: the retry runs the handler.
    expect(await guard.run('m-1', 'c', async () => undefined)).toBe('done');
  });

  it('holds (StoreUnavailableError) when the server terminates the connection in the middle of a handler, and the rerun happens once', async () => {
    const store = open({ connectionString: PG_URL, schema: schema() });
    await store.migrate();
    await store.transaction((tx) => tx.query(`CREATE TABLE ${store.tables.outbox.replace(/outbox"$/, 'effects"')} (k text PRIMARY KEY)`));
    const effects = store.tables.outbox.replace(/outbox"$/, 'effects"');
    const admin = pool();
    const guard = store.idempotency();
    const error = await guard.run('m-1', 'c', async (tx) => {
      await tx.query(`INSERT INTO ${effects} (k) VALUES ('m-1')`);
      const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      // As a server restart does: the backend is told to terminate (57P01).
      await admin.query('SELECT pg_terminate_backend($1)', [rows[0]?.pid]);
      await tx.query('SELECT 1');
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(guard.stats.unavailable).toBe(1);
    expect((await admin.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0]).toEqual({ n: 0 });
    expect(await guard.run('m-1', 'c', async (tx) => void (await tx.query(`INSERT INTO ${effects} (k) VALUES ('m-1')`)))).toBe('done');
    expect((await admin.query(`SELECT count(*)::int AS n FROM ${effects}`)).rows[0]).toEqual({ n: 1 });
  });

  it("re-LISTENs after the relay's connection drops, so it still wakes at once", async () => {
    const name = schema();
    const proxy = await TcpProxy.start(Number(new URL(PG_URL).port || 5432));
    onTeardown(() => proxy.close());
    const u = new URL(PG_URL);
    u.port = String(proxy.port);
    const relayStore = open({ connectionString: u.toString(), schema: name, connectTimeoutMs: 500 });
    const writer = open({ connectionString: PG_URL, schema: name });
    let queue!: string;
    const topology = testTopology(({ exchange, name: n }) => ({ exchange, consumers: { [(queue = n('audit'))]: { bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const relay = relayStore.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 60_000, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    await relay.start();
    onTeardown(() => relay.stop());
    await proxy.cut();
    await sleep(100);
    await proxy.restore();
    // Give the listener its reconnect (backoff from 100 ms), then write from elsewhere.
    await sleep(600);
    const conn = await rawConnection();
    await writer.transaction((tx) => writer.outbox.add(tx, 'order.created', {}));
    await waitFor(async () => (await depth(conn, queue)) === 1, 'a NOTIFY on the new LISTEN connection to wake the relay', 3000);
  });

  it('with notify off, the relay still finds rows by polling', async () => {
    const store = open({ connectionString: PG_URL, schema: schema(), notify: false });
    let queue!: string;
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [(queue = name('audit'))]: { bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 30 });
    await relay.start();
    onTeardown(() => relay.stop());
    await store.transaction((tx) => store.outbox.add(tx, 'order.created', {}));
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the polled row to be published', 3000);
  });

  it('keeps the NOTIFY channel within 63 bytes for long schema and prefix names', async () => {
    const long = `${schema()}_${'s'.repeat(20)}`;
    onTeardown(async () => {
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${long}" CASCADE`).finally(() => c.end());
    });
    const store = open({ connectionString: PG_URL, schema: long, tablePrefix: `p${'x'.repeat(38)}_` });
    // The channel name is the store's own business: read it through its internals.
    expect((store as unknown as PostgresInternals<PgClient>).listenChannel.length).toBeLessThanOrEqual(63);
    let queue!: string;
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [(queue = name('audit'))]: { bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 60_000 });
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(() => relay.stats.passes >= 1, 'the first pass');
    await store.transaction((tx) => store.outbox.add(tx, 'order.created', {}));
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the notified row to be published', 3000);
  });

  it('reports an unreachable server as unavailable within connectTimeoutMs', async () => {
    const proxy = await TcpProxy.start(Number(new URL(PG_URL).port || 5432));
    await proxy.cut();
    const u = new URL(PG_URL);
    u.port = String(proxy.port);
    const store = open({ connectionString: u.toString(), schema: 'unused', connectTimeoutMs: 300 });
    const started = Date.now();
    await expect(store.idempotency().run('m', 'c', async () => undefined)).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(Date.now() - started).toBeLessThan(3000);
  });
});
