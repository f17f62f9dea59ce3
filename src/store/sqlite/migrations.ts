import type { MigrationReport, StoreTables } from '../index.js';

/** One schema version: statements run in one transaction, recorded in `<prefix>migrations`. */
interface Migration {
  readonly version: number;
  readonly name: string;
  statements(t: StoreTables, prefix: string): string[];
}

/**
 * SQLite schema, oldest first; append only. Times are Unix milliseconds (INTEGER). The
 * outbox id is AUTOINCREMENT so ids never repeat after pruning and order is insertion
 * order. `lease_*` reserve rows for one relay between claim and mark.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'idempotency markers and outbox',
    statements: (t, p) => [
      `CREATE TABLE ${t.processed} (
        message_id TEXT NOT NULL,
        consumer TEXT NOT NULL,
        processed_at INTEGER NOT NULL,
        PRIMARY KEY (message_id, consumer)
      ) WITHOUT ROWID`,
      `CREATE INDEX "${p}processed_at" ON ${t.processed} (processed_at)`,
      `CREATE TABLE ${t.outbox} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL,
        exchange TEXT,
        routing_key TEXT NOT NULL,
        content TEXT NOT NULL,
        properties TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        sent_at INTEGER,
        failed_at INTEGER,
        lease_owner TEXT,
        lease_until INTEGER
      )`,
      `CREATE INDEX "${p}outbox_pending" ON ${t.outbox} (id) WHERE sent_at IS NULL AND failed_at IS NULL`,
      `CREATE INDEX "${p}outbox_sent" ON ${t.outbox} (sent_at) WHERE sent_at IS NOT NULL`,
    ],
  },
  {
    version: 2,
    name: 'retry table',
    // Holds store '' for "any" so that their primary key can hold every column. A row is
    // paused by a hold that matches it, or by hand (by id or state: `paused_manually`).
    statements: (t, p) => [
      `CREATE TABLE ${t.retry} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL,
        correlation_id TEXT,
        consumer TEXT NOT NULL,
        queue TEXT NOT NULL,
        parked_queue TEXT NOT NULL,
        exchange TEXT NOT NULL,
        routing_key TEXT NOT NULL,
        content TEXT NOT NULL,
        properties TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        next_attempt_at INTEGER,
        last_error TEXT NOT NULL,
        error_class TEXT NOT NULL,
        dependency TEXT NOT NULL,
        tenant TEXT,
        paused INTEGER NOT NULL DEFAULT 0,
        paused_manually INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        UNIQUE (consumer, message_id)
      )`,
      `CREATE INDEX "${p}retry_due" ON ${t.retry} (next_attempt_at, id) WHERE paused = 0 AND next_attempt_at IS NOT NULL`,
      `CREATE INDEX "${p}retry_dependency" ON ${t.retry} (dependency, tenant)`,
      `CREATE TABLE ${t.retryHolds} (
        consumer TEXT NOT NULL,
        dependency TEXT NOT NULL,
        tenant TEXT NOT NULL,
        error_class TEXT NOT NULL,
        actor TEXT NOT NULL,
        since INTEGER NOT NULL,
        PRIMARY KEY (consumer, dependency, tenant, error_class, actor)
      ) WITHOUT ROWID`,
      `CREATE TABLE ${t.retryAudit} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        filter TEXT NOT NULL,
        detail TEXT NOT NULL,
        rows INTEGER NOT NULL
      )`,
      // Which outbox rows the retry table sent, so its scheduler can bound its own backlog.
      `ALTER TABLE ${t.outbox} ADD COLUMN origin TEXT`,
    ],
  },
  {
    version: 3,
    name: 'action record',
    statements: (t, p) => [
      `CREATE TABLE ${t.actions} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        consumer TEXT,
        filter TEXT,
        count INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        detail TEXT
      )`,
      `CREATE INDEX "${p}actions_at" ON ${t.actions} (at)`,
    ],
  },
  {
    version: 4,
    name: 'failure archive',
    // The archive row is narrow (what lists, filters and counts read); the bytes are in the
    // payload table. A text body is kept as text (the same bytes) so that it can be
    // searched; any other body as a BLOB. The group table holds exact counts per consumer,
    // state and fingerprint, changed in the same transaction as the rows.
    statements: (t, p) => [
      `CREATE TABLE ${t.archive} (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        consumer TEXT NOT NULL,
        identity TEXT NOT NULL,
        message_id TEXT,
        routing_key TEXT NOT NULL,
        exchange TEXT,
        error_class TEXT,
        error_message TEXT,
        reason TEXT,
        attempts INTEGER,
        replays INTEGER NOT NULL DEFAULT 0,
        fingerprint TEXT NOT NULL,
        failed_at INTEGER NOT NULL,
        parked_at INTEGER,
        archived_at INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'open',
        claim_owner TEXT,
        claim_until INTEGER,
        replay_count INTEGER NOT NULL DEFAULT 0,
        replayed_at INTEGER,
        replayed_by TEXT,
        resolved_at INTEGER,
        resolved_by TEXT,
        resolve_reason TEXT,
        viewed_at INTEGER,
        body_bytes INTEGER NOT NULL,
        not_indexed TEXT,
        UNIQUE (consumer, identity)
      )`,
      `CREATE INDEX "${p}archive_time" ON ${t.archive} (consumer, failed_at, id)`,
      `CREATE INDEX "${p}archive_group" ON ${t.archive} (consumer, state, fingerprint, failed_at, id)`,
      `CREATE INDEX "${p}archive_message" ON ${t.archive} (consumer, message_id) WHERE message_id IS NOT NULL`,
      `CREATE TABLE ${t.archivePayload} (
        id INTEGER PRIMARY KEY,
        error_stack TEXT,
        headers TEXT NOT NULL,
        properties TEXT NOT NULL,
        body BLOB,
        body_text TEXT
      )`,
      `CREATE TABLE ${t.archiveHeaders} (
        consumer TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        failed_at INTEGER NOT NULL,
        row_id INTEGER NOT NULL,
        PRIMARY KEY (consumer, name, value, failed_at, row_id)
      ) WITHOUT ROWID`,
      `CREATE INDEX "${p}archive_headers_row" ON ${t.archiveHeaders} (row_id)`,
      `CREATE TABLE ${t.archiveGroups} (
        consumer TEXT NOT NULL,
        state TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        count INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        first_at INTEGER,
        last_at INTEGER,
        error_class TEXT,
        sample_message TEXT,
        sample_id INTEGER,
        PRIMARY KEY (consumer, state, fingerprint)
      ) WITHOUT ROWID`,
      `CREATE VIRTUAL TABLE ${t.archiveSearch} USING fts5(body, content='', contentless_delete=1)`,
    ],
  },
  {
    version: 5,
    name: 'archive pages by state',
    // A page of one state (the open failures, what lists show) in failure-time order,
    // read from the index in that order: with the state outside the time index, the
    // planner took the group index and sorted every open row of the consumer for a page.
    statements: (t, p) => [`CREATE INDEX "${p}archive_state_time" ON ${t.archive} (consumer, state, failed_at, id)`],
  },
  {
    version: 6,
    name: 'consumer control',
    // One row per consumer ever paused: every running consumer with `control` reads its own.
    // A resume keeps the row, saying who resumed, so a follower can log it.
    statements: (t) => [
      `CREATE TABLE ${t.control} (
        consumer TEXT PRIMARY KEY,
        paused INTEGER NOT NULL,
        reason TEXT NOT NULL,
        actor TEXT NOT NULL,
        since INTEGER NOT NULL,
        resumed_by TEXT,
        resumed_at INTEGER
      ) WITHOUT ROWID`,
    ],
  },
  {
    version: 7,
    name: 'shared breakers',
    // One row per consumer whose breaker was ever shared: open while some process says its
    // dependency is down, closed (with who and when) once a probe succeeded.
    statements: (t) => [
      `CREATE TABLE ${t.breakers} (
        consumer TEXT PRIMARY KEY,
        open INTEGER NOT NULL,
        reason TEXT NOT NULL,
        since INTEGER NOT NULL,
        opened_by TEXT NOT NULL,
        closed_at INTEGER,
        closed_by TEXT
      ) WITHOUT ROWID`,
    ],
  },
];

/** The newest version this code knows. */
export const LATEST = MIGRATIONS.reduce((m, x) => Math.max(m, x.version), 0);

/** What the migration functions need: run SQL inside the store's write transaction. */
export interface MigrationTarget {
  exec(sql: string): void;
  all(sql: string, ...params: unknown[]): unknown[];
  run(sql: string, ...params: unknown[]): void;
}

/** The `<prefix>migrations` table, created if missing (inside the caller's transaction). */
export function ensureMigrationsTable(db: MigrationTarget, t: StoreTables): void {
  db.exec(`CREATE TABLE IF NOT EXISTS ${t.migrations} (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
}

/** Versions applied so far. */
export function appliedVersions(db: MigrationTarget, t: StoreTables): number[] {
  return (db.all(`SELECT version FROM ${t.migrations} ORDER BY version`) as Array<{ version: number }>).map((r) => Number(r.version));
}

/**
 * Applies what is missing. Runs inside BEGIN IMMEDIATE (the caller's), so two processes
 * starting together take turns and the second finds nothing left to do.
 */
export function applyMigrations(db: MigrationTarget, t: StoreTables, prefix: string): MigrationReport {
  ensureMigrationsTable(db, t);
  const done = new Set(appliedVersions(db, t));
  const applied: number[] = [];
  for (const m of MIGRATIONS) {
    if (done.has(m.version)) continue;
    for (const sql of m.statements(t, prefix)) db.exec(sql);
    db.run(`INSERT INTO ${t.migrations} (version, name, applied_at) VALUES (?, ?, ?)`, m.version, m.name, Date.now());
    applied.push(m.version);
  }
  return { applied, version: Math.max(0, ...done, ...applied) };
}
