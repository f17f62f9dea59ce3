/**
 * What the SQLite store's guard, outbox, relay driver, pruner and retry-table driver
 * use of the store: warren's own, never exported from `warren/sqlite`.
 */
import type { EventEmitter } from 'node:events';
import type { StoreTables } from '../index.js';
import type { SqliteDatabase, SqliteStatement } from './driver.js';

/** The store's own internals that its guard, outbox and pruner use. */
export interface SqliteInternals<DB extends SqliteDatabase> {
  readonly tables: StoreTables;
  readonly filename: string;
  ready(): Promise<DB>;
  readonly isReady: boolean;
  /** Runs `body` in BEGIN IMMEDIATE … COMMIT on the store's connection, one at a time. */
  write<R>(body: (db: DB) => Promise<R> | R, doing: string): Promise<R>;
  /** Runs a read on the store's connection between transactions. */
  read<R>(body: (db: DB) => R, doing: string): Promise<R>;
  statement(db: SqliteDatabase, sql: string): SqliteStatement;
  /** An outbox row was added: wake relays after the next commit (or now, outside one). */
  outboxAdded(inTransaction: boolean): void;
  readonly events: EventEmitter;
}
