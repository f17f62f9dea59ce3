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
