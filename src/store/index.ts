/**
 * The store interface shared by the SQLite and PostgreSQL backends. Nothing here loads a
 * database driver: the backends live in their own entry points (`warren/sqlite`,
 * `warren/postgres`) and load `better-sqlite3` or `pg` only when used.
 */
import type { ActionLog } from '../audit/entry.js';
import type { ConsumerControl } from '../breaker/control.js';
import type { BreakerShare } from '../breaker/share.js';
import type { IdempotencyGuard } from '../consume/types.js';
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- for the {@link}s in doc comments below, which TypeDoc and editors resolve through imports
import type { StoreSchemaError, StoreUnavailableError } from '../errors.js';
import type { PublishOptions } from '../publish/publisher.js';
import type { RetryTable } from '../retry-table/index.js';
import type { ArchiveStore } from './archive.js';
import type { OutboxRelay, OutboxRelayOptions } from './outbox-relay.js';
import type { GuardStats, MigrationReport, OutboxFailure, OutboxLag, OutboxReceipt, PruneOptions, PruneResult, StoreBackend, StoreTables } from './types.js';

export * from './types.js';
export * from './archive.js';
export { OutboxRelay, type OutboxRelayOptions, type OutboxPublisher, type RelayPass, type RelayStats } from './outbox-relay.js';
export { StoreBusyError, TransactionClosedError } from './transaction.js';
export { outboxRecord, outgoingMessage, type OutboxRecord, type OutboxRow, type RelaySource } from './outbox-message.js';

/** The guard a store gives to `warren.consume(name, handler, { idempotency })`. */
export interface StoreGuard<Tx> extends IdempotencyGuard<Tx> {
  /** Running totals; duplicates are also counted in `consumer.stats.duplicate`. */
  readonly stats: Readonly<GuardStats>;
}

/** Options of {@link Outbox.add}: the same as `Publisher.publish`'s. */
export type OutboxAddOptions = PublishOptions;

/**
 * The transactional outbox: publish from inside your own transaction. The row commits or
 * rolls back with your writes; a relay publishes committed rows with confirms.
 */
export interface Outbox<Tx> {
  /**
   * Adds a message to the outbox inside `tx`, stamped like `Publisher.publish` stamps it
   * (message id, `warren-occurred-at`, JSON, persistent, timestamp).
   *
   * @example
   * await store.transaction(async (tx) => {
   *   await tx.query('UPDATE orders SET state = $1 WHERE id = $2', ['paid', id]);
   *   await store.outbox.add(tx, 'order.paid', { orderId: id });
   * });
   */
  add(tx: Tx, routingKey: string, payload: unknown, options?: OutboxAddOptions): Promise<OutboxReceipt>;
  /** Pending rows and the age of the oldest. */
  lag(): Promise<OutboxLag>;
  /** Rows flagged as unpublishable, oldest first. */
  failed(limit?: number): Promise<OutboxFailure[]>;
  /**
   * Clears the flag of failed rows (all, or those ids) so the relay tries them again,
   * e.g. after the missing binding was added. Returns how many were released.
   */
  release(ids?: readonly string[]): Promise<number>;
}

/**
 * A store: the idempotency guard, the outbox and its relay, pruning and migrations, over
 * one database. `Tx` is the backend's own transaction handle: a `pg` client inside
 * BEGIN, or the better-sqlite3 `Database` inside BEGIN IMMEDIATE.
 */
export interface Store<Tx> {
  readonly backend: StoreBackend;
  readonly tables: StoreTables;
  /**
   * Applies pending schema migrations; idempotent, and safe when several processes start
   * at once (a PostgreSQL advisory lock, a SQLite write lock).
   */
  migrate(): Promise<MigrationReport>;
  /**
   * The guard for `warren.consume(name, handler, { idempotency: store.idempotency() })`:
   * each delivery runs in a transaction that inserts its `(message_id, consumer)` marker
   * first; the handler gets the transaction as `context.tx`.
   */
  idempotency(): StoreGuard<Tx>;
  /**
   * Which of `messageIds` have an idempotency marker for `consumer`: their handler ran and
   * committed. A canary replay reads this as proof that a replayed message succeeded.
   */
  processed(consumer: string, messageIds: readonly string[]): Promise<Set<string>>;
  /** The record of operators' actions (replays, purges, releases), in this database: append-only, never pruned. */
  readonly actions: ActionLog;
  /**
   * Hand pauses of consumers, for every process: a consumer given `control: store.control`
   * follows its row here (see docs/breaker.md).
   */
  readonly control: ConsumerControl;
  /**
   * Breaker state shared between processes: a consumer given `breaker: { share:
   * store.breakers }` stops taking messages when another process's breaker opens for it,
   * and consumes again when one of them sees a probe succeed.
   */
  readonly breakers: BreakerShare;
  /**
   * The failure archive's tables: every parked message, one row per parking (see
   * docs/archive.md). An ingester fills them (`Warren.connect({ archive })`, or
   * `warren archive`); `new Archive(store)` reads and acts on them.
   */
  readonly archive: ArchiveStore;
  /**
   * Runs `work` in a transaction and commits it, or rolls back and rethrows. Throws
   * {@link StoreUnavailableError} when the database cannot be reached.
   */
  transaction<R>(work: (tx: Tx) => Promise<R> | R): Promise<R>;
  readonly outbox: Outbox<Tx>;
  /**
   * The retry table: messages a handler asked to wait for a condition or a person (see
   * the consumer's `retryTable` option), with operator controls, a scheduler and health checks.
   */
  readonly retryTable: RetryTable;
  /** A relay that publishes this store's outbox; call `start()` on it. */
  relay(options: OutboxRelayOptions): OutboxRelay;
  /**
   * Deletes markers and sent outbox rows older than the retention, and retry-table
   * history older than its own retention, in batches. The
   * store also does this on a schedule (`pruneIntervalMs`).
   */
  prune(options?: PruneOptions): Promise<PruneResult>;
  /** Stops the pruning schedule and this store's relays, then closes what the store opened. */
  close(): Promise<void>;
}
