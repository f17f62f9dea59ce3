import { StoreUnavailableError } from '../../errors.js';

/**
 * What warren needs from a better-sqlite3 statement. Described here, not imported, so
 * that warren's types never require `better-sqlite3` (kysely does the same).
 */
export interface SqliteStatement {
  /** Runs a write; how many rows changed, and the last rowid inserted. */
  run(...params: unknown[]): { changes: number | bigint; lastInsertRowid: number | bigint };
  /** The first row, or undefined. */
  get(...params: unknown[]): unknown;
  /** Every row. */
  all(...params: unknown[]): unknown[];
}

/** What warren needs from a better-sqlite3 `Database`; pass your own for its full type. */
export interface SqliteDatabase {
  /** Compiles one statement. */
  prepare(source: string): SqliteStatement;
  /** Runs SQL text, one statement or several, with no parameters. */
  exec(source: string): unknown;
  readonly inTransaction: boolean;
  readonly open: boolean;
  readonly memory: boolean;
  /** Closes the connection. */
  close(): unknown;
  /** Registers a function SQL can call (the archive's pattern and topic matching need it). */
  function?(name: string, options: { deterministic?: boolean; varargs?: boolean }, fn: (...args: never[]) => unknown): unknown;
}

/** Options of {@link openSqlite}. */
export interface OpenSqliteOptions {
  /** busy_timeout of the connection: kept short, since it blocks the event loop. */
  readonly syncBusyMs: number;
}

type DatabaseConstructor = new (filename: string, options?: { timeout?: number }) => SqliteDatabase;

let loaded: Promise<DatabaseConstructor> | undefined;

/** Loads better-sqlite3 on first use, so a process that never uses SQLite never loads it. */
async function loadDriver(): Promise<DatabaseConstructor> {
  loaded ??= import('better-sqlite3').then(
    (m: { default: unknown }) => m.default as DatabaseConstructor,
    (error: unknown) => {
      loaded = undefined;
      throw new Error(`The SQLite store needs the \`better-sqlite3\` package (version 12): npm install better-sqlite3. (${error instanceof Error ? error.message : String(error)})`, { cause: error });
    },
  );
  return loaded;
}

/** Opens a database file with better-sqlite3. */
export async function openSqlite(filename: string, options: OpenSqliteOptions): Promise<SqliteDatabase> {
  const Database = await loadDriver();
  try {
    return new Database(filename, { timeout: options.syncBusyMs });
  } catch (error) {
    throw new StoreUnavailableError(`SQLite cannot open '${filename}' (${error instanceof Error ? error.message : String(error)}); check that its directory exists and is writable`, { cause: error });
  }
}
