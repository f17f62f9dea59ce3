/**
 * The SQLite store: one database file, no server. Import it from `warren/sqlite`; it loads
 * `better-sqlite3` the first time the store is used.
 *
 * better-sqlite3 runs statements synchronously on one connection, and a handler is
 * async, so warren issues BEGIN IMMEDIATE and COMMIT itself and lets one transaction
 * run at a time on the store's connection (a FIFO lock); other processes on the same
 * file wait for SQLite's write lock, which warren polls without blocking the event loop.
 */
import type { SqliteDatabase } from './driver.js';
import { SqliteStoreImpl } from './store.js';
import type { SqliteStore, SqliteStoreOptions } from './types.js';

export type { SqliteDatabase, SqliteStatement } from './driver.js';
export type { SqliteOutbox, SqliteStore, SqliteStoreOptions } from './types.js';

/**
 * Creates a SQLite store. Nothing is opened until first use.
 *
 * @example
 * const store = sqliteStore({ filename: 'warren.db', tablePrefix: 'warren_' });
 * await store.migrate(); // optional: the first use migrates too
 */
export function sqliteStore<DB extends SqliteDatabase = SqliteDatabase>(options: SqliteStoreOptions<DB> = {}): SqliteStore<DB> {
  return new SqliteStoreImpl<DB>(options);
}
