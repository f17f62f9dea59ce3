/**
 * The backends the contract suite runs over, each with a fresh namespace per test (a
 * SQLite file in a temporary directory, a PostgreSQL schema), removed after the test,
 * and a way to take the database down for one store without disturbing other tests.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Database from 'better-sqlite3';
import pg from 'pg';
import { onTeardown, PG_URL } from '../../../test/helpers.js';
import type { StoreBackend } from '../index.js';
import { sleep } from '../options.js';
import { openStore, type AnyStore, type ExtraOptions, type StoreSpec } from './spec.js';
import { TcpProxy } from './tcp-proxy.js';

export const BACKENDS: readonly StoreBackend[] = ['sqlite', 'postgres'];

/** A store whose database a test can take down and bring back. */
export interface Outage {
  readonly store: AnyStore;
  down(): Promise<void>;
  up(): Promise<void>;
}

export interface Harness {
  readonly backend: StoreBackend;
  readonly spec: StoreSpec;
  /** A store on this harness's tables, closed after the test. */
  store(extra?: ExtraOptions): AnyStore;
  /** A store that can lose its database: PostgreSQL through a TCP proxy; SQLite behind another connection's write lock. */
  outage(extra?: ExtraOptions): Promise<Outage>;
}

/** A fresh namespace on `backend`, dropped after the test. */
export async function harness(backend: StoreBackend): Promise<Harness> {
  const tag = randomBytes(4).toString('hex');
  let spec: StoreSpec;
  if (backend === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'warren-store-'));
    onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
    spec = { backend, filename: join(dir, 'warren.db'), tablePrefix: `t${tag}_` };
  } else {
    const schema = `wt_${tag}`;
    spec = { backend, connectionString: PG_URL, schema, tablePrefix: 'w_' };
    onTeardown(async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await client.end();
      }
    });
  }
  const store = (extra: ExtraOptions = {}): AnyStore => {
    const s = openStore(spec, { pruneIntervalMs: 0, ...extra });
    onTeardown(() => s.close());
    return s;
  };
  return {
    backend,
    spec,
    store,
    async outage(extra: ExtraOptions = {}): Promise<Outage> {
      if (spec.backend === 'postgres') {
        const proxy = await TcpProxy.start(Number(new URL(PG_URL).port || 5432));
        onTeardown(() => proxy.close());
        const u = new URL(spec.connectionString);
        u.port = String(proxy.port);
        return { store: store({ connectionString: u.toString(), connectTimeoutMs: 1000, ...extra }), down: () => proxy.cut(), up: () => proxy.restore() };
      }
      const s = store({ busyTimeoutMs: 100, ...extra });
      await s.migrate();
      const locker = new Database(spec.filename, { timeout: 0 });
      onTeardown(async () => void locker.close());
      return {
        store: s,
        // Takes the write lock between the store's transactions, polling so this
        // process's event loop (which runs the store) keeps going.
        async down() {
          for (;;) {
            try {
              locker.exec('BEGIN IMMEDIATE');
              return;
            } catch (error) {
              if (!/SQLITE_BUSY/.test(String((error as { code?: string }).code))) throw error;
              await sleep(2);
            }
          }
        },
        async up() {
          if (locker.inTransaction) locker.exec('ROLLBACK');
        },
      };
    },
  };
}
