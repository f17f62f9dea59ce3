/**
 * The failure archive's tables in a store: one row per parking of a message, its failure
 * in columns that are indexed for search, its bytes kept exactly. Interfaces and plain
 * data only: the SQLite and PostgreSQL backends implement {@link ArchiveStore}, and
 * `src/archive` builds ingestion, reading, replay and retention on it.
 *
 * A row is `open` from the moment it is archived until it is replayed (`replayed`) or a
 * person resolves it (`resolved`); purge and retention delete rows. A message parked again
 * after a replay is a new row: its history is the rows of its message id, oldest first.
 */

/** Where an archived failure stands. */
export type ArchiveState = 'open' | 'replayed' | 'resolved';

/** Every state, in the order they are shown. */
export const ARCHIVE_STATES: readonly ArchiveState[] = Object.freeze(['open', 'replayed', 'resolved']);

/** One parked message, as the ingester gives it to the store. */
export interface ArchiveRowInput {
  /** The consumer whose parked queue held it. */
  readonly consumer: string;
  /** Its parked identity (`parkedIdentity`): one row per consumer and identity, a second copy is ignored. */
  readonly identity: string;
  readonly messageId: string | null;
  readonly routingKey: string;
  readonly exchange: string | null;
  readonly errorClass: string | null;
  readonly errorMessage: string | null;
  readonly errorStack: string | null;
  /** Why it was parked (`warren-parked-reason`, or the broker's dead-letter reason). */
  readonly reason: string | null;
  readonly attempts: number | null;
  /** Replays before this parking (`warren-replays`). */
  readonly replays: number;
  readonly fingerprint: string;
  /** The last failure, else the park time, else when it was archived: what time filters and order use. */
  readonly failedAt: Date;
  readonly parkedAt: Date | null;
  readonly archivedAt: Date;
  /** Every header, in the archive's lossless encoding (JSON text). */
  readonly headers: string;
  /** Every property but the headers, in the same encoding. */
  readonly properties: string;
  /** The body, byte for byte. */
  readonly body: Buffer;
  /**
   * The body as text, when it is UTF-8 without NUL and has no content encoding: the
   * store may keep this instead of the bytes (they are equal) and index it for search.
   */
  readonly bodyText: string | null;
  /** Header values to index for `headers` filters: the producer's own, as text, bounded. */
  readonly indexHeaders: ReadonlyArray<readonly [name: string, value: string]>;
  /** What could not be stored or indexed as it was, in words; null when everything was. */
  readonly notIndexed: string | null;
}

/** What {@link ArchiveStore.insert} did with one batch. */
export interface ArchiveInsertResult {
  /** The new row's id per input, in input order; `undefined` where that parking was archived already. */
  readonly ids: ReadonlyArray<string | undefined>;
  readonly inserted: number;
  /** Inputs whose consumer and parked identity were archived already (a copy after a crash). */
  readonly duplicates: number;
}

/**
 * A regular expression the store can run: in JavaScript for SQLite (a function of the
 * connection), in PostgreSQL's own syntax there. Linear time in both, so no pattern an
 * operator types can stall the database.
 */
export interface StorePattern {
  /** As the operator wrote it, e.g. `/carrier (502|503)/i`: for messages and the action record. */
  readonly source: string;
  /** True when `text` matches. Runs once per row examined. */
  test(text: string): boolean;
  /** The same pattern for PostgreSQL's `~` (or `~*`). */
  readonly postgres: { readonly source: string; readonly caseInsensitive: boolean };
}

/** How an error message is matched: contains the text (any case), or matches a pattern. */
export type TextMatch = { readonly contains: string } | { readonly pattern: StorePattern };

/** One header filter: the header's value, as text, equals `value`. */
export interface HeaderMatch {
  readonly name: string;
  readonly value: string;
}

/**
 * Which rows of one consumer. Every field that is set must match. Build one with
 * `archiveFilter()` of `src/archive`, which checks and bounds every field.
 */
export interface ArchiveFilter {
  readonly consumer: string;
  /** @default ['open'] */
  readonly states?: readonly ArchiveState[];
  /** Row ids. */
  readonly ids?: readonly string[];
  /** Only rows with an id up to this one: the rows that existed when a person counted them. */
  readonly throughId?: string;
  readonly error?: TextMatch;
  /** Error class equals this (any case). */
  readonly errorClass?: string;
  /** Failed at or after. */
  readonly since?: Date;
  /** Failed before. */
  readonly until?: Date;
  /** Original routing key matches this topic pattern (`*` one word, `#` any number). */
  readonly routingKey?: string;
  readonly messageIds?: readonly string[];
  readonly fingerprint?: string;
  /** Park reason equals this, e.g. `permanent`, `max-attempts`, `delivery_limit`. */
  readonly reason?: string;
  /** Each header's value equals the one given. */
  readonly headers?: readonly HeaderMatch[];
  /** The body contains these words, in this order (whole words, any case). */
  readonly body?: string;
}

/** A page of rows: {@link ArchiveStore.page}. */
export interface ArchivePageQuery {
  readonly filter: ArchiveFilter;
  /** By failure time, then row id. @default 'newest' */
  readonly order?: 'newest' | 'oldest';
  /** @default 50; at most 1000 */
  readonly limit?: number;
  /** The `next` of the previous page. */
  readonly after?: string;
}

/** An archived parking without its bytes: what lists show. */
export interface ArchiveSummary {
  /** The row id (a 64-bit integer, as text). */
  readonly id: string;
  readonly consumer: string;
  readonly identity: string;
  readonly messageId: string | null;
  readonly routingKey: string;
  readonly exchange: string | null;
  readonly errorClass: string | null;
  readonly errorMessage: string | null;
  readonly reason: string | null;
  readonly attempts: number | null;
  readonly replays: number;
  readonly fingerprint: string;
  readonly failedAt: Date;
  readonly parkedAt: Date | null;
  readonly archivedAt: Date;
  readonly state: ArchiveState;
  /** Times this row was replayed. */
  readonly replayCount: number;
  readonly replayedAt: Date | null;
  readonly replayedBy: string | null;
  readonly resolvedAt: Date | null;
  readonly resolvedBy: string | null;
  readonly resolveReason: string | null;
  /** When a person last looked at it (shown it, exported it); null: never. */
  readonly viewedAt: Date | null;
  readonly bodyBytes: number;
  readonly notIndexed: string | null;
}

/** One archived parking in full. */
export interface ArchiveRecord extends ArchiveSummary {
  readonly errorStack: string | null;
  /** In the archive's lossless encoding: decode with `src/archive`. */
  readonly headers: string;
  readonly properties: string;
  readonly body: Buffer;
}

/** A page of rows, and where the next one starts. */
export interface ArchivePage {
  readonly rows: readonly ArchiveSummary[];
  /** Pass as `after` for the next page; undefined on the last. */
  readonly next: string | undefined;
}

/** Rows failing for the same cause: one fingerprint. */
export interface ArchiveGroup {
  readonly fingerprint: string;
  readonly errorClass: string | null;
  readonly count: number;
  readonly firstSeen: Date | null;
  readonly lastSeen: Date | null;
  /** One error message of the group, in full. */
  readonly sampleMessage: string | null;
  /** One row of the group. */
  readonly sampleId: string | null;
}

/** The size of one consumer's archive. */
export interface ArchiveCounts {
  readonly consumer: string;
  readonly open: number;
  readonly replayed: number;
  readonly resolved: number;
  /** Body bytes of every row. */
  readonly bytes: number;
  /** Failure time of the oldest open row; null when none is open. */
  readonly oldestOpenAt: Date | null;
  /** Failure time of the oldest row of any state; null when there is none. */
  readonly oldestAt: Date | null;
}

/** How the backend searches, for the operator to know what is fast. */
export interface ArchiveSearch {
  /** `trigram`: an index (PostgreSQL's pg_trgm); `scan`: rows are read in time order. */
  readonly errorText: 'trigram' | 'scan';
  /** `fts5` (SQLite), `full-text` (PostgreSQL), or `none` (a plain scan). */
  readonly body: 'fts5' | 'full-text' | 'none';
  /** Why an index is missing, e.g. an extension that needs a superuser to be created. */
  readonly note: string | undefined;
}

/** Options of {@link ArchiveStore.claim}. */
export interface ArchiveClaimOptions {
  /** Who claims: claimed rows are skipped by others until released, marked or expired. */
  readonly owner: string;
  /** How long the claim holds if the claimer dies. */
  readonly leaseMs: number;
  readonly limit: number;
  /** Where the previous claim ended (its `next`): rows are claimed oldest failure first. */
  readonly after?: string;
}

/** Options of {@link ArchiveStore.markReplayed}. */
export interface ArchiveReplayMark {
  /** The claim's owner: only rows it still holds are marked. */
  readonly owner: string;
  /** Who asked for the replay. */
  readonly actor: string;
  readonly at: Date;
}

/** Options of {@link ArchiveStore.resolve}. */
export interface ArchiveResolveMark {
  readonly actor: string;
  readonly reason: string;
  readonly at: Date;
}

/** What one retention batch removed. */
export interface ArchivePruneBatch {
  readonly deleted: number;
  /** Of those, rows nobody had looked at. */
  readonly unviewed: number;
}

/** Which rows retention would delete: {@link ArchiveStore.prunable}. */
export interface ArchivePruneRule {
  readonly consumer: string;
  /** Rows that failed before this go. */
  readonly before?: Date;
  /** Only this many rows stay, the newest. */
  readonly keep?: number;
}

/**
 * The archive's tables, as a backend gives them (`store.archive`). Each method is one
 * short transaction; the batch methods act on at most `limit` rows, so a caller loops
 * until fewer come back.
 */
export interface ArchiveStore {
  /** Inserts a batch in one transaction; a parking archived already (same consumer and identity) is left as it is. */
  insert(rows: readonly ArchiveRowInput[]): Promise<ArchiveInsertResult>;
  /** A page of rows, by failure time, with keyset pagination (as fast at the millionth row as at the first). */
  page(query: ArchivePageQuery): Promise<ArchivePage>;
  /** How many rows match, exactly. */
  count(filter: ArchiveFilter): Promise<number>;
  /** Rows by fingerprint, largest first; exact over every matching row. */
  groups(filter: ArchiveFilter, limit: number): Promise<ArchiveGroup[]>;
  /** One row, in full. */
  get(id: string): Promise<ArchiveRecord | undefined>;
  /** Rows matching, in full, oldest failure first, from `after` (a `next` of this or of {@link claim}): for export. */
  records(filter: ArchiveFilter, limit: number, after?: string): Promise<{ readonly rows: ArchiveRecord[]; readonly next: string | undefined }>;
  /** Every parking of one message id at one consumer, oldest first. */
  history(consumer: string, messageId: string, limit: number): Promise<ArchiveSummary[]>;
  /** Counts per consumer (every consumer with rows when none is named). */
  counts(consumer?: string): Promise<ArchiveCounts[]>;
  /** How this backend searches. */
  search(): Promise<ArchiveSearch>;
  /** Claims up to `limit` matching rows nobody holds, oldest failure first, and returns them in full with where to go on. */
  claim(filter: ArchiveFilter, options: ArchiveClaimOptions): Promise<{ readonly rows: ArchiveRecord[]; readonly next: string | undefined }>;
  /** The highest row id of the archive (of every consumer); undefined when it is empty. An action bounds itself with it (`throughId`), so that rows parked while it runs, its own replays failing again among them, are not acted on. */
  lastId(): Promise<string | undefined>;
  /** Marks claimed rows replayed (state, count, time, who) and lets go of them; returns how many. */
  markReplayed(ids: readonly string[], mark: ArchiveReplayMark): Promise<number>;
  /** Lets go of claimed rows without changing them (a replay that stopped before sending them). */
  release(ids: readonly string[], owner: string): Promise<number>;
  /** Resolves up to `limit` matching rows; returns how many. */
  resolve(filter: ArchiveFilter, mark: ArchiveResolveMark, limit: number): Promise<number>;
  /** Deletes up to `limit` matching rows; returns how many. */
  purge(filter: ArchiveFilter, limit: number): Promise<number>;
  /** Notes that a person looked at these rows (retention warns before deleting rows nobody looked at). */
  markViewed(ids: readonly string[], at: Date): Promise<void>;
  /** How many rows retention would delete now, and how many of those nobody looked at. */
  prunable(rule: ArchivePruneRule): Promise<ArchivePruneBatch>;
  /** Deletes up to `limit` rows of the rule, oldest first. */
  prune(rule: ArchivePruneRule, limit: number): Promise<ArchivePruneBatch>;
}
