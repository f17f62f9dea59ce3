/** What only the SQLite backend has: a file that may not open, one shared connection, synchronous transactions. */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { StoreError, StoreUnavailableError } from '../../errors.js';
import { connectWarren, depth, onTeardown, rawConnection, testTopology, waitFor } from '../../../test/helpers.js';
import { sqliteStore } from './index.js';

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'warren-sqlite-'));
  onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function open<DB extends Database.Database>(options: Parameters<typeof sqliteStore<DB>>[0]) {
  const store = sqliteStore<DB>({ pruneIntervalMs: 0, ...options });
  onTeardown(() => store.close());
  return store;
}

describe('SQLite store', () => {
  it('reports a file it cannot open as unavailable, and opens it once it can (the embedded "restart")', async () => {
    const dir = join(tempDir(), 'not-yet');
    const store = open({ filename: join(dir, 'warren.db') });
    const guard = store.idempotency();
    const error = await guard.run('m-1', 'c', async () => undefined).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toMatch(/cannot open/);
    mkdirSync(dir);
    expect(await guard.run('m-1', 'c', async () => undefined)).toBe('done');
  });

  it('opens a new file while another connection is writing it (switching to WAL waits for the lock)', async () => {
    const file = join(tempDir(), 'w.db');
    const other = new Database(file, { timeout: 0 });
    onTeardown(async () => void other.close());
    other.exec('BEGIN IMMEDIATE');
    other.exec('CREATE TABLE app (a)');
    setTimeout(() => other.exec('COMMIT'), 150);
    const store = open({ filename: file });
    expect(await store.migrate()).toEqual({ applied: [1, 2, 3, 4, 5, 6, 7], version: 7 });
  });

  it('refuses a transaction opened inside a guarded handler instead of waiting for itself forever', async () => {
    const store = open({ filename: join(tempDir(), 'w.db') });
    const error = await store.idempotency().run('m-1', 'c', async () => {
      await store.transaction(() => undefined);
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/use the `tx` you were given/);
    // The marker rolled back with it.
    expect(await store.idempotency().run('m-1', 'c', async () => undefined)).toBe('done');
  });

  it('refuses a handler that commits the transaction itself, so the marker never commits apart from the work', async () => {
    const store = open({ filename: join(tempDir(), 'w.db') });
    const error = await store.idempotency().run('m-1', 'c', async (tx) => {
      tx.exec('COMMIT');
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreError);
    expect((error as Error).message).toMatch(/ended inside the handler/);
  });

  it('works on your own better-sqlite3 Database: handlers get it with its type, addSync works inside db.transaction(), and the store never closes it', async () => {
    const db = new Database(join(tempDir(), 'app.db'));
    onTeardown(async () => void db.close());
    db.pragma('journal_mode = WAL');
    db.exec('CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT NOT NULL)');
    const store = open({ database: db });
    await store.migrate();
    const result = await store.idempotency().run('m-1', 'orders', async (tx) => {
      // A stand-in for the database (so it can be closed when the transaction ends), with its type.
      expect(tx).toBeInstanceOf(Database);
      expect(tx.inTransaction).toBe(true);
      tx.prepare('INSERT INTO orders (id, state) VALUES (?, ?)').run(1, 'new');
      expect(tx.pragma('journal_mode', { simple: true })).toBe('wal');
    });
    expect(result).toBe('done');
    db.transaction(() => {
      db.prepare('UPDATE orders SET state = ? WHERE id = ?').run('paid', 1);
      store.outbox.addSync(db, 'order.paid', { id: 1 });
    })();
    expect(await store.outbox.lag()).toMatchObject({ pending: 1 });
    await store.close();
    expect(db.open).toBe(true);
    expect(db.prepare('SELECT state FROM orders').get()).toEqual({ state: 'paid' });
  });

  it('runs a relay that finds rows committed by another process on the same file (its poll)', async () => {
    const file = join(tempDir(), 'w.db');
    const a = open({ filename: file });
    const b = open({ filename: file });
    let queue!: string;
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [(queue = name('audit'))]: { bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const relay = a.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 30 });
    await relay.start();
    onTeardown(() => relay.stop());
    await b.transaction((tx) => b.outbox.add(tx, 'order.created', {}));
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the row from the other connection to be published', 3000);
  });

  it('does not block the event loop while another connection holds the write lock', async () => {
    const file = join(tempDir(), 'w.db');
    const store = open({ filename: file, busyTimeoutMs: 300 });
    await store.migrate();
    const locker = new Database(file);
    onTeardown(async () => void locker.close());
    locker.exec('BEGIN IMMEDIATE');
    let ticks = 0;
    const timer = setInterval(() => ticks++, 10);
    const started = Date.now();
    const error = await store.idempotency().run('m-1', 'c', async () => undefined).catch((e: unknown) => e);
    clearInterval(timer);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    // Each try of BEGIN blocks for the connection's 20 ms busy_timeout, then the store
    // sleeps: a dozen ticks of 10 ms if the loop kept running (a handful on a loaded
    // machine); a loop blocked for the whole wait gives 0 or 1.
    expect(ticks).toBeGreaterThan(2);
    locker.exec('ROLLBACK');
  });
});
