/**
 * The archive's tables on PostgreSQL. An insert of a batch is one statement (rows,
 * payloads, header values and group counts, with the bodies sent as one binary
 * parameter); changes of state lock the rows they take with SKIP LOCKED, so several
 * ingesters, replays and operators work side by side.
 */
import type {
  ArchiveClaimOptions,
  ArchiveCounts,
  ArchiveFilter,
  ArchiveGroup,
  ArchiveInsertResult,
  ArchivePage,
  ArchivePageQuery,
  ArchivePruneBatch,
  ArchivePruneRule,
  ArchiveRecord,
  ArchiveReplayMark,
  ArchiveResolveMark,
  ArchiveRowInput,
  ArchiveSearch,
  ArchiveState,
  ArchiveStore,
  ArchiveSummary,
  StorePattern,
} from '../archive.js';
import {
  assembleCounts,
  cursorOf,
  keyset,
  likeContains,
  onlyConsumerAndStates,
  pageLimit,
  readsInTimeOrder,
  timeRangeOf,
  SEARCHABLE_BODY_CHARS,
  statesOf,
  sumGroups,
  summaryColumns,
  toGroup,
  topicRegex,
  toSummary,
  whereOf,
  type ArchiveDialect,
  type GroupChange,
  type GroupRow,
  type SummaryRow,
} from '../archive-sql.js';
import type { PgClient } from './driver.js';
import type { PostgresInternals } from './internals.js';

/** Rows a filtered page reads in time order before it leaves the rest to the planner. */
const PAGE_WINDOWS = [2000, 20_000] as const;

class Sql implements ArchiveDialect {
  readonly params: unknown[] = [];
  constructor(
    readonly headersTable: string,
    private readonly payloadTable: string,
  ) {}
  param(value: unknown): string {
    this.params.push(value);
    return `$${this.params.length}`;
  }
  time(d: Date): unknown {
    return d;
  }
  inList(column: string, values: readonly string[], type: 'bigint' | 'text'): string {
    return `${column} = ANY(${this.param([...values])}::${type}[])`;
  }
  contains(column: string, needle: string): string {
    return `${column} ILIKE ${this.param(likeContains(needle))}`;
  }
  matches(column: string, pattern: StorePattern): string {
    return `${column} ${pattern.postgres.caseInsensitive ? '~*' : '~'} ${this.param(pattern.postgres.source)}`;
  }
  equalsAnyCase(column: string, value: string): string {
    return `lower(${column}) = lower(${this.param(value)})`;
  }
  topic(column: string, pattern: string): string {
    return `('.' || ${column}) ~ ${this.param(topicRegex(pattern))}`;
  }
  bodyRows(words: string): string {
    return `SELECT p.id FROM ${this.payloadTable} p WHERE to_tsvector('simple', left(p.body_text, ${SEARCHABLE_BODY_CHARS})) @@ phraseto_tsquery('simple', ${this.param(words)})`;
  }
}

interface RowInfo {
  id: string;
  consumer: string;
  state: ArchiveState;
  fingerprint: string;
  body_bytes: number;
  failed_at: Date;
  error_class: string | null;
  error_message: string | null;
  viewed_at: Date | null;
}

/** Rows inserted before the ingesting process first has the archive's tables analyzed (see `noteInserted`). */
const ANALYZE_FIRST = 5_000;

const INFO = 'a.id, a.consumer, a.state, a.fingerprint, a.body_bytes, a.failed_at, a.error_class, a.error_message, a.viewed_at';

/** The archive on PostgreSQL. */
export class PostgresArchive<C extends PgClient> implements ArchiveStore {
  private searchInfo: ArchiveSearch | undefined;
  /** Rows this process inserted since it last had the archive's tables analyzed, and the size then. */
  private sinceAnalyze = 0;
  private analyzedAt = 0;
  /** The ANALYZE under way, if any: {@link analyzed} waits for it. */
  private analyzing: Promise<void> | undefined;

  constructor(private readonly store: PostgresInternals<C>) {}

  private get t() {
    return this.store.tables;
  }

  private sql(): Sql {
    return new Sql(this.t.archiveHeaders, this.t.archivePayload);
  }

  private q<R>(client: PgClient, sql: string, values: unknown[], doing: string): Promise<R[]> {
    return this.store.query<R>(client, sql, values, doing).then((r) => r.rows);
  }

  private one<R>(sql: string, values: unknown[], doing: string): Promise<R[]> {
    return this.store.withClient((c) => this.q<R>(c, sql, values, doing), doing);
  }

  async insert(rows: readonly ArchiveRowInput[]): Promise<ArchiveInsertResult> {
    if (rows.length === 0) return { ids: [], inserted: 0, duplicates: 0 };
    // A copy twice in one batch is a duplicate of the first: send each identity once.
    const firstOf = new Map<string, number>();
    const send: number[] = [];
    rows.forEach((r, i) => {
      const key = `${r.consumer}\u0000${r.identity}`;
      if (!firstOf.has(key)) {
        firstOf.set(key, i);
        send.push(i);
      }
    });
    const cols: unknown[][] = Array.from({ length: 22 }, () => []);
    const bodies: Buffer[] = [];
    let offset = 1;
    const hn: number[] = [];
    const hname: string[] = [];
    const hvalue: string[] = [];
    send.forEach((i, k) => {
      const r = rows[i] as ArchiveRowInput;
      const bytes = r.bodyText === null;
      const v = [r.consumer, r.identity, r.messageId, r.routingKey, r.exchange, r.errorClass, r.errorMessage, r.reason, r.attempts, r.replays, r.fingerprint, r.failedAt, r.parkedAt, r.archivedAt, r.body.length, r.notIndexed, r.errorStack, r.headers, r.properties, bytes ? offset : 0, bytes ? r.body.length : -1, r.bodyText];
      v.forEach((x, j) => (cols[j] as unknown[]).push(x));
      if (bytes) {
        bodies.push(r.body);
        offset += r.body.length;
      }
      for (const [name, value] of r.indexHeaders) {
        hn.push(k + 1);
        hname.push(name);
        hvalue.push(value);
      }
    });
    const t = this.t;
    const sql = `WITH input AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::int[], $10::int[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::int[], $16::text[], $17::text[], $18::text[], $19::text[], $20::int[], $21::int[], $22::text[])
          WITH ORDINALITY AS u(consumer, identity, message_id, routing_key, exchange, error_class, error_message, reason, attempts, replays, fingerprint, failed_at, parked_at, archived_at, body_bytes, not_indexed, error_stack, headers, properties, body_off, body_len, body_text, n)
      ), ins AS (
        INSERT INTO ${t.archive} (consumer, identity, message_id, routing_key, exchange, error_class, error_message, reason, attempts, replays, fingerprint, failed_at, parked_at, archived_at, body_bytes, not_indexed)
        SELECT consumer, identity, message_id, routing_key, exchange, error_class, error_message, reason, attempts, replays, fingerprint, failed_at, parked_at, archived_at, body_bytes, not_indexed FROM input ORDER BY n
        ON CONFLICT (consumer, identity) DO NOTHING
        RETURNING id, consumer, identity
      ), added AS (
        SELECT ins.id, input.* FROM ins JOIN input ON input.consumer = ins.consumer AND input.identity = ins.identity
      ), pay AS (
        INSERT INTO ${t.archivePayload} (id, error_stack, headers, properties, body, body_text)
        SELECT id, error_stack, headers, properties, CASE WHEN body_len < 0 THEN NULL ELSE substring($23::bytea FROM body_off FOR body_len) END, body_text FROM added
      ), hdr AS (
        INSERT INTO ${t.archiveHeaders} (consumer, name, value, failed_at, row_id)
        SELECT added.consumer, h.name, h.value, added.failed_at, added.id FROM unnest($24::int[], $25::text[], $26::text[]) AS h(n, name, value) JOIN added ON added.n = h.n
        ON CONFLICT DO NOTHING
      ), grp AS (
        INSERT INTO ${t.archiveGroups} AS g (consumer, state, fingerprint, count, bytes, first_at, last_at, error_class, sample_message, sample_id)
        SELECT consumer, 'open', fingerprint, count(*), sum(body_bytes), min(failed_at), max(failed_at), max(error_class),
          (array_agg(error_message ORDER BY failed_at DESC, id DESC))[1], (array_agg(id ORDER BY failed_at DESC, id DESC))[1]
        FROM added GROUP BY consumer, fingerprint ORDER BY consumer, fingerprint
        ON CONFLICT (consumer, state, fingerprint) DO UPDATE SET count = g.count + excluded.count, bytes = g.bytes + excluded.bytes,
          first_at = least(g.first_at, excluded.first_at),
          sample_message = CASE WHEN g.last_at IS NULL OR excluded.last_at >= g.last_at THEN excluded.sample_message ELSE g.sample_message END,
          sample_id = CASE WHEN g.last_at IS NULL OR excluded.last_at >= g.last_at THEN excluded.sample_id ELSE g.sample_id END,
          last_at = greatest(g.last_at, excluded.last_at),
          error_class = coalesce(g.error_class, excluded.error_class)
      )
      SELECT id::text AS id, n::int AS n FROM added`;
    const result = await this.one<{ id: string; n: number }>(sql, [...cols, Buffer.concat(bodies), hn, hname, hvalue], 'archive parked messages');
    const ids: Array<string | undefined> = rows.map(() => undefined);
    for (const r of result) ids[send[r.n - 1] as number] = r.id;
    this.noteInserted(result.length);
    return { ids, inserted: result.length, duplicates: rows.length - result.length };
  }

  /**
   * An outage archives its first 100,000 rows within minutes, before autovacuum has
   * analyzed the tables: planning on the empty tables' statistics, PostgreSQL runs a
   * header filter as a nested loop over every pair of rows (minutes per page). So the
   * ingesting process has the tables analyzed itself, in the background, after its
   * first {@link ANALYZE_FIRST} rows and then whenever it has added a fifth of what the
   * tables held at the last run (at least {@link ANALYZE_FIRST}).
   */
  private noteInserted(n: number): void {
    this.sinceAnalyze += n;
    if (this.analyzing !== undefined || this.sinceAnalyze < Math.max(ANALYZE_FIRST, this.analyzedAt / 5)) return;
    const rows = this.analyzedAt + this.sinceAnalyze;
    this.sinceAnalyze = 0;
    const t = this.t;
    this.analyzing = this.store
      .withClient((c) => this.q(c, `ANALYZE ${t.archive}, ${t.archiveHeaders}, ${t.archivePayload}`, [], 'analyze the archive tables'), 'analyze the archive tables')
      .then(
        () => {
          this.analyzedAt = rows;
        },
        // Not analyzed (the database went away, or no right to): autovacuum will, and the next batch tries again.
        () => {
          this.sinceAnalyze += rows - this.analyzedAt;
        },
      )
      .finally(() => {
        this.analyzing = undefined;
      });
  }

  /** Resolves once the background ANALYZE under way (if any) has ended; for tests and shutdown. */
  async analyzed(): Promise<void> {
    await this.analyzing;
  }

  private async addGroups(c: PgClient, changes: readonly GroupChange[]): Promise<void> {
    for (const g of changes) {
      await this.q(
        c,
        `INSERT INTO ${this.t.archiveGroups} AS g (consumer, state, fingerprint, count, bytes, first_at, last_at, error_class, sample_message, sample_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (consumer, state, fingerprint) DO UPDATE SET count = g.count + excluded.count, bytes = g.bytes + excluded.bytes, first_at = least(g.first_at, excluded.first_at),
           sample_message = CASE WHEN g.last_at IS NULL OR excluded.last_at >= g.last_at THEN excluded.sample_message ELSE g.sample_message END,
           sample_id = CASE WHEN g.last_at IS NULL OR excluded.last_at >= g.last_at THEN excluded.sample_id ELSE g.sample_id END,
           last_at = greatest(g.last_at, excluded.last_at), error_class = coalesce(g.error_class, excluded.error_class)`,
        [g.consumer, g.state, g.fingerprint, g.count, g.bytes, new Date(g.firstAt), new Date(g.lastAt), g.errorClass, g.sampleMessage, g.sampleId],
        'count archived messages',
      );
    }
  }

  private async removeGroups(c: PgClient, changes: readonly GroupChange[]): Promise<void> {
    const t = this.t;
    for (const g of changes) {
      const key = [g.consumer, g.state, g.fingerprint];
      const left = await this.q<{ count: string }>(c, `UPDATE ${t.archiveGroups} SET count = count + $4, bytes = bytes + $5 WHERE consumer = $1 AND state = $2 AND fingerprint = $3 RETURNING count`, [...key, g.count, g.bytes], 'count archived messages');
      if (left[0] !== undefined && Number(left[0].count) <= 0) {
        await this.q(c, `DELETE FROM ${t.archiveGroups} WHERE consumer = $1 AND state = $2 AND fingerprint = $3 AND count <= 0`, key, 'count archived messages');
        continue;
      }
      await this.q(
        c,
        `UPDATE ${t.archiveGroups} g SET first_at = s.first_at, last_at = s.last_at, sample_id = s.sample_id, sample_message = s.sample_message
         FROM (SELECT (SELECT min(failed_at) FROM ${t.archive} WHERE consumer = $1 AND state = $2 AND fingerprint = $3) AS first_at,
                      (SELECT max(failed_at) FROM ${t.archive} WHERE consumer = $1 AND state = $2 AND fingerprint = $3) AS last_at,
                      x.id AS sample_id, x.error_message AS sample_message
               FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT id, error_message FROM ${t.archive} WHERE consumer = $1 AND state = $2 AND fingerprint = $3 ORDER BY failed_at DESC, id DESC LIMIT 1) x ON true) s
         WHERE g.consumer = $1 AND g.state = $2 AND g.fingerprint = $3`,
        key,
        'count archived messages',
      );
    }
  }

  private groupRows(rows: readonly RowInfo[], state?: ArchiveState) {
    return rows.map((r) => ({ consumer: r.consumer, state: state ?? r.state, fingerprint: r.fingerprint, bytes: Number(r.body_bytes), at: r.failed_at.getTime(), errorClass: r.error_class, errorMessage: r.error_message, id: String(r.id) }));
  }

  /** Rows (locked by the caller) moved to `state`, with their counts. */
  private async changeState(c: PgClient, rows: readonly RowInfo[], state: ArchiveState, set: string, params: readonly unknown[]): Promise<number> {
    if (rows.length === 0) return 0;
    const n = (await this.store.query(c, `UPDATE ${this.t.archive} SET state = $1, ${set} WHERE id = ANY($${params.length + 2}::bigint[])`, [state, ...params, rows.map((r) => r.id)], 'change archived messages')).rowCount ?? 0;
    // Groups are locked in one order (sorted) in every transaction: no two wait on each other.
    const changes = [...sumGroups(this.groupRows(rows), -1), ...sumGroups(this.groupRows(rows, state), 1)].sort((a, b) => (`${a.consumer}\u0000${a.state}\u0000${a.fingerprint}` < `${b.consumer}\u0000${b.state}\u0000${b.fingerprint}` ? -1 : 1));
    for (const g of changes) await (g.count < 0 ? this.removeGroups(c, [g]) : this.addGroups(c, [g]));
    return n;
  }

  private async deleteRows(c: PgClient, rows: readonly RowInfo[]): Promise<ArchivePruneBatch> {
    if (rows.length === 0) return { deleted: 0, unviewed: 0 };
    const t = this.t;
    const ids = rows.map((r) => r.id);
    await this.q(c, `DELETE FROM ${t.archiveHeaders} WHERE row_id = ANY($1::bigint[])`, [ids], 'delete archived messages');
    await this.q(c, `DELETE FROM ${t.archivePayload} WHERE id = ANY($1::bigint[])`, [ids], 'delete archived messages');
    const deleted = (await this.store.query(c, `DELETE FROM ${t.archive} WHERE id = ANY($1::bigint[])`, [ids], 'delete archived messages')).rowCount ?? 0;
    await this.removeGroups(c, sumGroups(this.groupRows(rows), -1));
    return { deleted, unviewed: rows.filter((r) => r.viewed_at === null).length };
  }

  async page(query: ArchivePageQuery): Promise<ArchivePage> {
    const limit = pageLimit(query.limit);
    const order = query.order ?? 'newest';
    let rows: ArchiveSummary[];
    if (!readsInTimeOrder(query.filter)) rows = await this.store.withClient((c) => this.pageRows(c, query.filter, order, query.after, limit + 1), 'read archived messages');
    else {
      // Windows of the consumer's rows in the page's order, read by the time index, the
      // filter applied to each; what is left after them, by the planner's choice. Exact:
      // each part starts where the one before ended. In the windows the planner may not
      // take a bitmap and sort: without statistics (a new or fast-growing table) it takes
      // every row of the time range that way, sorted, for the first few thousand.
      // (A page of a filter is a read; the transaction only scopes these settings.)
      const windows = await this.store.transaction(async (c) => {
        await this.q(c, 'SET LOCAL enable_bitmapscan = off', [], 'read archived messages');
        await this.q(c, 'SET LOCAL enable_sort = off', [], 'read archived messages');
        // What is turned off costs 10^10 to the planner: not a reason to compile the statement.
        await this.q(c, 'SET LOCAL jit = off', [], 'read archived messages');
        const found: ArchiveSummary[] = [];
        let after = query.after;
        for (const size of PAGE_WINDOWS) {
          found.push(...(await this.windowRows(c, query.filter, order, after, size, limit + 1 - found.length)));
          if (found.length > limit) return { found, after: undefined };
          const edge = await this.windowEdge(c, query.filter, order, after, size);
          if (edge === undefined) return { found, after: undefined };
          after = edge;
        }
        return { found, after };
      }, 'read archived messages');
      rows = windows.found;
      const rest = windows.after;
      if (rest !== undefined) rows.push(...(await this.store.withClient((c) => this.pageRows(c, query.filter, order, rest, limit + 1 - rows.length), 'read archived messages')));
    }
    const more = rows.length > limit;
    if (more) rows.pop();
    return { rows, next: more ? cursorOf(rows[rows.length - 1] as ArchiveSummary) : undefined };
  }

  private async pageRows(c: PgClient, filter: ArchiveFilter, order: 'newest' | 'oldest', after: string | undefined, n: number): Promise<ArchiveSummary[]> {
    const q = this.sql();
    const where = whereOf(filter, q);
    const k = keyset(order, after, q);
    return (await this.q<SummaryRow>(c, `SELECT ${summaryColumns('a')} FROM ${this.t.archive} a WHERE ${where}${k.where} ORDER BY ${k.orderBy} LIMIT ${n}`, q.params, 'read archived messages')).map(toSummary);
  }

  /** Rows matching among the next `size` of the consumer's time range (MATERIALIZED: read by the time index, whatever else the filter holds). */
  private async windowRows(c: PgClient, filter: ArchiveFilter, order: 'newest' | 'oldest', after: string | undefined, size: number, n: number): Promise<ArchiveSummary[]> {
    const q = this.sql();
    const range = whereOf(timeRangeOf(filter), q);
    const k = keyset(order, after, q);
    const where = whereOf(filter, q);
    const sql = `WITH w AS MATERIALIZED (SELECT a.* FROM ${this.t.archive} a WHERE ${range}${k.where} ORDER BY ${k.orderBy} LIMIT ${size})
      SELECT ${summaryColumns('a')} FROM w a WHERE ${where} ORDER BY ${k.orderBy} LIMIT ${n}`;
    return (await this.q<SummaryRow>(c, sql, q.params, 'read archived messages')).map(toSummary);
  }

  /** The position of the last row of that window; undefined when the range has no more rows than it. */
  private async windowEdge(c: PgClient, filter: ArchiveFilter, order: 'newest' | 'oldest', after: string | undefined, size: number): Promise<string | undefined> {
    const q = this.sql();
    const range = whereOf(timeRangeOf(filter), q);
    const k = keyset(order, after, q);
    const r = await this.q<{ failed_at: Date; id: string }>(c, `SELECT a.failed_at, a.id::text AS id FROM ${this.t.archive} a WHERE ${range}${k.where} ORDER BY ${k.orderBy} OFFSET ${size - 1} LIMIT 1`, q.params, 'read archived messages');
    return r[0] === undefined ? undefined : cursorOf({ failedAt: r[0].failed_at, id: r[0].id });
  }

  async count(filter: ArchiveFilter): Promise<number> {
    if (onlyConsumerAndStates(filter)) {
      const r = await this.one<{ n: string }>(`SELECT coalesce(sum(count), 0)::text AS n FROM ${this.t.archiveGroups} WHERE consumer = $1 AND state = ANY($2::text[])`, [filter.consumer, [...statesOf(filter)]], 'count archived messages');
      return Number(r[0]?.n ?? 0);
    }
    const q = this.sql();
    const where = whereOf(filter, q);
    const r = await this.one<{ n: string }>(`SELECT count(*)::text AS n FROM ${this.t.archive} a WHERE ${where}`, q.params, 'count archived messages');
    return Number(r[0]?.n ?? 0);
  }

  async groups(filter: ArchiveFilter, limit: number): Promise<ArchiveGroup[]> {
    const n = pageLimit(limit, 10_000);
    if (onlyConsumerAndStates(filter)) {
      const rows = await this.one<GroupRow>(
        `SELECT fingerprint, sum(count)::text AS n, min(first_at) AS first_at, max(last_at) AS last_at, max(error_class) AS error_class,
           (array_agg(sample_message ORDER BY last_at DESC))[1] AS sample_message, (array_agg(sample_id ORDER BY last_at DESC))[1]::text AS sample_id
         FROM ${this.t.archiveGroups} WHERE consumer = $1 AND state = ANY($2::text[]) GROUP BY fingerprint ORDER BY sum(count) DESC, min(first_at) ASC LIMIT $3`,
        [filter.consumer, [...statesOf(filter)], n],
        'group archived messages',
      );
      return rows.map(toGroup);
    }
    const q = this.sql();
    const where = whereOf(filter, q);
    const rows = await this.one<GroupRow>(
      `SELECT s.fingerprint, s.n::text AS n, s.first_at, s.last_at, s.error_class, (SELECT error_message FROM ${this.t.archive} WHERE id = s.sample_id) AS sample_message, s.sample_id::text AS sample_id FROM (
         SELECT a.fingerprint, count(*) AS n, min(a.failed_at) AS first_at, max(a.failed_at) AS last_at, max(a.error_class) AS error_class, max(a.id) AS sample_id
         FROM ${this.t.archive} a WHERE ${where} GROUP BY a.fingerprint) s ORDER BY s.n DESC, s.first_at ASC LIMIT ${n}`,
      q.params,
      'group archived messages',
    );
    return rows.map(toGroup);
  }

  private full(where: string, tail: string): string {
    return `SELECT ${summaryColumns('a')}, p.error_stack, p.headers, p.properties, p.body, p.body_text FROM ${this.t.archive} a JOIN ${this.t.archivePayload} p ON p.id = a.id WHERE ${where} ${tail}`;
  }

  async get(id: string): Promise<ArchiveRecord | undefined> {
    if (!/^\d{1,19}$/.test(id)) return undefined;
    const rows = await this.one<SummaryRow & PayloadRow>(this.full('a.id = $1', ''), [id], 'read an archived message');
    return rows[0] === undefined ? undefined : toRecord(rows[0]);
  }

  async records(filter: ArchiveFilter, limit: number, after?: string): Promise<{ rows: ArchiveRecord[]; next: string | undefined }> {
    const n = pageLimit(limit);
    const q = this.sql();
    const where = whereOf(filter, q);
    const k = keyset('oldest', after, q);
    const rows = (await this.one<SummaryRow & PayloadRow>(this.full(`${where}${k.where}`, `ORDER BY ${k.orderBy} LIMIT ${n}`), q.params, 'read archived messages')).map(toRecord);
    return { rows, next: rows.length === n ? cursorOf(rows[rows.length - 1] as ArchiveRecord) : undefined };
  }

  async history(consumer: string, messageId: string, limit: number): Promise<ArchiveSummary[]> {
    const n = pageLimit(limit);
    return (await this.one<SummaryRow>(`SELECT ${summaryColumns('a')} FROM ${this.t.archive} a WHERE a.consumer = $1 AND a.message_id = $2 ORDER BY a.failed_at, a.id LIMIT ${n}`, [consumer, messageId], 'read a message history')).map(toSummary);
  }

  async counts(consumer?: string): Promise<ArchiveCounts[]> {
    const rows = await this.one<{ consumer: string; state: ArchiveState; n: string; bytes: string; oldest: Date | null }>(
      `SELECT consumer, state, sum(count)::text AS n, sum(bytes)::text AS bytes, min(first_at) AS oldest FROM ${this.t.archiveGroups}${consumer === undefined ? '' : ' WHERE consumer = $1'} GROUP BY consumer, state ORDER BY consumer`,
      consumer === undefined ? [] : [consumer],
      'count the archive',
    );
    return assembleCounts(rows.map((r) => ({ consumer: r.consumer, state: r.state, n: Number(r.n), bytes: Number(r.bytes), oldest: r.oldest })), consumer);
  }

  async search(): Promise<ArchiveSearch> {
    if (this.searchInfo) return this.searchInfo;
    const rows = await this.one<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [this.errorIndexName()], 'read the archive indexes');
    const trigram = rows[0]?.found === true;
    this.searchInfo = {
      errorText: trigram ? 'trigram' : 'scan',
      body: 'full-text',
      note: trigram ? undefined : 'no trigram index on error messages: the extension pg_trgm could not be created when the archive was set up (it needs the database owner, or a superuser before PostgreSQL 13); error-text filters read rows in time order. Create it (CREATE EXTENSION pg_trgm) and the index, as docs/archive.md shows.',
    };
    return this.searchInfo;
  }

  private errorIndexName(): string {
    // The index beside the archive table: same schema, prefix + archive_error.
    return this.t.archive.replace(/"([^"]*)archive"$/, '"$1archive_error"');
  }

  async lastId(): Promise<string | undefined> {
    const r = await this.one<{ id: string | null }>(`SELECT max(id)::text AS id FROM ${this.t.archive}`, [], 'read the archive');
    return r[0]?.id ?? undefined;
  }

  claim(filter: ArchiveFilter, options: ArchiveClaimOptions): Promise<{ rows: ArchiveRecord[]; next: string | undefined }> {
    const n = pageLimit(options.limit, 10_000);
    return this.store.transaction(async (c) => {
      const q = this.sql();
      const where = whereOf(filter, q);
      const k = keyset('oldest', options.after, q);
      // The cursor moves past rows another holds: a claim never waits for another's.
      const seen = await this.q<{ id: string; failed_at: Date; free: boolean }>(c, `SELECT a.id::text AS id, a.failed_at, (a.claim_until IS NULL OR a.claim_until < now()) AS free FROM ${this.t.archive} a WHERE ${where}${k.where} ORDER BY ${k.orderBy} LIMIT ${n}`, q.params, 'claim archived messages');
      const last = seen[seen.length - 1];
      const next = seen.length === n && last !== undefined ? cursorOf({ failedAt: last.failed_at, id: last.id }) : undefined;
      const wanted = seen.filter((r) => r.free).map((r) => r.id);
      if (wanted.length === 0) return { rows: [], next };
      const taken = await this.q<{ id: string }>(
        c,
        `UPDATE ${this.t.archive} SET claim_owner = $1, claim_until = now() + make_interval(secs => $2::double precision / 1000)
         WHERE id IN (SELECT id FROM ${this.t.archive} WHERE id = ANY($3::bigint[]) AND (claim_until IS NULL OR claim_until < now()) FOR UPDATE SKIP LOCKED) RETURNING id::text AS id`,
        [options.owner, options.leaseMs, wanted],
        'claim archived messages',
      );
      if (taken.length === 0) return { rows: [], next };
      const rows = await this.q<SummaryRow & PayloadRow>(c, this.full('a.id = ANY($1::bigint[])', 'ORDER BY a.failed_at, a.id'), [taken.map((r) => r.id)], 'claim archived messages');
      return { rows: rows.map(toRecord), next };
    }, 'claim archived messages');
  }

  markReplayed(ids: readonly string[], mark: ArchiveReplayMark): Promise<number> {
    if (ids.length === 0) return Promise.resolve(0);
    return this.store.transaction(async (c) => {
      const rows = await this.q<RowInfo>(c, `SELECT ${INFO} FROM ${this.t.archive} a WHERE a.id = ANY($1::bigint[]) AND a.claim_owner = $2 ORDER BY a.id FOR UPDATE`, [[...ids], mark.owner], 'mark archived messages replayed');
      return this.changeState(c, rows, 'replayed', 'replay_count = replay_count + 1, replayed_at = $2, replayed_by = $3, claim_owner = NULL, claim_until = NULL', [mark.at, mark.actor]);
    }, 'mark archived messages replayed');
  }

  async release(ids: readonly string[], owner: string): Promise<number> {
    if (ids.length === 0) return 0;
    return this.store.withClient(async (c) => (await this.store.query(c, `UPDATE ${this.t.archive} SET claim_owner = NULL, claim_until = NULL WHERE id = ANY($1::bigint[]) AND claim_owner = $2`, [[...ids], owner], 'release archived messages')).rowCount ?? 0, 'release archived messages');
  }

  /** Locks up to `limit` matching rows no claim holds, skipping rows another transaction holds. */
  private selectFree(c: PgClient, filter: ArchiveFilter, limit: number, extra = ''): Promise<RowInfo[]> {
    const q = this.sql();
    const where = whereOf(filter, q);
    return this.q<RowInfo>(c, `SELECT ${INFO} FROM ${this.t.archive} a WHERE ${where}${extra} AND (a.claim_until IS NULL OR a.claim_until < now()) ORDER BY a.failed_at, a.id LIMIT ${limit} FOR UPDATE SKIP LOCKED`, q.params, 'select archived messages');
  }

  resolve(filter: ArchiveFilter, mark: ArchiveResolveMark, limit: number): Promise<number> {
    const n = pageLimit(limit, 10_000);
    return this.store.transaction(async (c) => {
      const rows = await this.selectFree(c, filter, n, ` AND a.state <> 'resolved'`);
      return this.changeState(c, rows, 'resolved', 'resolved_at = $2, resolved_by = $3, resolve_reason = $4', [mark.at, mark.actor, mark.reason]);
    }, 'resolve archived messages');
  }

  purge(filter: ArchiveFilter, limit: number): Promise<number> {
    const n = pageLimit(limit, 10_000);
    return this.store.transaction(async (c) => (await this.deleteRows(c, await this.selectFree(c, filter, n))).deleted, 'purge archived messages');
  }

  async markViewed(ids: readonly string[], at: Date): Promise<void> {
    if (ids.length === 0) return;
    await this.one(`UPDATE ${this.t.archive} SET viewed_at = $1 WHERE id = ANY($2::bigint[])`, [at, [...ids]], 'note archived messages viewed');
  }

  private async pruneWhere(c: PgClient, rule: ArchivePruneRule): Promise<{ where: string; params: unknown[] } | undefined> {
    const parts: string[] = [];
    const params: unknown[] = [rule.consumer];
    if (rule.before !== undefined) {
      params.push(rule.before);
      parts.push(`a.failed_at < $${params.length}`);
    }
    if (rule.keep !== undefined) {
      const edge = await this.q<{ failed_at: Date; id: string }>(c, `SELECT failed_at, id::text AS id FROM ${this.t.archive} WHERE consumer = $1 ORDER BY failed_at DESC, id DESC LIMIT 1 OFFSET $2`, [rule.consumer, rule.keep], 'read the archive');
      if (edge[0] !== undefined) {
        params.push(edge[0].failed_at, edge[0].id);
        parts.push(`(a.failed_at, a.id) <= ($${params.length - 1}, $${params.length})`);
      }
    }
    return parts.length === 0 ? undefined : { where: `a.consumer = $1 AND (${parts.join(' OR ')})`, params };
  }

  prunable(rule: ArchivePruneRule): Promise<ArchivePruneBatch> {
    return this.store.withClient(async (c) => {
      const w = await this.pruneWhere(c, rule);
      if (w === undefined) return { deleted: 0, unviewed: 0 };
      const r = await this.q<{ n: string; unviewed: string }>(c, `SELECT count(*)::text AS n, (count(*) - count(a.viewed_at))::text AS unviewed FROM ${this.t.archive} a WHERE ${w.where}`, w.params, 'count rows retention would delete');
      return { deleted: Number(r[0]?.n ?? 0), unviewed: Number(r[0]?.unviewed ?? 0) };
    }, 'count rows retention would delete');
  }

  prune(rule: ArchivePruneRule, limit: number): Promise<ArchivePruneBatch> {
    const n = pageLimit(limit, 10_000);
    return this.store.transaction(async (c) => {
      const w = await this.pruneWhere(c, rule);
      if (w === undefined) return { deleted: 0, unviewed: 0 };
      const rows = await this.q<RowInfo>(c, `SELECT ${INFO} FROM ${this.t.archive} a WHERE ${w.where} AND (a.claim_until IS NULL OR a.claim_until < now()) ORDER BY a.failed_at, a.id LIMIT ${n} FOR UPDATE SKIP LOCKED`, w.params, 'prune the archive');
      return this.deleteRows(c, rows);
    }, 'prune the archive');
  }
}

interface PayloadRow {
  error_stack: string | null;
  headers: string;
  properties: string;
  body: Buffer | null;
  body_text: string | null;
}

function toRecord(r: SummaryRow & PayloadRow): ArchiveRecord {
  return { ...toSummary(r), errorStack: r.error_stack, headers: r.headers, properties: r.properties, body: r.body_text !== null ? Buffer.from(r.body_text, 'utf8') : (r.body ?? Buffer.alloc(0)) };
}
