import { InvalidOptionError } from '../../errors.js';

/** A query result, as node-postgres returns it. */
export interface PgQueryResult<R> {
  rows: R[];
  rowCount: number | null;
  /** The command tag: `COMMIT` answers `ROLLBACK` when the transaction had failed. */
  command: string;
}

/** A NOTIFY message, as node-postgres delivers it. */
export interface PgNotification {
  channel: string;
  payload?: string | undefined;
}

/**
 * What warren needs from a node-postgres pool client. Described here, not imported, so
 * warren's types never require `pg` (kysely does the same); a `pg` `PoolClient` fits.
 */
export interface PgClient {
  /** Runs a query, with `$1`-style parameters. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- rows are whatever the SQL selects, as in pg itself
  query<R = any>(text: string, values?: unknown[]): Promise<PgQueryResult<R>>;
  /** Back to the pool; an error or `true` destroys the connection instead. */
  release(destroy?: boolean | Error): void;
  /** The connection failed. */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** A NOTIFY arrived on a channel this connection LISTENs to. */
  on(event: 'notification', listener: (message: PgNotification) => void): unknown;
  /** Removes an `error` listener. */
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
  /** Removes a `notification` listener. */
  removeListener(event: 'notification', listener: (message: PgNotification) => void): unknown;
}

/** What warren needs from a node-postgres `Pool`. */
export interface PgPool<C extends PgClient = PgClient> {
  /** Checks out a connection; the caller releases it. */
  connect(): Promise<C>;
  /** Closes every connection of the pool. */
  end(): Promise<void>;
}

/** Settings of a pool the store creates. */
export interface CreatePoolOptions {
  readonly connectionString: string;
  readonly max: number;
  readonly connectTimeoutMs: number;
  readonly onError: (error: Error) => void;
}

interface PgModule {
  Pool: new (config: Record<string, unknown>) => PgPool & { on(event: 'error', listener: (error: Error) => void): unknown };
}

let loaded: Promise<PgModule> | undefined;

/** Loads `pg` on first use, so a process that never uses PostgreSQL never loads it. */
async function loadDriver(): Promise<PgModule> {
  loaded ??= import('pg').then(
    (m: { default?: unknown }) => (m.default ?? m) as PgModule,
    (error: unknown) => {
      loaded = undefined;
      throw new Error(`The PostgreSQL store needs the \`pg\` package: npm install pg. (${error instanceof Error ? error.message : String(error)})`, { cause: error });
    },
  );
  return loaded;
}

/** A node-postgres pool with a connect timeout and an error listener (an idle client's error would crash the process otherwise). */
export async function createPool(options: CreatePoolOptions): Promise<PgPool> {
  if (!options.connectionString) throw new InvalidOptionError('connectionString', 'give `connectionString` or `pool`', 'Example: postgresStore({ connectionString: process.env.DATABASE_URL })');
  const { Pool } = await loadDriver();
  const pool = new Pool({
    connectionString: options.connectionString,
    max: options.max,
    connectionTimeoutMillis: options.connectTimeoutMs,
    idleTimeoutMillis: 10_000,
    application_name: 'warren',
  });
  pool.on('error', options.onError);
  return pool;
}
