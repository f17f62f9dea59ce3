import { Inject, Injectable, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import pg from 'pg';
import { postgresStore, type PostgresStore } from '../../src/store/postgres/index.js';
import { ShopConfig } from './config.js';

/**
 * The shop's PostgreSQL pool and warren's store on it: handlers that run under the
 * store's idempotency guard get a `pg.PoolClient` inside the guard's transaction.
 */
@Injectable()
export class ShopDatabase implements OnModuleInit, OnApplicationShutdown {
  readonly pool: pg.Pool;
  readonly store: PostgresStore<pg.PoolClient>;
  private closed = false;

  // Explicit @Inject tokens throughout the example: it also runs under tsx (esbuild),
  // which emits no decorator metadata for Nest to read constructor types from.
  constructor(@Inject(ShopConfig) config: ShopConfig) {
    this.pool = new pg.Pool({ connectionString: config.databaseUrl, options: `-c search_path=${config.schema}` });
    this.pool.on('error', () => undefined); // an idle client's error; the next query reports it
    this.store = postgresStore<pg.PoolClient>({ pool: this.pool });
  }

  async onModuleInit(): Promise<void> {
    await this.pool.query('CREATE TABLE IF NOT EXISTS receipts (order_id text PRIMARY KEY, amount integer NOT NULL, charge_id text NOT NULL, message_id text NOT NULL)');
    await this.store.migrate();
  }

  /** After WarrenModule drained its consumers (beforeApplicationShutdown): no handler needs the pool now. */
  async onApplicationShutdown(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.store.close();
    await this.pool.end();
  }
}
