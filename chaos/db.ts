/**
 * The run's database, on either store backend: warren's store, and two tables of the
 * run's own beside warren's. `chaos_expected` holds every message the producer committed
 * (in the same transaction as its outbox row); `chaos_effects` is the handler's side
 * effect, one row per run that committed, with no unique constraint, so a handler that
 * ran and committed twice for one message shows up as two rows.
 */
import { archivedMessage, parkedIdentity, type ArchiveState, type Store } from '../src/index.js';

export type StoreKind = 'postgres' | 'sqlite';

/** Where the run's database is. */
export interface DbConfig {
  readonly store: StoreKind;
  /** PostgreSQL connection string (store `postgres`). */
  readonly pgUrl: string;
  /** SQLite file (store `sqlite`). */
  readonly sqliteFile: string;
}

/** A statement runner over either backend's transaction handle. */
interface Sql {
  all<R>(tx: unknown, sql: string, params?: unknown[]): Promise<R[]>;
  run(tx: unknown, sql: string, params?: unknown[]): Promise<void>;
}

interface PgTx {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}
interface SqliteTx {
  prepare(sql: string): { all(...params: unknown[]): unknown[]; run(...params: unknown[]): unknown };
}

/** `?` placeholders become `$1`, `$2`, ... for PostgreSQL. */
function numbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

const pgSql: Sql = {
  async all<R>(tx: unknown, sql: string, params: unknown[] = []) {
    return (await (tx as PgTx).query(numbered(sql), params)).rows as R[];
  },
  async run(tx: unknown, sql: string, params: unknown[] = []) {
    await (tx as PgTx).query(numbered(sql), params);
  },
};

const sqliteSql: Sql = {
  async all<R>(tx: unknown, sql: string, params: unknown[] = []) {
    return (tx as SqliteTx).prepare(sql).all(...params) as R[];
  },
  async run(tx: unknown, sql: string, params: unknown[] = []) {
    (tx as SqliteTx).prepare(sql).run(...params);
  },
};

/** A message as the producer recorded it. */
export interface ExpectedRow {
  readonly seq: number;
  readonly message_id: string;
  readonly kind: string;
  readonly via: string;
}

/** A retry-table row, as the check reads it. */
export interface RetryRowState {
  readonly message_id: string;
  readonly paused: boolean;
  readonly tenant: string | null;
  readonly dependency: string;
  readonly waits: number;
}

/** An outbox row's state, for the evidence of a lost message. */
export interface OutboxState {
  readonly message_id: string;
  readonly sent: boolean;
  readonly failed: boolean;
  readonly attempts: number;
}

/**
 * One row of the failure archive, as the check reads it: the parked copy it holds (its
 * failure from the stored headers), the identity the archive keyed it by, and that
 * identity computed again from the stored headers and body.
 */
export interface ArchiveRowState {
  readonly id: string;
  readonly messageId: string;
  readonly consumer: string;
  readonly state: ArchiveState;
  /** The row's identity column (unique per consumer: it cannot show a doubled row by itself). */
  readonly identity: string;
  /** `parkedIdentity` of the stored message: equal to `identity` unless a row's bytes and its key disagree. */
  readonly recomputedIdentity: string;
  readonly reason: string;
  readonly errorClass: string;
  readonly errorMessage: string;
  readonly attempts: number;
  /** `warren-parked-at` of the stored headers: one parking's time. */
  readonly parkedAt: string;
  /** Replays before this parking (`warren-replays`). */
  readonly replays: number;
}

/** The run's database: warren's store and the run's own tables. */
export class ChaosDb {
  private readonly sql: Sql;

  private constructor(
    readonly config: DbConfig,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the backend's own handle
    readonly store: Store<any>,
  ) {
    this.sql = config.store === 'postgres' ? pgSql : sqliteSql;
  }

  /** Opens the store (migrating it) with the options every role of the run uses. */
  static async open(config: DbConfig, options: { poolSize?: number } = {}): Promise<ChaosDb> {
    const common = { pruneIntervalMs: 0 };
    if (config.store === 'postgres') {
      const { postgresStore } = await import('../src/store/postgres/index.js');
      return new ChaosDb(config, postgresStore({ connectionString: config.pgUrl, poolSize: options.poolSize ?? 10, ...common }));
    }
    const { sqliteStore } = await import('../src/store/sqlite/index.js');
    return new ChaosDb(config, sqliteStore({ filename: config.sqliteFile, busyTimeoutMs: 10_000, ...common }));
  }

  /** Creates warren's tables and the run's own (once, by the orchestrator). */
  async setup(): Promise<void> {
    await this.store.migrate();
    await this.store.transaction(async (tx) => {
      await this.sql.run(tx, 'CREATE TABLE chaos_expected (seq integer PRIMARY KEY, message_id text NOT NULL UNIQUE, kind text NOT NULL, via text NOT NULL)');
      // No unique constraint, on purpose: a second committed run of a handler is a second row.
      await this.sql.run(tx, 'CREATE TABLE chaos_effects (message_id text NOT NULL, consumer text NOT NULL, pid integer NOT NULL, attempt integer NOT NULL)');
    });
  }

  /** The handler's side effect, inside the idempotency guard's transaction. */
  async effect(tx: unknown, messageId: string, consumer: string, attempt: number): Promise<void> {
    await this.sql.run(tx, 'INSERT INTO chaos_effects (message_id, consumer, pid, attempt) VALUES (?, ?, ?, ?)', [messageId, consumer, process.pid, attempt]);
  }

  /**
   * Records a batch of messages in one transaction; `outbox` ones get their outbox row in
   * the same transaction. Returns false when the batch was there already (a commit whose
   * answer was lost, retried), so it is never added twice.
   */
  async addBatch(batch: readonly { seq: number; messageId: string; kind: string; via: string; routingKey: string; payload: unknown }[]): Promise<boolean> {
    const first = batch[0];
    if (!first) return true;
    return this.store.transaction(async (tx) => {
      const seen = await this.sql.all<{ n: number | string }>(tx, 'SELECT count(*) AS n FROM chaos_expected WHERE seq = ?', [first.seq]);
      if (Number(seen[0]?.n ?? 0) > 0) return false;
      for (const m of batch) {
        await this.sql.run(tx, 'INSERT INTO chaos_expected (seq, message_id, kind, via) VALUES (?, ?, ?, ?)', [m.seq, m.messageId, m.kind, m.via]);
        if (m.via === 'outbox') await this.store.outbox.add(tx, m.routingKey, m.payload, { messageId: m.messageId });
      }
      return true;
    });
  }

  private read<R>(sql: string, params: unknown[] = []): Promise<R[]> {
    return this.store.transaction((tx) => this.sql.all<R>(tx, sql, params));
  }

  async expected(): Promise<ExpectedRow[]> {
    return (await this.read<ExpectedRow>('SELECT seq, message_id, kind, via FROM chaos_expected ORDER BY seq')).map((r) => ({ ...r, seq: Number(r.seq) }));
  }

  /** Committed handler runs per message id. */
  async effects(): Promise<Map<string, number>> {
    const rows = await this.read<{ message_id: string; n: number | string }>('SELECT message_id, count(*) AS n FROM chaos_effects GROUP BY message_id');
    return new Map(rows.map((r) => [r.message_id, Number(r.n)]));
  }

  /** Idempotency markers per message id (the unique guard: at most one each). */
  async markers(consumer: string): Promise<Set<string>> {
    const rows = await this.read<{ message_id: string }>(`SELECT message_id FROM ${this.store.tables.processed} WHERE consumer = ?`, [consumer]);
    return new Set(rows.map((r) => r.message_id));
  }

  async retryRows(): Promise<RetryRowState[]> {
    const rows = await this.read<{ message_id: string; paused: boolean | number; tenant: string | null; dependency: string; attempt: number | string }>(
      `SELECT message_id, paused, tenant, dependency, attempt FROM ${this.store.tables.retry}`,
    );
    return rows.map((r) => ({ message_id: r.message_id, paused: r.paused === true || r.paused === 1, tenant: r.tenant, dependency: r.dependency, waits: Number(r.attempt) }));
  }

  async outboxStates(): Promise<OutboxState[]> {
    const rows = await this.read<{ message_id: string; sent: number | boolean; failed: number | boolean; attempts: number | string }>(
      `SELECT message_id, CASE WHEN sent_at IS NULL THEN 0 ELSE 1 END AS sent, CASE WHEN failed_at IS NULL THEN 0 ELSE 1 END AS failed, attempts FROM ${this.store.tables.outbox}`,
    );
    return rows.map((r) => ({ message_id: r.message_id, sent: Number(r.sent) === 1, failed: Number(r.failed) === 1, attempts: Number(r.attempts) }));
  }

  /** Every row of the consumer's failure archive, in any state, with its stored headers decoded. */
  async archiveRows(consumer: string): Promise<ArchiveRowState[]> {
    const out: ArchiveRowState[] = [];
    const text = (v: unknown) => (v === undefined || v === null ? '' : Buffer.isBuffer(v) ? v.toString('utf8') : String(v));
    let after: string | undefined;
    do {
      const page = await this.store.archive.page({ filter: { consumer, states: ['open', 'replayed', 'resolved'] }, order: 'oldest', limit: 1000, ...(after === undefined ? {} : { after }) });
      for (const summary of page.rows) {
        const record = await this.store.archive.get(summary.id);
        if (!record) continue; // deleted meanwhile: nothing deletes in a chaos run
        const m = archivedMessage(record);
        const h = m.headers;
        out.push({
          id: record.id,
          messageId: record.messageId ?? '',
          consumer: record.consumer,
          state: record.state,
          identity: record.identity,
          recomputedIdentity: parkedIdentity(m.parked),
          reason: text(h['warren-parked-reason']),
          errorClass: text(h['warren-error-class']),
          errorMessage: text(h['warren-error-message']),
          attempts: Number(text(h['warren-attempts']) || 0),
          parkedAt: text(h['warren-parked-at']),
          replays: Number(text(h['warren-replays']) || 0),
        });
      }
      after = page.next;
    } while (after !== undefined);
    return out;
  }

  /** Counts for the progress line. */
  async progress(): Promise<{ expected: number; effects: number; retryRows: number }> {
    const [row] = await this.read<{ e: number | string; f: number | string; r: number | string }>(
      `SELECT (SELECT count(*) FROM chaos_expected) AS e, (SELECT count(*) FROM chaos_effects) AS f, (SELECT count(*) FROM ${this.store.tables.retry}) AS r`,
    );
    return { expected: Number(row?.e ?? 0), effects: Number(row?.f ?? 0), retryRows: Number(row?.r ?? 0) };
  }

  close(): Promise<void> {
    return this.store.close();
  }
}
