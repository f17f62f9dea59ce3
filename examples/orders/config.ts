/** What {@link OrdersConfig} takes; anything left out gets its default. */
export interface OrdersSettings {
  amqpUrl?: string | undefined;
  databaseUrl?: string | undefined;
  schema?: string | undefined;
  prefix?: string | undefined;
  mailUrl?: string | undefined;
  /** Console users, one `name:role:scrypt-hash` a line (`warren console hash-password` makes the hash). */
  consoleUsers?: string | undefined;
  /** The email consumer's delay tiers, e.g. `1s,30s,5m`. */
  emailRetry?: string | undefined;
}

/** The service's settings, from the environment; tests replace the provider. */
export class OrdersConfig {
  readonly amqpUrl: string;
  readonly databaseUrl: string;
  readonly schema: string;
  /** Prefix of the exchange and queue names, so several copies can share a broker. */
  readonly prefix: string;
  readonly mailUrl: string;
  readonly consoleUsers: string;
  readonly emailRetry: readonly string[];

  constructor(values: OrdersSettings = {}) {
    this.amqpUrl = values.amqpUrl ?? 'amqp://guest:guest@127.0.0.1:5672';
    this.databaseUrl = values.databaseUrl ?? 'postgres://postgres@127.0.0.1:5432/orders';
    this.schema = values.schema ?? 'public';
    this.prefix = values.prefix ?? 'orders';
    this.mailUrl = values.mailUrl ?? 'http://127.0.0.1:4020';
    this.consoleUsers = values.consoleUsers ?? '';
    this.emailRetry = (values.emailRetry ?? '1s,10s,1m').split(',').map((d) => d.trim());
  }

  /** From `ORDERS_AMQP_URL`, `ORDERS_DATABASE_URL`, `ORDERS_DB_SCHEMA`, `ORDERS_PREFIX`, `ORDERS_MAIL_URL`, `ORDERS_CONSOLE_USERS`, `ORDERS_EMAIL_RETRY`. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): OrdersConfig {
    const pick = (key: string) => env[key] || undefined;
    return new OrdersConfig({
      amqpUrl: pick('ORDERS_AMQP_URL'),
      databaseUrl: pick('ORDERS_DATABASE_URL'),
      schema: pick('ORDERS_DB_SCHEMA'),
      prefix: pick('ORDERS_PREFIX'),
      mailUrl: pick('ORDERS_MAIL_URL'),
      consoleUsers: pick('ORDERS_CONSOLE_USERS'),
      emailRetry: pick('ORDERS_EMAIL_RETRY'),
    });
  }
}
