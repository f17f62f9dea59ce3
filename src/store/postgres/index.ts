/**
 * The PostgreSQL store, through node-postgres. Import it from `warren/postgres`; it loads
 * `pg` only when it creates its own pool (pass yours as `pool` to share it).
 */
import type { PgClient } from './driver.js';
import { PostgresStoreImpl } from './store.js';
import type { PostgresStore, PostgresStoreOptions } from './types.js';

export type { PgClient, PgPool, PgQueryResult, PgNotification } from './driver.js';
export { GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS, type PostgresGuardOptions } from './idempotency.js';
export type { PostgresStore, PostgresStoreOptions } from './types.js';

/**
 * Creates a PostgreSQL store. Nothing connects until first use.
 *
 * @example
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL, tablePrefix: 'warren_' });
 * // or share your app's pool, so handlers get pg's PoolClient type:
 * const store = postgresStore<PoolClient>({ pool });
 */
export function postgresStore<C extends PgClient = PgClient>(options: PostgresStoreOptions<C> = {}): PostgresStore<C> {
  return new PostgresStoreImpl<C>(options);
}
