/**
 * The PostgreSQL store's implementation, through node-postgres. Users get it from
 * `postgresStore()` in `warren/postgres`, typed as {@link PostgresStore}; the rest of its
 * members are for warren's own code.
 */
import { createHash } from 'node:crypto';
import { ClosedError, InvalidOptionError, StoreError, StoreSchemaError, StoreUnavailableError } from '../../errors.js';
import type { MigrationReport, PruneOptions, PruneResult, StoreTables } from '../index.js';
import { OutboxRelay, type OutboxRelayOptions } from '../outbox-relay.js';
import { checkIdentifier, checkInt, resolveStoreOptions, type ResolvedStoreOptions } from '../options.js';
import { pruneAll, PruneSchedule } from '../prune.js';
import { Rollback, StoreBusyError } from '../transaction.js';
import { createPool, type PgClient, type PgPool, type PgQueryResult } from './driver.js';
import { isUnavailable, mapError } from './errors.js';
import { PostgresIdempotencyGuard, type PostgresGuardOptions } from './idempotency.js';
import { applyMigrations, LATEST, schemaVersion } from './migrations.js';
import { PostgresBreakers } from './breakers.js';
import { PostgresControl } from './control.js';
import { PostgresActionLog } from './actions.js';
import { PostgresArchive } from './archive.js';
import { PostgresOutbox, PostgresRelayDriver } from './outbox.js';
import { PostgresPruneDriver } from './prune.js';
import { PostgresRetryTableDriver } from './retry-table.js';
import { RetryTable } from '../../retry-table/index.js';
import { AbandonTransaction, type ClientState, type PostgresInternals } from './internals.js';
import type { PostgresStore, PostgresStoreOptions } from './types.js';

/**
 * The PostgreSQL store: idempotency markers and the outbox in your database.
 *
 * @example
 * import { postgresStore } from 'warren/postgres';
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL });
 * await warren.consume('billing', async (order: Order, { tx }) => {
 *   await tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.id]);
 * }, { idempotency: store.idempotency() });
 */
export class PostgresStoreImpl<C extends PgClient = PgClient> implements PostgresStore<C>, PostgresInternals<C> {
  readonly backend = 'postgres' as const;
  readonly tables: StoreTables;
  readonly outbox: PostgresOutbox<C>;
  readonly retryTable: RetryTable;
  readonly actions: PostgresActionLog<C>;
  readonly control: PostgresControl<C>;
  readonly breakers: PostgresBreakers<C>;
  readonly archive: PostgresArchive<C>;
  readonly channel: string | undefined;
  readonly listenChannel: string;
  readonly options: ResolvedStoreOptions;
  private readonly schema: string | undefined;
  private readonly givenPool: PgPool<C> | undefined;
  private readonly connectionString: string | undefined;
  private readonly poolSize: number;
  private readonly connectTimeoutMs: number;
  private pool: Promise<PgPool<C>> | undefined;
  private readying: Promise<PgPool<C>> | undefined;
  private readyDone = false;
  private readonly relays = new Set<OutboxRelay>();
  private readonly pruner: PruneSchedule;
  private closed = false;

  constructor(options: PostgresStoreOptions<C> = {}) {
    this.options = resolveStoreOptions(options);
    if (options.pool !== undefined && options.connectionString !== undefined) throw new InvalidOptionError('connectionString', 'give `connectionString` or `pool`, not both');
    if (options.pool !== undefined && typeof options.pool?.connect !== 'function') throw new InvalidOptionError('pool', 'expected a node-postgres Pool (an object with `connect()`)');
    if (options.notify !== undefined && typeof options.notify !== 'boolean') throw new InvalidOptionError('notify', 'expected true or false');
    this.givenPool = options.pool;
    this.connectionString = options.connectionString ?? process.env['DATABASE_URL'];
    if (this.givenPool === undefined && !this.connectionString) {
      throw new InvalidOptionError('connectionString', 'give `connectionString` or `pool` (or set DATABASE_URL)', "Example: postgresStore({ connectionString: 'postgres://user@localhost/app' })");
    }
    this.poolSize = checkInt(options.poolSize, 10, 'poolSize', 1, 1000);
    this.connectTimeoutMs = checkInt(options.connectTimeoutMs, 5000, 'connectTimeoutMs', 1, 600_000);
    this.schema = options.schema === undefined ? undefined : checkIdentifier(options.schema, 'schema');
    const p = this.options.tablePrefix;
    const q = (name: string) => (this.schema === undefined ? `"${p}${name}"` : `"${this.schema}"."${p}${name}"`);
    this.tables = Object.freeze({
      processed: q('processed'),
      outbox: q('outbox'),
      migrations: q('migrations'),
      retry: q('retry'),
      retryHolds: q('retry_holds'),
      retryAudit: q('retry_audit'),
      actions: q('actions'),
      archive: q('archive'),
      archivePayload: q('archive_payload'),
      archiveHeaders: q('archive_headers'),
      archiveGroups: q('archive_groups'),
      archiveSearch: q('archive_search'),
      control: q('consumer_control'),
      breakers: q('breaker_state'),
    });
    // A channel is an identifier (at most 63 bytes); long names are hashed to fit.
    const channel = `${this.schema === undefined ? '' : `${this.schema}.`}${p}outbox`;
    this.listenChannel = channel.length <= 63 ? channel : `warren_outbox_${createHash('sha256').update(channel).digest('hex').slice(0, 32)}`;
    this.channel = options.notify === false ? undefined : this.listenChannel;
    this.outbox = new PostgresOutbox<C>(this);
    this.actions = new PostgresActionLog<C>(this);
    this.control = new PostgresControl<C>(this);
    this.breakers = new PostgresBreakers<C>(this);
    this.archive = new PostgresArchive<C>(this);
    this.retryTable = new RetryTable({ driver: new PostgresRetryTableDriver<C>(this), relay: (o) => this.relay(o), logger: this.options.logger });
    this.pruner = new PruneSchedule(() => this.prune(), this.options.pruneIntervalMs, this.options.logger, 'postgres');
  }

  get isReady(): boolean {
    return this.readyDone;
  }

  private connectPool(): Promise<PgPool<C>> {
    if (this.givenPool) return Promise.resolve(this.givenPool);
    this.pool ??= createPool({
      connectionString: this.connectionString as string,
      max: this.poolSize,
      connectTimeoutMs: this.connectTimeoutMs,
      onError: (error) => this.options.logger.warn('an idle PostgreSQL connection failed; the pool replaces it', { error: error.message }),
    }).then(
      (pool) => pool as unknown as PgPool<C>,
      (error: unknown) => {
        this.pool = undefined;
        throw error;
      },
    );
    return this.pool;
  }

  /** Applies (or checks) migrations once; a failure is retried on the next call. */
  ready(): Promise<PgPool<C>> {
    if (this.closed) return Promise.reject(new ClosedError('The PostgreSQL store'));
    this.readying ??= (async () => {
      const pool = await this.connectPool();
      if (this.options.migrate) {
        await this.migrateWith();
      } else {
        const version = await this.withClient((c) => schemaVersion(c, this.tables), 'read the schema version', pool);
        if (version !== LATEST) throw new StoreSchemaError('postgres', version, LATEST, this.tables.migrations);
      }
      this.readyDone = true;
      this.pruner.start();
      return pool;
    })().catch((error: unknown) => {
      this.readying = undefined;
      throw error;
    });
    return this.readying;
  }

  async migrate(): Promise<MigrationReport> {
    if (this.closed) throw new ClosedError('The PostgreSQL store');
    return this.migrateWith();
  }

  private async migrateWith(): Promise<MigrationReport> {
    const pool = await this.connectPool();
    return this.withClient(
      async (c) => {
        try {
          return await applyMigrations(c, this.tables, this.options.tablePrefix, this.schema);
        } catch (error) {
          throw mapError(error, 'apply migrations');
        }
      },
      'apply migrations',
      pool,
    );
  }

  async withClient<R>(fn: (client: C, state: ClientState) => Promise<R>, doing: string, pool?: PgPool<C>): Promise<R> {
    const p = pool ?? (await this.ready());
    let client: C;
    try {
      client = await p.connect();
    } catch (error) {
      if (this.closed) throw new ClosedError('The PostgreSQL store');
      throw isUnavailable(error) ? mapError(error, `connect to ${doing}`) : error;
    }
    const state: ClientState = { broken: undefined };
    const onError = (error: Error) => {
      state.broken ??= error;
    };
    // A checked-out client with no error listener would crash the process when its connection drops.
    client.on('error', onError);
    try {
      return await fn(client, state);
    } catch (error) {
      // Busy (a twin holds the marker) is not an outage: the connection is fine.
      if (isUnavailable(error) && !(error instanceof StoreBusyError)) state.broken ??= error instanceof Error ? error : new Error(String(error));
      throw error;
    } finally {
      client.removeListener('error', onError);
      client.release(state.broken);
    }
  }

  async connect(doing: string): Promise<C> {
    const pool = await this.ready();
    try {
      return await pool.connect();
    } catch (error) {
      throw mapError(error, `connect to ${doing}`);
    }
  }

  async query<R>(client: PgClient, sql: string, values: unknown[] | undefined, doing: string): Promise<PgQueryResult<R>> {
    try {
      return await client.query<R>(sql, values);
    } catch (error) {
      throw mapError(error, doing);
    }
  }

  transaction<R>(body: (client: C, first: PgQueryResult<unknown> | undefined) => Promise<R> | R, doing = 'run a transaction', first?: string): Promise<R> {
    return this.withClient(async (client, state) => {
      // With `first`, one simple-protocol query: BEGIN and the statement share a round trip.
      const begun = await this.query<unknown>(client, first === undefined ? 'BEGIN' : `BEGIN; ${first}`, undefined, doing);
      const firstResult = first === undefined ? undefined : lastResult(begun);
      let result: R;
      try {
        result = await body(client, firstResult);
      } catch (error) {
        if (error instanceof AbandonTransaction) {
          // The handler may never settle and may have a query in flight: a ROLLBACK would
          // queue behind it. Discard the connection (PostgreSQL rolls back when it goes)
          // and cancel what still runs on it, so its locks go now.
          state.broken = toError(error.reason);
          if (error.queryInFlight) this.cancelBackend(client);
          throw error.reason;
        }
        let rollbackError: unknown;
        await client.query('ROLLBACK').catch((e: unknown) => (rollbackError = e));
        // The handler's own query failed because the connection did: an outage, not a handler failure.
        if (state.broken !== undefined || (rollbackError !== undefined && isUnavailable(rollbackError))) {
          const broken = (state.broken ??= toError(rollbackError));
          if (error instanceof StoreUnavailableError) throw error;
          throw new StoreUnavailableError(`PostgreSQL's connection failed during ${doing} (${broken.message}); the transaction was rolled back`, { cause: error });
        }
        // A connection whose ROLLBACK failed is in an unknown state: do not pool it again.
        if (rollbackError !== undefined) state.broken = toError(rollbackError);
        if (error instanceof Rollback) return error.value as R;
        throw error;
      }
      const commit = await this.query(client, 'COMMIT', undefined, `commit (${doing})`);
      if (commit.command === 'ROLLBACK') {
        throw new StoreError(
          'postgres',
          'The transaction had failed: a statement inside it raised an error that was caught, so PostgreSQL rolled everything back at COMMIT (writes and idempotency marker). Let the error propagate, or use a SAVEPOINT around the statement that may fail.',
        );
      }
      return result;
    }, doing);
  }

  /** Cancels the query running on `client`'s backend, from another connection; best effort. */
  private cancelBackend(client: C): void {
    const pid = (client as { processID?: unknown }).processID;
    if (typeof pid !== 'number') return;
    this.withClient((c) => c.query('SELECT pg_cancel_backend($1)', [pid]), 'cancel an abandoned query').catch((error: unknown) => {
      this.options.logger.warn('could not cancel the query of a timed-out handler; its connection was discarded, and PostgreSQL ends the query when it notices', { pid, error: error instanceof Error ? error.message : String(error) });
    });
  }

  /**
   * The guard; `idleInTransactionTimeoutMs` bounds how long a frozen process's guarded
   * transaction keeps its lock (see {@link PostgresGuardOptions}).
   */
  idempotency(options?: PostgresGuardOptions): PostgresIdempotencyGuard<C> {
    return new PostgresIdempotencyGuard<C>(this, options);
  }

  async processed(consumer: string, messageIds: readonly string[]): Promise<Set<string>> {
    const found = new Set<string>();
    if (messageIds.length === 0) return found;
    const doing = 'read idempotency markers';
    const rows = await this.withClient((c) => this.query<{ message_id: string }>(c, `SELECT message_id FROM ${this.tables.processed} WHERE consumer = $1 AND message_id = ANY($2::text[])`, [consumer, [...messageIds]], doing), doing);
    for (const r of rows.rows) found.add(r.message_id);
    return found;
  }

  relay(options: OutboxRelayOptions): OutboxRelay {
    if (this.closed) throw new ClosedError('The PostgreSQL store');
    const relay = new OutboxRelay(new PostgresRelayDriver<C>(this), options);
    this.relays.add(relay);
    return relay;
  }

  prune(options: PruneOptions = {}): Promise<PruneResult> {
    return pruneAll(new PostgresPruneDriver<C>(this), this.options, options);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.pruner.stop();
    await Promise.all([...this.relays].map((r) => r.stop()));
    this.closed = true;
    if (this.givenPool === undefined && this.pool) {
      const pool = await this.pool.catch(() => undefined);
      await pool?.end();
    }
  }
}

function toError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}

/** A multi-statement simple query answers with one result per statement: the last one. */
function lastResult<R>(result: PgQueryResult<R> | Array<PgQueryResult<R>>): PgQueryResult<R> {
  return Array.isArray(result) ? (result[result.length - 1] as PgQueryResult<R>) : result;
}
