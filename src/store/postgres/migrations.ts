import type { MigrationReport, StoreTables } from '../index.js';
import type { PgClient } from './driver.js';

/** One schema version: statements run in one transaction, recorded in `<prefix>migrations`. */
interface Migration {
  readonly version: number;
  readonly name: string;
  statements(t: StoreTables, prefix: string): string[];
  /** Steps that depend on the server (an extension), after the statements, in the same transaction. */
  run?(client: PgClient, t: StoreTables, prefix: string): Promise<void>;
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
  {
    version: 4,
    name: 'failure archive',
    // As on SQLite: a narrow row, its bytes in the payload table (a text body as text, so
    // full-text search can index it), the searchable header values with the failure time,
    // and exact counts per consumer, state and fingerprint.
    statements: (t, p) => [
      `CREATE TABLE ${t.archive} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        consumer text NOT NULL,
        identity text NOT NULL,
        message_id text,
        routing_key text NOT NULL,
        exchange text,
        error_class text,
        error_message text,
        reason text,
        attempts integer,
        replays integer NOT NULL DEFAULT 0,
        fingerprint text NOT NULL,
        failed_at timestamptz NOT NULL,
        parked_at timestamptz,
        archived_at timestamptz NOT NULL,
        state text NOT NULL DEFAULT 'open',
        claim_owner text,
        claim_until timestamptz,
        replay_count integer NOT NULL DEFAULT 0,
        replayed_at timestamptz,
        replayed_by text,
        resolved_at timestamptz,
        resolved_by text,
        resolve_reason text,
        viewed_at timestamptz,
        body_bytes integer NOT NULL,
        not_indexed text,
        UNIQUE (consumer, identity)
      )`,
      `CREATE INDEX "${p}archive_time" ON ${t.archive} (consumer, failed_at, id)`,
      `CREATE INDEX "${p}archive_group" ON ${t.archive} (consumer, state, fingerprint, failed_at, id)`,
      `CREATE INDEX "${p}archive_message" ON ${t.archive} (consumer, message_id) WHERE message_id IS NOT NULL`,
      `CREATE TABLE ${t.archivePayload} (
        id bigint PRIMARY KEY,
        error_stack text,
        headers text NOT NULL,
        properties text NOT NULL,
        body bytea,
        body_text text
      )`,
      `CREATE INDEX "${p}archive_body" ON ${t.archivePayload} USING gin (to_tsvector('simple', left(body_text, 65536)))`,
      `CREATE TABLE ${t.archiveHeaders} (
        consumer text NOT NULL,
        name text NOT NULL,
        value text NOT NULL,
        failed_at timestamptz NOT NULL,
        row_id bigint NOT NULL,
        PRIMARY KEY (consumer, name, value, failed_at, row_id)
      )`,
      `CREATE INDEX "${p}archive_headers_row" ON ${t.archiveHeaders} (row_id)`,
      `CREATE TABLE ${t.archiveGroups} (
        consumer text NOT NULL,
        state text NOT NULL,
        fingerprint text NOT NULL,
        count bigint NOT NULL,
        bytes bigint NOT NULL,
        first_at timestamptz,
        last_at timestamptz,
        error_class text,
        sample_message text,
        sample_id bigint,
        PRIMARY KEY (consumer, state, fingerprint)
      )`,
    ],
    // Error-text search by trigram when pg_trgm can be had: created if missing (a trusted
    // extension since PostgreSQL 13, so a database owner may), else the archive scans.
    async run(client, t, p) {
      await client.query('SAVEPOINT warren_trgm');
      try {
        await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', ['warren.extension:pg_trgm']);
        await client.query('CREATE EXTENSION IF NOT EXISTS pg_trgm');
        const { rows } = await client.query<{ schema: string }>("SELECT n.nspname AS schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'");
        const schema = rows[0]?.schema;
        if (schema === undefined) throw new Error('pg_trgm is not installed');
        await client.query(`CREATE INDEX "${p}archive_error" ON ${t.archive} USING gin (error_message "${schema.replace(/"/g, '""')}".gin_trgm_ops)`);
        await client.query('RELEASE SAVEPOINT warren_trgm');
      } catch {
        await client.query('ROLLBACK TO SAVEPOINT warren_trgm');
      }
    },
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
        consumer text PRIMARY KEY,
        paused boolean NOT NULL,
        reason text NOT NULL,
        actor text NOT NULL,
        since timestamptz NOT NULL,
        resumed_by text,
        resumed_at timestamptz
      )`,
    ],
  },
  {
    version: 7,
    name: 'shared breakers',
    // One row per consumer whose breaker was ever shared: open while some process says its
    // dependency is down, closed (with who and when) once a probe succeeded.
    statements: (t) => [
      `CREATE TABLE ${t.breakers} (
        consumer text PRIMARY KEY,
        open boolean NOT NULL,
        reason text NOT NULL,
        since timestamptz NOT NULL,
        opened_by text NOT NULL,
        closed_at timestamptz,
        closed_by text
      )`,
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
      await m.run?.(client, t, prefix);
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
