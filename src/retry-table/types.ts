/**
 * The retry table's data: rows (messages waiting for a condition or a person), the
 * filters operators select them with, holds (pauses that also catch rows added later),
 * audit entries and signals. Backends implement {@link RetryTableDriver}.
 */
import type { StoreBackend } from '../store/types.js';

/** What a consumer stores when a handler asks to wait. */
export interface RetryRowInput {
  readonly messageId: string;
  readonly correlationId: string | null;
  readonly consumer: string;
  /** The consumer's work queue: where the scheduler sends the row back. */
  readonly queue: string;
  /** The consumer's parked queue: where the row goes at its cap or on an operator's word. */
  readonly parkedQueue: string;
  /** Exchange and routing key the message was first published with. */
  readonly exchange: string;
  readonly routingKey: string;
  /**
   * The message body: its UTF-8 text, or base64 when the bytes are not UTF-8 or hold a
   * NUL (a `'buffer'`, `'text'` or codec decoder reads bodies that are not JSON); the
   * properties then hold `bodyEncoding: 'base64'`.
   */
  readonly content: string;
  /** JSON of the AMQP properties the message goes back with (headers included). */
  readonly properties: string;
  /** Times this message has been sent to the table, this one included (1 the first time). */
  readonly attempt: number;
  /** When the scheduler may send it back; `null`: not until an operator or a health check says so. */
  readonly nextAttemptAt: Date | null;
  readonly lastError: string;
  readonly errorClass: string;
  readonly dependency: string;
  readonly tenant: string | null;
}

/** A row as operators read it: what was stored, with its headers read out. */
export interface RetryRow extends Omit<RetryRowInput, 'properties'> {
  /** The row's id (a 64-bit integer, as a string). */
  readonly id: string;
  /** The headers the message goes back with. */
  readonly headers: Readonly<Record<string, unknown>>;
  readonly paused: boolean;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/**
 * Which rows an operation touches. Every field given must match (AND); an empty filter
 * means every row.
 */
export interface RetryFilter {
  /** Row ids. */
  readonly ids?: readonly string[];
  readonly consumer?: string;
  readonly dependency?: string;
  readonly tenant?: string;
  /** The error class the handler failed with, e.g. `CarrierUnavailableError`. */
  readonly errorClass?: string;
  /** Only paused (true) or only unpaused (false) rows. */
  readonly paused?: boolean;
  /** Only rows whose next attempt has come (true: due now, paused or not) or not (false: later or none). */
  readonly due?: boolean;
}

/** A pause that holds matching rows, also rows added after it, until it is resumed. */
export interface RetryHold {
  readonly consumer: string | null;
  readonly dependency: string | null;
  readonly tenant: string | null;
  readonly errorClass: string | null;
  /** Who paused, and when. */
  readonly actor: string;
  readonly since: Date;
}

/** Operator actions the audit records. */
export type RetryAction = 'pause' | 'resume' | 'schedule' | 'park';

/** One recorded change. */
export interface RetryAuditEntry {
  readonly id: string;
  readonly at: Date;
  /** Who: an operator's name, `health-check:<dependency>`, or what the caller passed. */
  readonly actor: string;
  readonly action: RetryAction;
  readonly filter: RetryFilter;
  /** For `schedule`: the next attempt set (ISO time; null for none). For `resume`: whether rows were made due now, pauses lifted. For `pause`: whether it holds later rows. */
  readonly detail: Readonly<Record<string, unknown>>;
  /** Rows the change touched. */
  readonly rows: number;
}

/** Per-dependency figures. */
export interface DependencySignals {
  readonly rows: number;
  readonly paused: number;
  readonly due: number;
}

/** What an alert watches; see {@link RetryTable.signals}. */
export interface RetrySignals {
  /** Rows in the table. */
  readonly rows: number;
  /** Unpaused rows whose next attempt has come: what the scheduler should be sending. */
  readonly due: number;
  readonly paused: number;
  /** Unpaused rows with no next attempt: they wait for a person. */
  readonly waiting: number;
  /**
   * How long the oldest due row has been due, in ms; 0 when none is. A value that keeps
   * growing means no scheduler is draining: alert on it.
   */
  readonly oldestDueAgeMs: number;
  /** The same figures by dependency. */
  readonly byDependency: Readonly<Record<string, DependencySignals>>;
}

/** An update of matching rows, applied with its audit entry in one transaction. */
export type RetryChange =
  | { readonly action: 'pause' }
  /** `dueNow`: also set the next attempt to now. `ownPausesOnly`: lift only holds this actor made. */
  | { readonly action: 'resume'; readonly dueNow: boolean; readonly ownPausesOnly: boolean }
  /** `'now'`: the database's now (a time in the past is passed as `'now'`). */
  | { readonly action: 'schedule'; readonly at: Date | 'now' | null };

/** How the scheduler moves due rows: at most `limit`, only while the outbox holds fewer than `maxPending` unsent rows. */
export interface DrainOptions {
  readonly limit: number;
  readonly maxPending: number;
}

/** What one drain did. */
export interface DrainResult {
  readonly moved: number;
  /** True when the outbox bound (`maxPending`) left less room than `limit`. */
  readonly full: boolean;
}

/**
 * What a store backend gives the retry table. Each method is one transaction; every
 * change writes its audit entry in the same transaction.
 */
export interface RetryTableDriver {
  readonly backend: StoreBackend;
  /**
   * Adds the row, paused when a hold matches it. A row for the same message and
   * consumer already there is updated instead (a redelivered duplicate makes no second row).
   */
  insert(row: RetryRowInput): Promise<{ readonly id: string; readonly paused: boolean }>;
  /** Matching rows, `limit` from `offset`, oldest next attempt first. */
  list(filter: RetryFilter, limit: number, offset: number): Promise<RetryRow[]>;
  /** How many rows match. */
  count(filter: RetryFilter): Promise<number>;
  /** Updates matching rows (and holds, for pause and resume); returns how many rows changed. */
  update(change: RetryChange, filter: RetryFilter, actor: string): Promise<number>;
  /**
   * Moves matching rows into the outbox, addressed to their parked queue, with
   * `headers` merged into each row's headers; deletes them; returns how many.
   */
  park(filter: RetryFilter, actor: string, headers: Readonly<Record<string, unknown>>): Promise<number>;
  /**
   * Moves up to `limit` due, unpaused rows into the outbox (oldest next attempt first),
   * addressed to their queue. `full`: the outbox bound stopped it short of `limit`.
   */
  drain(options: DrainOptions): Promise<DrainResult>;
  /** The pauses in force. */
  holds(): Promise<RetryHold[]>;
  /** Dependencies named by rows or holds, sorted. */
  dependencies(): Promise<string[]>;
  /** Rows, due rows and paused rows by dependency, and the oldest due row's age. */
  signals(): Promise<RetrySignals>;
  /** The last `limit` changes to the table, newest first. */
  history(limit: number): Promise<RetryAuditEntry[]>;
}

/** Options of every change (pause, resume, schedule, park). */
export interface ChangeOptions {
  /**
   * Who makes the change, for the audit.
   * @default `<os user>@<host>`
   */
  actor?: string;
  /** Accept a dependency that nothing names yet (a pause ahead of the first failure). */
  allowUnknown?: boolean;
}

/** Options of `RetryTable.resume`. */
export interface ResumeOptions extends ChangeOptions {
  /**
   * Also set the rows' next attempt to now (rows with none, or a later one, become due).
   * @default false
   */
  dueNow?: boolean;
  /**
   * Lift only the pauses `actor` made (a health check uses this, so it never lifts an
   * operator's pause); rows another pause still covers stay paused either way.
   * @default false
   */
  ownPausesOnly?: boolean;
}

/** Options of `RetryTable.list`. */
export interface ListOptions {
  /** @default 100 */
  limit?: number;
  /** @default 0 */
  offset?: number;
}
