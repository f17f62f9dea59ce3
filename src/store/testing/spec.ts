/**
 * How a test (or a child process it spawns) opens a store on the same tables: a plain
 * JSON description, passed to children in WARREN_STORE.
 */
import type { Store, StoreOptions } from '../index.js';
import type { PgClient } from '../postgres/index.js';
import { postgresStore } from '../postgres/index.js';
import type { SqliteDatabase } from '../sqlite/index.js';
import { sqliteStore } from '../sqlite/index.js';

export type StoreSpec =
  | { readonly backend: 'sqlite'; readonly filename: string; readonly tablePrefix: string }
  | { readonly backend: 'postgres'; readonly connectionString: string; readonly schema: string; readonly tablePrefix: string };

/** Test-only knobs on top of the spec. */
export interface ExtraOptions extends Omit<StoreOptions, 'tablePrefix'> {
  busyTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Overrides the spec's connection string (e.g. through a proxy). */
  connectionString?: string;
}

export type AnyStore = Store<unknown>;

export function openStore(spec: StoreSpec, extra: ExtraOptions = {}): AnyStore {
  const { busyTimeoutMs, connectTimeoutMs, connectionString, ...common } = extra;
  if (spec.backend === 'sqlite') {
    return sqliteStore({ ...common, filename: spec.filename, tablePrefix: spec.tablePrefix, ...(busyTimeoutMs === undefined ? {} : { busyTimeoutMs }) }) as unknown as AnyStore;
  }
  return postgresStore({
    ...common,
    connectionString: connectionString ?? spec.connectionString,
    schema: spec.schema,
    tablePrefix: spec.tablePrefix,
    connectTimeoutMs: connectTimeoutMs ?? 2000,
  }) as unknown as AnyStore;
}

/** The test's own side-effect table, qualified for the spec's backend. */
export function effectsTable(spec: StoreSpec): string {
  return spec.backend === 'sqlite' ? `"${spec.tablePrefix}effects"` : `"${spec.schema}"."${spec.tablePrefix}effects"`;
}

/** Runs SQL written with `?` placeholders on a transaction handle of either backend. */
export async function exec(spec: StoreSpec, tx: unknown, sql: string, params: unknown[] = []): Promise<unknown[]> {
  if (spec.backend === 'sqlite') {
    const stmt = (tx as SqliteDatabase).prepare(sql);
    return /^\s*(SELECT|WITH)/i.test(sql) ? stmt.all(...params) : (stmt.run(...params), []);
  }
  let n = 0;
  const { rows } = await (tx as PgClient).query(sql.replace(/\?/g, () => `$${++n}`), params);
  return rows as unknown[];
}

/** Creates the side-effect table: one row per key, `n` counts the handler's runs that committed. */
export async function createEffects(spec: StoreSpec, store: AnyStore): Promise<void> {
  await store.transaction((tx) => exec(spec, tx, `CREATE TABLE IF NOT EXISTS ${effectsTable(spec)} (key TEXT PRIMARY KEY, n INTEGER NOT NULL)`));
}

/** The handler's side effect, inside its transaction. */
export function bumpEffect(spec: StoreSpec, tx: unknown, key: string): Promise<unknown> {
  return exec(spec, tx, `INSERT INTO ${effectsTable(spec)} AS e (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = e.n + 1`, [key]);
}

/** Committed side effects by key. */
export async function readEffects(spec: StoreSpec, store: AnyStore): Promise<Map<string, number>> {
  const rows = (await store.transaction((tx) => exec(spec, tx, `SELECT key, n FROM ${effectsTable(spec)}`))) as Array<{ key: string; n: number }>;
  return new Map(rows.map((r) => [r.key, Number(r.n)]));
}
