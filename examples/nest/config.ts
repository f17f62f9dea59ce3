/** What {@link ShopConfig} takes; anything left out gets its default. */
export interface ShopSettings {
  amqpUrl?: string | undefined;
  prefix?: string | undefined;
  paymentsUrl?: string | undefined;
  databaseUrl?: string | undefined;
  schema?: string | undefined;
  reconnectMs?: number | undefined;
}

/** The shop's settings; tests replace the provider with `overrideProvider(ShopConfig)`. */
export class ShopConfig {
  /** The broker. */
  readonly amqpUrl: string;
  /** Prefix of the exchange and queue names. */
  readonly prefix: string;
  /** The payment provider's API. */
  readonly paymentsUrl: string;
  /** PostgreSQL, for receipts and warren's idempotency rows. */
  readonly databaseUrl: string;
  /** The PostgreSQL schema the shop's tables live in. */
  readonly schema: string;
  /** First wait before reconnecting to the broker, in ms (the longest is ten times this). */
  readonly reconnectMs: number;

  constructor(values: ShopSettings = {}) {
    this.amqpUrl = values.amqpUrl ?? 'amqp://guest:guest@127.0.0.1:5672';
    this.prefix = values.prefix ?? 'shop';
    this.paymentsUrl = values.paymentsUrl ?? 'http://127.0.0.1:4010';
    this.databaseUrl = values.databaseUrl ?? 'postgres://postgres@127.0.0.1:5432/shop';
    this.schema = values.schema ?? 'public';
    this.reconnectMs = values.reconnectMs ?? 100;
  }

  /** From `SHOP_AMQP_URL`, `SHOP_PREFIX`, `SHOP_PAYMENTS_URL`, `SHOP_DATABASE_URL`, `SHOP_DB_SCHEMA`, `SHOP_RECONNECT_MS`. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): ShopConfig {
    const pick = (key: string) => env[key] || undefined;
    const reconnect = pick('SHOP_RECONNECT_MS');
    return new ShopConfig({
      amqpUrl: pick('SHOP_AMQP_URL'),
      prefix: pick('SHOP_PREFIX'),
      paymentsUrl: pick('SHOP_PAYMENTS_URL'),
      databaseUrl: pick('SHOP_DATABASE_URL'),
      schema: pick('SHOP_DB_SCHEMA'),
      reconnectMs: reconnect === undefined ? undefined : Number(reconnect),
    });
  }
}
