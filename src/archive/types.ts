/**
 * The public types of the failure archive: ingestion from the parked queues, reading,
 * actions on rows, history and retention. The rows themselves are the store's
 * (`src/store/archive.ts`); here they are decoded for people and the console.
 */
import type { Logger } from '../logger.js';
import type { ParkedMessage } from '../park/message.js';
import type { ArchiveFilter, ArchiveSummary } from '../store/archive.js';

/** Options of an ingester: `archiveIngester()`, `Warren.connect({ archive })`, `warren archive`. */
export interface ArchiveIngestOptions {
  /**
   * The consumers whose parked queues are ingested.
   * @default every consumer of the topology
   */
  consumers?: readonly string[];
  /**
   * Messages stored per transaction (and acknowledged with one `ack`).
   * @default 500
   */
  batchSize?: number;
  /**
   * How long a batch waits to fill before it is stored anyway.
   * @default 50
   */
  maxBatchDelayMs?: number;
  /**
   * Unacknowledged deliveries held per parked queue. The default covers the two batches
   * being stored and two more filling meanwhile, so the broker does not wait on a commit.
   * @default 4 × batchSize (at most 65,535)
   */
  prefetch?: number;
  /**
   * While the database cannot take a batch, how long the ingester holds the messages
   * before giving them back to the parked queue (they wait there, and are taken again
   * once the database answers). Keep it well under the broker's `consumer_timeout`.
   * @default 30000
   */
  holdMs?: number;
  /**
   * Waits between attempts after a failure (the database, the broker): the first and the
   * longest; the wait doubles, with jitter.
   * @default { initialDelayMs: 200, maxDelayMs: 10000 }
   */
  retry?: { initialDelayMs?: number; maxDelayMs?: number };
  /** Called after each stored batch with its new rows (not with copies already archived). */
  onArchived?: (rows: readonly ArchivedEvent[]) => void;
  /**
   * Prune the archive on a schedule while ingesting: by age, by count per consumer, or both.
   * @default no retention: rows stay until purged
   */
  retention?: ArchiveRetention;
  /** @default the warren's logger, else none */
  logger?: Logger;
}

/** A parking just archived: what {@link ArchiveIngestOptions.onArchived} hears. */
export interface ArchivedEvent {
  /** The row id. */
  readonly id: string;
  readonly consumer: string;
  readonly messageId: string | null;
  readonly reason: string | null;
  readonly errorClass: string | null;
  readonly errorMessage: string | null;
  readonly fingerprint: string;
  readonly failedAt: Date;
}

/**
 * What one consumer's ingestion is doing, for the console and metrics.
 * - `connecting`: not reading its parked queue yet (no broker connection).
 * - `running`: storing what arrives.
 * - `behind`: the last batch could not be stored (see `lastError`); the parked queue
 *   keeps the messages, and ingestion resumes by itself.
 * - `stopped`: after `stop()`.
 */
export type ArchiveIngestStatus = 'connecting' | 'running' | 'behind' | 'stopped';

/** One consumer's ingestion. */
export interface ArchiveIngestState {
  readonly consumer: string;
  /** The parked queue read. */
  readonly queue: string;
  readonly status: ArchiveIngestStatus;
  /** Parkings stored since the start. */
  readonly archived: number;
  /** Copies recognised as archived already (after a crash between store and ack, or another ingester). */
  readonly duplicates: number;
  /** Transactions committed. */
  readonly batches: number;
  /** Deliveries held now, not yet stored. */
  readonly held: number;
  readonly lastArchivedAt: Date | undefined;
  /** Since when the database has not taken a batch; undefined when not behind. */
  readonly behindSince: Date | undefined;
  /** The last failure, in words. */
  readonly lastError: string | undefined;
  /** Fault events (the topology's `faults`) of archived messages that could not be published; each is logged. */
  readonly faultEventsFailed?: number;
}

/** Retention of the archive: by age, by count, or both; pruned on a schedule, in batches. */
export interface ArchiveRetention {
  /** Rows that failed longer ago than this go. @default kept for ever */
  maxAgeMs?: number;
  /** At most this many rows per consumer: the oldest go first. @default no limit */
  maxRows?: number;
  /**
   * How often retention runs; 0: never on its own (call `prune()`). A row nobody looked at
   * is first warned about (a log line; `warren archive` prints it) at one run, and deleted
   * at a later one at the earliest.
   * @default 3600000 (1 hour)
   */
  intervalMs?: number;
  /** Rows deleted per statement. @default 1000 */
  batchSize?: number;
}

/** What a retention run did and will do for one consumer. */
export interface ArchiveRetentionReport {
  readonly consumer: string;
  /** Rows deleted by this run. */
  readonly deleted: number;
  /** Of those, rows nobody had looked at (each was warned about at an earlier run). */
  readonly unviewedDeleted: number;
  /** Rows the next run will delete, as things stand. */
  readonly upcoming: number;
  /** Of those, rows nobody has looked at: the warning. */
  readonly upcomingUnviewed: number;
}

/** AMQP properties of an archived message, decoded (the headers are apart). */
export type ArchivedProperties = Readonly<Record<string, unknown>>;

/** One archived parking in full, decoded. */
export interface ArchivedMessage extends ArchiveSummary {
  readonly errorStack: string | null;
  /** Every header, as amqplib gives them (buffers, `{ '!': 'timestamp', value }`, nested tables). */
  readonly headers: Readonly<Record<string, unknown>>;
  readonly properties: ArchivedProperties;
  readonly body: Buffer;
  /**
   * The row as a parked message, for what `src/park` does with one: `decodeBody`,
   * `attemptHistory`, `exportRecord`, `plainValue`. Its `position` is 0.
   */
  readonly parked: ParkedMessage;
}

/** One step of a message's timeline at one consumer, oldest first. */
export interface ArchiveHistoryEntry {
  readonly at: Date;
  readonly event: 'first-failure' | 'parked' | 'replayed' | 'resolved';
  /** The archive row the step belongs to. */
  readonly rowId: string;
  /** The attempt that failed (`parked`, `first-failure`). */
  readonly attempt: number | null;
  /** Who replayed or resolved it. */
  readonly actor: string | null;
  /** In words: why it was parked, with the error; the resolution's reason. */
  readonly detail: string;
}

/** Options shared by the actions on rows. */
export interface ArchiveActionOptions {
  /** Which rows. */
  filter: ArchiveFilter;
  /** Who acts, for the action record and the rows. */
  actor: string;
  /** Act on at most this many rows (lowest id first). @default no limit */
  limit?: number;
  /** Stops the action between batches; what was done stays done. */
  signal?: AbortSignal;
}

/** Progress of a replay, after each batch. */
export interface ArchiveReplayProgress {
  /** Rows matching when the replay began. */
  readonly total: number;
  readonly replayed: number;
  /** Skipped: the consumer's idempotency marker says the work was done since. */
  readonly alreadyDone: number;
  readonly elapsedMs: number;
}

/** Options of a replay of archived rows. */
export interface ArchiveReplayOptions extends ArchiveActionOptions {
  /** Publishes per second at most. @default as fast as confirms allow */
  ratePerSecond?: number;
  /** Replay rows whose idempotency marker exists too. @default false */
  force?: boolean;
  /** Count and list, change nothing. @default false */
  dryRun?: boolean;
  /**
   * Rows claimed (and published) per batch, at most 1000; with `ratePerSecond`, at most
   * what that rate sends in half of `leaseMs`, so a batch's claim outlasts its sending.
   * Not paced, up to three batches are under way at once: the next claimed and sent while
   * the broker confirms the earlier. @default 500, or 200 with `ratePerSecond`
   */
  batchSize?: number;
  /**
   * How long the rows of a batch stay claimed if this replay dies (kill -9, a lost
   * connection): another replay sends them after that, at most once more.
   * @default 60000
   */
  leaseMs?: number;
  /** Called after each batch. */
  onProgress?: (progress: ArchiveReplayProgress) => void;
}

/** Why a replay ended. */
export type ArchiveStopReason = 'done' | 'limit' | 'aborted' | 'unroutable' | 'failed';

/** What a replay did. */
export interface ArchiveReplayResult {
  readonly consumer: string;
  /** The consumer's work queue the copies went to. */
  readonly targetQueue: string;
  readonly dryRun: boolean;
  /** Rows matching when it began. */
  readonly matched: number;
  /** Copies confirmed by the broker, their rows marked replayed. */
  readonly replayed: number;
  /** Rows skipped because the work was done since (marked replayed too, with nothing sent). */
  readonly alreadyDone: number;
  /** Row ids of the copies sent (the first 1000), for a canary to watch. */
  readonly replayedIds: readonly string[];
  readonly stopReason: ArchiveStopReason;
  /** Why it failed or stopped early, in words. */
  readonly error: string | undefined;
  readonly elapsedMs: number;
  readonly ratePerSecond: number;
}

/** What became of one canary. */
export interface ArchiveCanary {
  readonly rowId: string;
  readonly messageId: string | null;
  /** `processed`: the idempotency marker appeared; `parked-again`: a new row of its message id; `window`: neither, within the window. */
  readonly outcome: 'succeeded' | 'failed' | 'unknown';
  readonly evidence: 'processed' | 'parked-again' | 'window' | 'no-message-id';
  /** When it failed again: the new row and its error. */
  readonly newRowId?: string;
  readonly error?: string;
}

/** Options of a canary replay of archived rows. */
export interface ArchiveCanaryOptions extends Omit<ArchiveReplayOptions, 'limit' | 'dryRun' | 'onProgress'> {
  /** Rows replayed first. @default 3 */
  count?: number;
  /** How long to watch them. @default 30000 */
  windowMs?: number;
  /** Time between looks. @default 1000 */
  pollMs?: number;
  /** Called when a canary's outcome is known. */
  onOutcome?: (canary: ArchiveCanary) => void;
}

/** What a canary replay saw. */
export interface ArchiveCanaryResult {
  readonly replay: ArchiveReplayResult;
  readonly canaries: readonly ArchiveCanary[];
  /** `succeeded` when every canary did, `failed` when any failed again, `empty` when nothing matched. */
  readonly verdict: 'succeeded' | 'failed' | 'unknown' | 'empty';
  /** Open rows still matching: what a replay of the rest would send. */
  readonly remaining: number;
}

/** What a purge or a resolve did. */
export interface ArchiveChangeResult {
  readonly consumer: string;
  /** Rows changed (deleted, resolved). */
  readonly count: number;
  readonly stopReason: 'done' | 'limit' | 'aborted';
}

/** An edit of an archived message before it is sent again as a new message. */
export interface ArchiveEdit {
  /** The new body, as bytes, or a value sent as JSON. @default the archived body */
  body?: Buffer | { readonly json: unknown };
  /** Headers set (added or replaced). */
  setHeaders?: Readonly<Record<string, unknown>>;
  /** Headers removed. */
  removeHeaders?: readonly string[];
}

/** Options of an edit and retry. */
export interface ArchiveEditOptions {
  actor: string;
  /** Why, for the action record and the original row's resolution. */
  reason: string;
  /** The new message's id. @default a new UUIDv7 */
  messageId?: string;
}

/** What an edit and retry did. */
export interface ArchiveEditResult {
  /** The original row, kept and resolved with a reason naming the new message. */
  readonly rowId: string;
  readonly originalMessageId: string | null;
  readonly messageId: string;
  /** What changed, as the action record keeps it. */
  readonly diff: {
    readonly body?: { readonly before: string; readonly after: string };
    readonly headers?: Readonly<Record<string, { readonly before: unknown; readonly after: unknown }>>;
  };
}

