import type { MigrationReport, StoreTables } from '../index.js';
import type { PgClient } from './driver.js';

/** One schema version: statements run in one transaction, recorded in `<prefix>migrations`. */
interface Migration {
  readonly version: number;
  readonly name: string;
  statements(t: StoreTables, prefix: string): string[];
}

/**
 * PostgreSQL schema, oldest first; append only. Partial indexes keep the relay's and the
 * pruner's scans on the rows they want.
 */
export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'idempotency markers and outbox',
    statements: (t, p) => [
      `CREATE TABLE ${t.processed} (
        message_id text NOT NULL,
        consumer text NOT NULL,
        processed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (message_id, consumer)
      )`,
      `CREATE INDEX "${p}processed_at" ON ${t.processed} (processed_at)`,
      `CREATE TABLE ${t.outbox} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id text NOT NULL,
        exchange text,
        routing_key text NOT NULL,
        content text NOT NULL,
        properties jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        attempts integer NOT NULL DEFAULT 0,
        last_error text,
        sent_at timestamptz,
        failed_at timestamptz
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
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        message_id text NOT NULL,
        correlation_id text,
        consumer text NOT NULL,
        queue text NOT NULL,
        parked_queue text NOT NULL,
        exchange text NOT NULL,
        routing_key text NOT NULL,
        content text NOT NULL,
        properties jsonb NOT NULL,
        attempt integer NOT NULL,
        next_attempt_at timestamptz,
        last_error text NOT NULL,
        error_class text NOT NULL,
        dependency text NOT NULL,
        tenant text,
        paused boolean NOT NULL DEFAULT false,
        paused_manually boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (consumer, message_id)
      )`,
      `CREATE INDEX "${p}retry_due" ON ${t.retry} (next_attempt_at, id) WHERE NOT paused AND next_attempt_at IS NOT NULL`,
      `CREATE INDEX "${p}retry_dependency" ON ${t.retry} (dependency, tenant)`,
      `CREATE TABLE ${t.retryHolds} (
        consumer text NOT NULL,
        dependency text NOT NULL,
        tenant text NOT NULL,
        error_class text NOT NULL,
        actor text NOT NULL,
        since timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, dependency, tenant, error_class, actor)
      )`,
      `CREATE TABLE ${t.retryAudit} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT now(),
        actor text NOT NULL,
        action text NOT NULL,
        filter jsonb NOT NULL,
        detail jsonb NOT NULL,
        rows integer NOT NULL
      )`,
      // Which outbox rows the retry table sent, so its scheduler can bound its own backlog.
      `ALTER TABLE ${t.outbox} ADD COLUMN origin text`,
    ],
  },
  {
    version: 3,
    name: 'action record',
    statements: (t, p) => [
      `CREATE TABLE ${t.actions} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at timestamptz NOT NULL,
        actor text NOT NULL,
        action text NOT NULL,
        consumer text,
        filter jsonb,
        count integer NOT NULL,
        outcome text NOT NULL,
        detail jsonb
      )`,
      `CREATE INDEX "${p}actions_at" ON ${t.actions} (at)`,
    ],
  },
];

/** The newest version this code knows. */
export const LATEST = MIGRATIONS.reduce((m, x) => Math.max(m, x.version), 0);

/**
 * Applies what is missing, in one transaction that first takes an advisory lock keyed by
 * the table names: two processes starting at once take turns, and the second finds
 * nothing left to do. `schema`, when given, is created if missing.
 */
export async function applyMigrations(client: PgClient, t: StoreTables, prefix: string, schema: string | undefined): Promise<MigrationReport> {
  await client.query('BEGIN');
  try {
    // Stores with other prefixes may create the same schema at the same time: lock it first.
    if (schema !== undefined) {
      await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`warren.schema:${schema}`]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
    }
    await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`warren.migrate:${t.migrations}`]);
    await client.query(`CREATE TABLE IF NOT EXISTS ${t.migrations} (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Set((await client.query<{ version: number }>(`SELECT version FROM ${t.migrations}`)).rows.map((r) => Number(r.version)));
    const applied: number[] = [];
    for (const m of MIGRATIONS) {
      if (done.has(m.version)) continue;
      for (const sql of m.statements(t, prefix)) await client.query(sql);
      await client.query(`INSERT INTO ${t.migrations} (version, name) VALUES ($1, $2)`, [m.version, m.name]);
      applied.push(m.version);
    }
    await client.query('COMMIT');
    return { applied, version: Math.max(0, ...done, ...applied) };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** The schema version in the database; 0 when warren's tables are not there. */
export async function schemaVersion(client: PgClient, t: StoreTables): Promise<number> {
  const { rows } = await client.query<{ exists: boolean }>('SELECT to_regclass($1) IS NOT NULL AS exists', [t.migrations]);
  if (!rows[0]?.exists) return 0;
  const max = await client.query<{ v: number | null }>(`SELECT max(version) AS v FROM ${t.migrations}`);
  return Number(max.rows[0]?.v ?? 0);
}
