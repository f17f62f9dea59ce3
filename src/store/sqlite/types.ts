/** The public types of the SQLite store (`warren/sqlite`). */
import type { Outbox, OutboxAddOptions, OutboxReceipt, Store, StoreGuard, StoreOptions } from '../index.js';
import type { SqliteDatabase } from './driver.js';

/** Options of {@link sqliteStore}. */
export interface SqliteStoreOptions<DB extends SqliteDatabase = SqliteDatabase> extends StoreOptions {
  /**
   * The database file, created if missing (its directory must exist). Opened in WAL mode.
   * @default 'warren.db'
   */
  filename?: string;
  /**
   * An open better-sqlite3 `Database` to use instead of `filename`, e.g. the one your
   * app writes to, so handlers get it with its full type. The store leaves its pragmas
   * alone (use WAL for several processes) and never closes it.
   */
  database?: DB;
  /**
   * How long a transaction waits to start before the store reports the database
   * unavailable (the consumer then holds the message and tries again): for this store's
   * connection, busy with another transaction of this process, and then for another
   * process's write lock.
   * @default 5000
   */
  busyTimeoutMs?: number;
  /**
   * `PRAGMA synchronous` of a database the store opens. `FULL` makes a commit durable
   * before the message is acked; `NORMAL` is faster and can lose the last commits
   * (never corrupt the file) on power loss, not on a process crash.
   * @default 'FULL'
   */
  synchronous?: 'FULL' | 'NORMAL';
}

/**
 * The SQLite outbox: {@link Outbox} plus `addSync`. `add` and `addSync` insert a row on
 * the handle you pass, inside whatever transaction is open on it; the row is published
 * once that commits.
 */
export interface SqliteOutbox<DB extends SqliteDatabase = SqliteDatabase> extends Outbox<DB> {
  /**
   * `add` for synchronous code, e.g. inside better-sqlite3's own `db.transaction(fn)`.
   * The store must have been used (or migrated) before, so the table exists.
   *
   * @example
   * db.transaction(() => {
   *   db.prepare('UPDATE orders SET state = ? WHERE id = ?').run('paid', id);
   *   store.outbox.addSync(db, 'order.paid', { orderId: id });
   * })();
   */
  addSync(tx: DB, routingKey: string, payload: unknown, options?: OutboxAddOptions): OutboxReceipt;
}

/**
 * A SQLite store, from {@link sqliteStore}: the idempotency guard, the outbox and its
 * relay, the retry table, pruning and migrations, in one database file. `DB` is what
 * handlers get as `context.tx`: the better-sqlite3 `Database` inside BEGIN IMMEDIATE.
 */
export interface SqliteStore<DB extends SqliteDatabase = SqliteDatabase> extends Store<DB> {
  readonly backend: 'sqlite';
  /** The database file, or `'(given database)'` when the store was given `database`. */
  readonly filename: string;
  readonly outbox: SqliteOutbox<DB>;
  /**
   * The guard for `warren.consume(name, handler, { idempotency: store.idempotency() })`.
   * Each delivery runs in BEGIN IMMEDIATE … COMMIT on the store's connection, one at a
   * time; the handler gets the connection as `context.tx` and must use only it.
   */
  idempotency(): StoreGuard<DB>;
}
