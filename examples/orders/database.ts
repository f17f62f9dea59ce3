import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import type pg from 'pg';
import { postgresStore, type PostgresStore } from '../../src/store/postgres/index.js';
import { OrdersConfig } from './config.js';

/**
 * The service's PostgreSQL, through warren's store: its pool serves the service's own
 * queries (`store.transaction`) and warren's tables (idempotency rows, the outbox, the
 * retry table). WarrenModule closes the store, and with it the pool, on shutdown.
 */
@Injectable()
export class Database implements OnModuleInit {
  readonly store: PostgresStore<pg.PoolClient>;

  // Explicit @Inject tokens: the example also runs under tsx, which emits no decorator metadata.
  constructor(@Inject(OrdersConfig) config: OrdersConfig) {
    const url = new URL(config.databaseUrl);
    url.searchParams.set('options', `-c search_path=${config.schema}`);
    this.store = postgresStore<pg.PoolClient>({ connectionString: url.toString() });
  }

  async onModuleInit(): Promise<void> {
    await this.store.migrate();
    await this.store.transaction(async (tx) => {
      await tx.query('CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, email text NOT NULL, amount_cents integer NOT NULL, placed_at timestamptz NOT NULL DEFAULT now())');
      await tx.query('CREATE TABLE IF NOT EXISTS charges (order_id text PRIMARY KEY REFERENCES orders, amount_cents integer NOT NULL, charged_at timestamptz NOT NULL DEFAULT now())');
    });
  }
}
