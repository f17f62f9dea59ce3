/**
 * The plain data of the store interface: options, table names, reports. A file of its
 * own, importing nothing of warren's but the logger, so that the parts of warren a store
 * serves (the outbox relay, the retry table) can name them without importing the store.
 */
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- for the {@link}s in doc comments below, which TypeDoc and editors resolve through imports
import type { StoreSchemaError } from '../errors.js';
import type { Logger } from '../logger.js';

/** Which database a store keeps its tables in. */
export type StoreBackend = 'sqlite' | 'postgres';

/** Options every store takes, whatever its backend. */
export interface StoreOptions {
  /**
   * Prefix of warren's table names: `<prefix>processed` (idempotency markers),
   * `<prefix>outbox`, `<prefix>retry`, `<prefix>retry_holds`, `<prefix>retry_audit`,
   * `<prefix>actions`, `<prefix>archive` (with `_payload`, `_headers`, `_groups` and, on SQLite, `_search`), `<prefix>consumer_control`, `<prefix>breaker_state` and `<prefix>migrations`. Letters, digits and `_`, starting with a
   * letter or `_`, at most 40 characters.
   * @default 'warren_'
   */
  tablePrefix?: string;
  /**
   * Apply pending migrations the first time the store is used. When false, the first use
   * checks the schema instead and throws {@link StoreSchemaError} if it is behind: run
   * `store.migrate()` yourself, e.g. in a deploy step.
   * @default true
   */
  migrate?: boolean;
  /**
   * How long idempotency markers and sent outbox rows are kept. Keep it longer than the
   * longest time a message can spend in retries, in the retry table and in the parked
   * queue before a replay, or a late copy runs its handler again.
   * @default 604800000 (7 days)
   */
  retentionMs?: number;
  /**
   * How long the retry table's history (who paused, resumed, parked what) is kept.
   * @default 7776000000 (90 days)
   */
  auditRetentionMs?: number;
  /**
   * How often the store prunes old markers, sent outbox rows and retry-table history in the background,
   * from the first use on; 0 turns the schedule off (call `store.prune()` yourself).
   * @default 3600000 (1 hour)
   */
  pruneIntervalMs?: number;
  /**
   * Rows deleted per statement when pruning; each batch is its own short transaction.
   * @default 500
   */
  pruneBatchSize?: number;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/** warren's tables in this store, as quoted, qualified SQL identifiers. */
export interface StoreTables {
  /** Idempotency markers: `(message_id, consumer)` unique, with `processed_at`. */
  readonly processed: string;
  /** Outbox rows waiting for (or done with) the relay. */
  readonly outbox: string;
  /** Applied schema versions. */
  readonly migrations: string;
  /** Retry-table rows: messages waiting for a condition or a person. */
  readonly retry: string;
  /** Pauses in force by consumer, dependency, tenant or error class. */
  readonly retryHolds: string;
  /** Changes made to the retry table: who, when, what, how many rows. */
  readonly retryAudit: string;
  /** Operators' actions (replays, purges, releases…): see `src/audit`. */
  readonly actions: string;
  /** The failure archive: one row per parking of a message, its failure in columns. */
  readonly archive: string;
  /** Each archive row's headers, properties, stack and body. */
  readonly archivePayload: string;
  /** Each archive row's searchable header values. */
  readonly archiveHeaders: string;
  /** Rows per consumer, state and fingerprint: the archive's exact counts and groups. */
  readonly archiveGroups: string;
  /** SQLite's full-text index of archived bodies (FTS5); PostgreSQL indexes the payload table instead. */
  readonly archiveSearch: string;
  /** Hand pauses by consumer, followed by every running consumer given `control: store.control`. */
  readonly control: string;
  /** Shared breaker state by consumer, for consumers given `breaker: { share: store.breakers }`. */
  readonly breakers: string;
}

/** What `Store.migrate` did. */
export interface MigrationReport {
  /** Versions applied by this call, oldest first; empty when the schema was current. */
  readonly applied: readonly number[];
  /** The schema version after the call. */
  readonly version: number;
}

/** Counters of one idempotency guard. */
export interface GuardStats {
  /** Handlers that ran and committed with their marker. */
  done: number;
  /** Deliveries whose marker existed: the handler did not run. */
  duplicate: number;
  /** Handlers that threw: their writes and marker were rolled back. */
  failed: number;
  /** Runs refused because the database could not be reached. */
  unavailable: number;
  /**
   * Runs held back because the database was busy: another delivery of the same message
   * still ran (its marker is taken), or the store's connection stayed busy too long. The
   * consumer tries them again without counting an attempt.
   */
  busy: number;
}

/** What `Outbox.add` returns. */
export interface OutboxReceipt {
  /** The message id the row will be published with. */
  readonly messageId: string;
  /** The row's id (insertion order), as a string because it is a 64-bit integer. */
  readonly id: string;
}

/** How far the relay is behind. */
export interface OutboxLag {
  /** Rows waiting to be published (not sent, not flagged). */
  readonly pending: number;
  /** Age of the oldest pending row in milliseconds; 0 when none is pending. */
  readonly oldestPendingAgeMs: number;
  /** Rows flagged as unpublishable (unroutable); they wait for a person. */
  readonly failed: number;
}

/** An outbox row the relay flagged instead of retrying forever. */
export interface OutboxFailure {
  readonly id: string;
  readonly messageId: string;
  /** `null`: the relay's exchange. */
  readonly exchange: string | null;
  readonly routingKey: string;
  /** Why, e.g. the broker's `312 NO_ROUTE` with the exchange and key. */
  readonly error: string;
  readonly failedAt: Date;
  readonly attempts: number;
  /** The AMQP headers the row will be published with. */
  readonly headers: Record<string, unknown>;
  /** The body as stored (JSON text). */
  readonly body: string;
}

/** Options of `Store.prune`. */
export interface PruneOptions {
  /** Markers and sent outbox rows older than this go. @default the store's `retentionMs` */
  olderThanMs?: number;
  /** Retry-table history older than this goes. @default the store's `auditRetentionMs` */
  auditOlderThanMs?: number;
  /** @default the store's `pruneBatchSize` */
  batchSize?: number;
}

/** What one prune removed. */
export interface PruneResult {
  /** Idempotency markers deleted. */
  readonly markers: number;
  /** Sent outbox rows deleted. */
  readonly outbox: number;
  /** Retry-table history entries deleted. */
  readonly audit: number;
  /** DELETE statements run (each a short transaction of at most `batchSize` rows). */
  readonly batches: number;
}
