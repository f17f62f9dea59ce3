/**
 * The SQLite store's implementation. Users get it from `sqliteStore()` in `warren/sqlite`,
 * typed as {@link SqliteStore}; the rest of its members are for warren's own code.
 *
 * better-sqlite3 runs statements synchronously on one connection, and a handler is
 * async, so warren issues BEGIN IMMEDIATE and COMMIT itself and lets one transaction
 * run at a time on the store's connection (a FIFO lock); other processes on the same
 * file wait for SQLite's write lock, which warren polls without blocking the event loop.
 */
import { EventEmitter } from 'node:events';
import { ClosedError, InvalidOptionError, StoreError, StoreSchemaError } from '../../errors.js';
import type { MigrationReport, PruneOptions, PruneResult, StoreTables } from '../index.js';
import { OutboxRelay, type OutboxRelayOptions } from '../outbox-relay.js';
import { checkInt, resolveStoreOptions, sleep, type ResolvedStoreOptions } from '../options.js';
import { pruneAll, PruneSchedule } from '../prune.js';
import { insideTransaction, isInsideTransaction, Mutex, Rollback, StoreBusyError, unwrapHandle } from '../transaction.js';
import { openSqlite, type SqliteDatabase, type SqliteStatement } from './driver.js';
import { isBusy, mapError } from './errors.js';
import { SqliteIdempotencyGuard } from './idempotency.js';
import { applyMigrations, appliedVersions, LATEST } from './migrations.js';
import { SqliteBreakers } from './breakers.js';
import { SqliteControl } from './control.js';
import { SqliteActionLog } from './actions.js';
import { SqliteArchive } from './archive.js';
import { SqliteOutboxImpl, SqliteRelayDriver } from './outbox.js';
import { SqlitePruneDriver } from './prune.js';
import { SqliteRetryTableDriver } from './retry-table.js';
import { RetryTable } from '../../retry-table/index.js';
import type { SqliteInternals } from './internals.js';
import type { SqliteStore, SqliteStoreOptions } from './types.js';

/** The connection's busy_timeout: short, because better-sqlite3 waits synchronously. */
const SYNC_BUSY_MS = 20;

/**
 * The SQLite store: idempotency markers, the outbox and the retry table in one file.
 *
 * @example
 * import { sqliteStore } from 'warren/sqlite';
 * const store = sqliteStore({ filename: 'warren.db' });
 * await warren.consume('billing', async (order: Order, { tx }) => {
 *   tx.prepare('INSERT INTO charges (order_id) VALUES (?)').run(order.id);
 * }, { idempotency: store.idempotency() });
 */
export class SqliteStoreImpl<DB extends SqliteDatabase = SqliteDatabase> implements SqliteStore<DB>, SqliteInternals<DB> {
  readonly backend = 'sqlite' as const;
  readonly tables: StoreTables;
  readonly filename: string;
  readonly outbox: SqliteOutboxImpl<DB>;
  readonly retryTable: RetryTable;
  readonly actions: SqliteActionLog<DB>;
  readonly control: SqliteControl<DB>;
  readonly breakers: SqliteBreakers<DB>;
  readonly archive: SqliteArchive<DB>;
  readonly events = new EventEmitter();
  private readonly options: ResolvedStoreOptions;
  private readonly busyTimeoutMs: number;
  private readonly synchronous: 'FULL' | 'NORMAL';
  private readonly ownDatabase: boolean;
  private db: DB | undefined;
  private readying: Promise<DB> | undefined;
  private readyDone = false;
  private readonly mutex = new Mutex();
  private readonly statements = new WeakMap<SqliteDatabase, Map<string, SqliteStatement>>();
  private readonly relays = new Set<OutboxRelay>();
  private readonly pruner: PruneSchedule;
  private wakeAfterCommit = false;
  /** What holds the connection now, for the message of a caller that waited too long. */
  private holder: { readonly doing: string; readonly since: number } | undefined;
  private closed = false;

  constructor(options: SqliteStoreOptions<DB> = {}) {
    this.options = resolveStoreOptions(options);
    if (options.database !== undefined && options.filename !== undefined) throw new InvalidOptionError('filename', 'give `filename` or `database`, not both');
    if (options.database !== undefined && typeof options.database?.prepare !== 'function') throw new InvalidOptionError('database', 'expected an open better-sqlite3 Database');
    if (options.filename !== undefined && (typeof options.filename !== 'string' || options.filename === '')) throw new InvalidOptionError('filename', 'expected a file path (or ":memory:")');
    if (options.synchronous !== undefined && options.synchronous !== 'FULL' && options.synchronous !== 'NORMAL') throw new InvalidOptionError('synchronous', `${JSON.stringify(options.synchronous)} is not 'FULL' or 'NORMAL'`);
    this.busyTimeoutMs = checkInt(options.busyTimeoutMs, 5000, 'busyTimeoutMs', 0, 600_000);
    this.synchronous = options.synchronous ?? 'FULL';
    this.ownDatabase = options.database === undefined;
    this.db = options.database;
    this.filename = options.filename ?? (options.database ? '(given database)' : 'warren.db');
    const p = this.options.tablePrefix;
    this.tables = Object.freeze({
      processed: `"${p}processed"`,
      outbox: `"${p}outbox"`,
      migrations: `"${p}migrations"`,
      retry: `"${p}retry"`,
      retryHolds: `"${p}retry_holds"`,
      retryAudit: `"${p}retry_audit"`,
      actions: `"${p}actions"`,
      archive: `"${p}archive"`,
      archivePayload: `"${p}archive_payload"`,
      archiveHeaders: `"${p}archive_headers"`,
      archiveGroups: `"${p}archive_groups"`,
      archiveSearch: `"${p}archive_search"`,
      control: `"${p}consumer_control"`,
      breakers: `"${p}breaker_state"`,
    });
    this.outbox = new SqliteOutboxImpl<DB>(this);
    this.actions = new SqliteActionLog<DB>(this);
    this.control = new SqliteControl<DB>(this);
    this.breakers = new SqliteBreakers<DB>(this);
    this.archive = new SqliteArchive<DB>(this);
    this.retryTable = new RetryTable({ driver: new SqliteRetryTableDriver<DB>(this), relay: (o) => this.relay(o), logger: this.options.logger });
    this.pruner = new PruneSchedule(() => this.prune(), this.options.pruneIntervalMs, this.options.logger, 'sqlite');
  }

  get isReady(): boolean {
    return this.readyDone;
  }

  /** Opens the file and applies (or checks) migrations, once; a failure is retried on the next call. */
  ready(): Promise<DB> {
    if (this.closed) return Promise.reject(new ClosedError('The SQLite store'));
    this.readying ??= (async () => {
      const db = await this.connection();
      if (this.options.migrate) await this.migrateOn(db);
      else await this.checkSchema(db);
      this.readyDone = true;
      this.pruner.start();
      return db;
    })().catch((error: unknown) => {
      this.readying = undefined;
      throw error;
    });
    return this.readying;
  }

  private async connection(): Promise<DB> {
    if (this.db) return this.db;
    const db = (await openSqlite(this.filename, { syncBusyMs: SYNC_BUSY_MS })) as DB;
    try {
      if (!db.memory) {
        // Switching a new file to WAL needs a lock another process starting now may hold.
        await this.whileBusy(() => db.exec('PRAGMA journal_mode = WAL'), 'switch to WAL');
        db.exec(`PRAGMA synchronous = ${this.synchronous}`);
      }
    } catch (error) {
      db.close();
      throw mapError(error, 'be set up', this.filename);
    }
    if (this.closed) {
      db.close();
      throw new ClosedError('The SQLite store');
    }
    this.db = db;
    return db;
  }

  statement(handle: SqliteDatabase, sql: string): SqliteStatement {
    // A handler's `tx` is a stand-in for the connection: cache by the connection itself.
    const db = unwrapHandle(handle);
    let cache = this.statements.get(db);
    if (!cache) this.statements.set(db, (cache = new Map()));
    let stmt = cache.get(sql);
    if (!stmt) cache.set(sql, (stmt = db.prepare(sql)));
    return stmt;
  }

  async migrate(): Promise<MigrationReport> {
    const db = await this.connection();
    return this.migrateOn(db);
  }

  private migrateOn(db: DB): Promise<MigrationReport> {
    return this.exclusive(
      db,
      () =>
        applyMigrations(
          {
            exec: (sql) => db.exec(sql),
            all: (sql, ...params) => db.prepare(sql).all(...params),
            run: (sql, ...params) => void db.prepare(sql).run(...params),
          },
          this.tables,
          this.options.tablePrefix,
        ),
      'apply migrations',
    );
  }

  private async checkSchema(db: DB): Promise<void> {
    const version = await this.readOn(
      db,
      () => {
        const exists = db.prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?`).get(`${this.options.tablePrefix}migrations`);
        if (!exists) return 0;
        return Math.max(0, ...appliedVersions({ exec: () => undefined, all: (sql) => db.prepare(sql).all(), run: () => undefined }, this.tables));
      },
      'read the schema version',
    );
    if (version !== LATEST) throw new StoreSchemaError('sqlite', version, LATEST, this.tables.migrations);
  }

  async write<R>(body: (db: DB) => Promise<R> | R, doing: string): Promise<R> {
    const db = await this.ready();
    return this.exclusive(db, body, doing);
  }

  async read<R>(body: (db: DB) => R, doing: string): Promise<R> {
    const db = await this.ready();
    return this.readOn(db, body, doing);
  }

  private async readOn<R>(db: DB, body: (db: DB) => R, doing: string): Promise<R> {
    if (isInsideTransaction(this)) return body(db);
    const release = await this.lock(doing);
    try {
      return body(db);
    } catch (error) {
      throw mapError(error, doing, this.filename);
    } finally {
      release();
    }
  }

  /** BEGIN IMMEDIATE, `body`, COMMIT; rolls back on a throw. One at a time on this connection. */
  private async exclusive<R>(db: DB, body: (db: DB) => Promise<R> | R, doing: string): Promise<R> {
    if (isInsideTransaction(this)) {
      throw new StoreError(
        'sqlite',
        'A transaction of this SQLite store was opened inside another one (for example `store.transaction()` inside a guarded handler). They share one connection, so the inner one would wait for the outer forever: use the `tx` you were given.',
      );
    }
    const release = await this.lock(doing);
    try {
      if (!db.open) throw new ClosedError('The SQLite store');
      await this.begin(db, doing);
      let result: R;
      try {
        result = await insideTransaction(this, () => body(db));
      } catch (error) {
        this.rollback(db);
        if (error instanceof Rollback) return error.value as R;
        throw mapError(error, doing, this.filename);
      }
      if (!db.inTransaction) {
        throw new StoreError('sqlite', 'The transaction was ended inside the handler (COMMIT or ROLLBACK on `tx`), so warren could not commit the idempotency marker with it. Let warren commit: return normally, or throw to roll back.');
      }
      try {
        db.exec('COMMIT');
      } catch (error) {
        this.rollback(db);
        throw mapError(error, 'commit', this.filename);
      }
      if (this.wakeAfterCommit) {
        this.wakeAfterCommit = false;
        this.events.emit('outbox');
      }
      return result;
    } finally {
      release();
    }
  }

  /**
   * Takes the store's connection, waiting at most `busyTimeoutMs` for the transaction on
   * it to end (a guarded handler's transaction ends at its `timeoutMs` at the latest).
   */
  private async lock(doing: string): Promise<() => void> {
    const holder = this.holder;
    const release = await this.mutex.lock(this.busyTimeoutMs, () => {
      const now = this.holder ?? holder;
      const what = now === undefined ? 'another transaction' : `a transaction that has been running for ${Date.now() - now.since} ms (${now.doing})`;
      return new StoreBusyError(`SQLite '${this.filename}' could not ${doing}: the store's connection stayed busy with ${what} for longer than busyTimeoutMs (${this.busyTimeoutMs} ms); keep transactions short, or raise \`busyTimeoutMs\``);
    });
    this.holder = { doing, since: Date.now() };
    return () => {
      this.holder = undefined;
      release();
    };
  }

  /** BEGIN IMMEDIATE, polling (without blocking the event loop) while another process writes. */
  private begin(db: DB, doing: string): Promise<void> {
    return this.whileBusy(() => void db.exec('BEGIN IMMEDIATE'), doing);
  }

  /** Runs `fn`, again and again while the database is busy, for up to `busyTimeoutMs`. */
  private async whileBusy(fn: () => void, doing: string): Promise<void> {
    const deadline = Date.now() + this.busyTimeoutMs;
    for (let attempt = 1; ; attempt++) {
      try {
        fn();
        return;
      } catch (error) {
        if (!isBusy(error) || Date.now() >= deadline) throw mapError(error, doing, this.filename);
        await sleep(Math.min(2 * attempt, 25));
      }
    }
  }

  private rollback(db: DB): void {
    try {
      if (db.inTransaction) db.exec('ROLLBACK');
    } catch {
      // A failed rollback leaves nothing committed; SQLite rolls back on close anyway.
    }
  }

  outboxAdded(inTransaction: boolean): void {
    if (inTransaction) this.wakeAfterCommit = true;
    else this.events.emit('outbox');
  }

  idempotency(): SqliteIdempotencyGuard<DB> {
    return new SqliteIdempotencyGuard<DB>(this);
  }

  async processed(consumer: string, messageIds: readonly string[]): Promise<Set<string>> {
    const found = new Set<string>();
    if (messageIds.length === 0) return found;
    return this.read((db) => {
      // SQLite allows 999 parameters in older builds: ask in slices.
      for (let i = 0; i < messageIds.length; i += 500) {
        const slice = messageIds.slice(i, i + 500);
        const rows = db.prepare(`SELECT message_id FROM ${this.tables.processed} WHERE consumer = ? AND message_id IN (${slice.map(() => '?').join(', ')})`).all(consumer, ...slice) as Array<{ message_id: string }>;
        for (const r of rows) found.add(r.message_id);
      }
      return found;
    }, 'read idempotency markers');
  }

  /**
   * Runs `work` inside BEGIN IMMEDIATE … COMMIT on the store's connection, one
   * transaction at a time. `work` may be async; use only `tx` inside it.
   */
  transaction<R>(work: (tx: DB) => Promise<R> | R): Promise<R> {
    return this.write(work, 'run a transaction');
  }

  relay(options: OutboxRelayOptions): OutboxRelay {
    if (this.closed) throw new ClosedError('The SQLite store');
    const relay = new OutboxRelay(new SqliteRelayDriver<DB>(this), options);
    this.relays.add(relay);
    return relay;
  }

  prune(options: PruneOptions = {}): Promise<PruneResult> {
    return pruneAll(new SqlitePruneDriver<DB>(this), this.options, options);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pruner.stop();
    await Promise.all([...this.relays].map((r) => r.stop()));
    // Wait for transactions in progress, then close a database the store opened.
    const release = await this.mutex.lock();
    try {
      if (this.ownDatabase && this.db?.open) this.db.close();
    } finally {
      release();
    }
  }
}
