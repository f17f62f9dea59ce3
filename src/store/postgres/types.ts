/** The public types of the PostgreSQL store (`warren/postgres`). */
import type { Store, StoreGuard, StoreOptions } from '../index.js';
import type { PgClient, PgPool } from './driver.js';
import type { PostgresGuardOptions } from './idempotency.js';

/** Options of {@link postgresStore}. */
export interface PostgresStoreOptions<C extends PgClient = PgClient> extends StoreOptions {
  /**
   * A node-postgres `Pool` to share with your app: handlers then get its `PoolClient`.
   * The store never ends a pool you pass; give it an `error` listener, as pg asks.
   */
  pool?: PgPool<C>;
  /**
   * Connection string of a pool the store creates (and ends on `close()`).
   * @default process.env.DATABASE_URL
   */
  connectionString?: string;
  /**
   * Size of a pool the store creates. A running relay keeps one connection for LISTEN.
   * @default 10
   */
  poolSize?: number;
  /**
   * How long to wait for a connection of a pool the store creates before reporting the
   * database unavailable.
   * @default 5000
   */
  connectTimeoutMs?: number;
  /**
   * Schema of warren's tables, created if missing.
   * @default the connection's search_path (usually `public`)
   */
  schema?: string;
  /**
   * NOTIFY relays when an outbox row is added, so they publish at once instead of at
   * their next poll. Costs a notification per insert at commit.
   * @default true
   */
  notify?: boolean;
}

/**
 * A PostgreSQL store, from {@link postgresStore}: the idempotency guard, the outbox and
 * its relay, the retry table, pruning and migrations, in your database. `C` is what
 * handlers get as `context.tx`: a pooled `pg` client inside BEGIN.
 */
export interface PostgresStore<C extends PgClient = PgClient> extends Store<C> {
  readonly backend: 'postgres';
  /**
   * The guard for `warren.consume(name, handler, { idempotency: store.idempotency() })`:
   * each delivery runs in a transaction on a pooled connection that takes the message's
   * marker first; the handler gets the connection as `context.tx`.
   * `idleInTransactionTimeoutMs` bounds how long a frozen process's guarded transaction
   * keeps its lock (see {@link PostgresGuardOptions}).
   */
  idempotency(options?: PostgresGuardOptions): StoreGuard<C>;
}
