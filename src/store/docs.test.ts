/**
 * The examples of docs/stores.md, run for real: plain SQL and Kysely on the guard's
 * transaction, on both backends, with the outbox in the same transaction. Keep them in
 * step with the document.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import { Kysely, PostgresDialect, SqliteDialect, type PostgresPool } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { connectWarren, onTeardown, PG_URL, testTopology, waitFor } from '../../test/helpers.js';
import { sqliteStore } from './sqlite/index.js';
import { postgresStore } from './postgres/index.js';

// --- from docs/stores.md, "Kysely" ------------------------------------------------

interface ShopDb {
  orders: { id: string; total: number; state: string };
}

/** A Kysely that runs every query on `tx`, inside the guard's transaction. */
function kyselyOnPg<DB>(tx: pg.PoolClient): Kysely<DB> {
  const pool = {
    connect: async () => ({ query: tx.query.bind(tx), release: () => undefined }),
    end: async () => undefined,
  } as unknown as PostgresPool;
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
}

/** A Kysely on the store's SQLite database (the `tx`), inside the guard's transaction. Never `destroy()` it: that closes the database. */
function kyselyOnSqlite<DB>(tx: Database.Database): Kysely<DB> {
  return new Kysely<DB>({ dialect: new SqliteDialect({ database: tx }) });
}

// ---------------------------------------------------------------------------------

function topology() {
  let consumer!: string;
  const t = testTopology(({ exchange, name }) => ({ exchange, consumers: { [(consumer = name('billing'))]: { bindings: ['order.*'] } } }));
  return { topology: t, consumer };
}

describe('docs/stores.md examples', () => {
  it('PostgreSQL: plain SQL and Kysely on the guard transaction, with the outbox in it', async () => {
    const schema = `wt_${randomBytes(4).toString('hex')}`;
    const pool = new pg.Pool({ connectionString: PG_URL, options: `-c search_path=${schema}` });
    pool.on('error', () => undefined);
    onTeardown(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    });
    await pool.query(`CREATE SCHEMA "${schema}"`);
    await pool.query('CREATE TABLE orders (id text PRIMARY KEY, total integer NOT NULL, state text NOT NULL)');
    const store = postgresStore<pg.PoolClient>({ pool, pruneIntervalMs: 0 });
    onTeardown(() => store.close());
    const { topology: t, consumer } = topology();
    const warren = await connectWarren(t);

    // Plain SQL
    await warren.consume(consumer, async (order: { id: string; total: number }, { tx }) => {
      await tx.query('INSERT INTO orders (id, total, state) VALUES ($1, $2, $3)', [order.id, order.total, 'new']);
      await store.outbox.add(tx, 'invoice.requested', { orderId: order.id });
    }, { idempotency: store.idempotency() });

    // Kysely
    await warren.publish('order.created', { id: 'o-1', total: 42 });
    await waitFor(async () => (await pool.query('SELECT 1 FROM orders')).rowCount === 1, 'the plain-SQL handler');
    const guard = store.idempotency();
    await guard.run('m-kysely', 'billing-kysely', async (tx) => {
      const db = kyselyOnPg<ShopDb>(tx);
      await db.updateTable('orders').set({ state: 'paid' }).where('id', '=', 'o-1').execute();
      await store.outbox.add(tx, 'order.paid', { orderId: 'o-1' });
    });
    expect((await pool.query('SELECT state FROM orders')).rows).toEqual([{ state: 'paid' }]);
    expect((await store.outbox.lag()).pending).toBe(2);
    // And it rolls back with the marker.
    await guard.run('m-kysely-2', 'billing-kysely', async (tx) => {
      await kyselyOnPg<ShopDb>(tx).updateTable('orders').set({ state: 'refunded' }).execute();
      throw new Error('refund failed');
    }).catch(() => undefined);
    expect((await pool.query('SELECT state FROM orders')).rows).toEqual([{ state: 'paid' }]);
  });

  it('SQLite: plain SQL and Kysely on the guard transaction, with the outbox in it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-docs-'));
    onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
    const store = sqliteStore<Database.Database>({ filename: join(dir, 'app.db'), pruneIntervalMs: 0 });
    onTeardown(() => store.close());
    await store.transaction((db) => db.exec('CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL, state TEXT NOT NULL)'));
    const { topology: t, consumer } = topology();
    const warren = await connectWarren(t);

    // Plain SQL
    await warren.consume(consumer, async (order: { id: string; total: number }, { tx }) => {
      tx.prepare('INSERT INTO orders (id, total, state) VALUES (?, ?, ?)').run(order.id, order.total, 'new');
      await store.outbox.add(tx, 'invoice.requested', { orderId: order.id });
    }, { idempotency: store.idempotency() });

    await warren.publish('order.created', { id: 'o-1', total: 42 });
    const count = () => store.transaction((db) => (db.prepare('SELECT count(*) AS n FROM orders').get() as { n: number }).n);
    await waitFor(async () => (await count()) === 1, 'the plain-SQL handler');

    // Kysely
    const guard = store.idempotency();
    await guard.run('m-kysely', 'billing-kysely', async (tx) => {
      const db = kyselyOnSqlite<ShopDb>(tx);
      await db.updateTable('orders').set({ state: 'paid' }).where('id', '=', 'o-1').execute();
      await store.outbox.add(tx, 'order.paid', { orderId: 'o-1' });
    });
    expect(await store.transaction((db) => db.prepare('SELECT state FROM orders').all())).toEqual([{ state: 'paid' }]);
    expect((await store.outbox.lag()).pending).toBe(2);
    await guard.run('m-kysely-2', 'billing-kysely', async (tx) => {
      await kyselyOnSqlite<ShopDb>(tx).updateTable('orders').set({ state: 'refunded' }).execute();
      throw new Error('refund failed');
    }).catch(() => undefined);
    expect(await store.transaction((db) => db.prepare('SELECT state FROM orders').all())).toEqual([{ state: 'paid' }]);
  });
});
