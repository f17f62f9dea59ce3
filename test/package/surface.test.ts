/**
 * The store entries show users the store, not its machinery. The backends' own parts
 * (guard, outbox, relay driver, retry-table driver) reach a store through an internal
 * interface with pooled connections, raw queries and a transaction that takes a
 * statement to send with BEGIN; none of that is in the types `sqliteStore()` and
 * `postgresStore()` return, nor exported from `warren/sqlite` and `warren/postgres`.
 *
 * The type assertions are checked by `tsc` (npm run typecheck), and again against the
 * packed declarations by test/package/package.test.ts.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import type { Outbox, Store, StoreGuard } from '../../src/index.js';
import * as postgres from '../../src/store/postgres/index.js';
import type { PgClient, PostgresStore } from '../../src/store/postgres/index.js';
import * as sqlite from '../../src/store/sqlite/index.js';
import type { SqliteDatabase, SqliteOutbox, SqliteStore } from '../../src/store/sqlite/index.js';

describe('warren/sqlite', () => {
  it('exports the factory and nothing else at run time', () => {
    expect(Object.keys(sqlite).sort()).toEqual(['sqliteStore']);
  });

  it('returns a store typed without its internals', async () => {
    const store = sqlite.sqliteStore({ filename: ':memory:', pruneIntervalMs: 0 });
    try {
      expectTypeOf(store).toEqualTypeOf<SqliteStore<SqliteDatabase>>();
      expectTypeOf(store).toMatchTypeOf<Store<SqliteDatabase>>();
      expectTypeOf(store.outbox).toEqualTypeOf<SqliteOutbox<SqliteDatabase>>();
      expectTypeOf(store.idempotency()).toEqualTypeOf<StoreGuard<SqliteDatabase>>();
      for (const internal of ['write', 'read', 'statement', 'ready', 'isReady', 'events', 'outboxAdded'] as const) {
        expectTypeOf<SqliteStore>().not.toHaveProperty(internal);
      }
      expectTypeOf<SqliteStore['transaction']>().parameters.toEqualTypeOf<[work: (tx: SqliteDatabase) => unknown]>();
      // The public members work as documented.
      expect(store.backend).toBe('sqlite');
      expect(store.filename).toBe(':memory:');
      expect(await store.transaction((tx) => tx.prepare('SELECT 1 AS one').get())).toEqual({ one: 1 });
    } finally {
      await store.close();
    }
  });
});

describe('warren/postgres', () => {
  it('exports the factory and the guard default at run time', () => {
    expect(Object.keys(postgres).sort()).toEqual(['GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS', 'postgresStore']);
    expect(postgres.GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS).toBe(600_000);
  });

  it('returns a store typed without its internals', async () => {
    const store = postgres.postgresStore({ connectionString: 'postgres://127.0.0.1:1/none', pruneIntervalMs: 0 });
    try {
      expectTypeOf(store).toEqualTypeOf<PostgresStore<PgClient>>();
      expectTypeOf(store).toMatchTypeOf<Store<PgClient>>();
      expectTypeOf(store.outbox).toEqualTypeOf<Outbox<PgClient>>();
      expectTypeOf(store.idempotency({ idleInTransactionTimeoutMs: 1000 })).toEqualTypeOf<StoreGuard<PgClient>>();
      for (const internal of ['withClient', 'connect', 'query', 'ready', 'isReady', 'options', 'channel', 'listenChannel'] as const) {
        expectTypeOf<PostgresStore>().not.toHaveProperty(internal);
      }
      // Not `transaction(body, doing?, first?)`: one argument, the work.
      expectTypeOf<PostgresStore['transaction']>().parameters.toEqualTypeOf<[work: (tx: PgClient) => unknown]>();
      expect(store.backend).toBe('postgres');
    } finally {
      await store.close();
    }
  });
});
