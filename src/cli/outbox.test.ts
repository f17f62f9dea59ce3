/**
 * `warren outbox …` and `warren status --db` against real databases (a SQLite file, a
 * PostgreSQL schema) and the real broker, through the built executable: a row the relay
 * flagged because its exchange does not exist is listed, shown, released, and published
 * once the exchange is there.
 */
import { relative } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { connectWarren, depth, drain, onTeardown, rawConnection, waitFor } from '../../test/helpers.js';
import { retryRowFixture } from '../retry-table/testing/rows.js';
import { BACKENDS, harness, type Harness } from '../store/testing/harness.js';
import type { AnyStore } from '../store/testing/spec.js';
import { assertBuilt, ROOT, topologyModule, warren } from './testing/run.js';

// Each test runs the built CLI several times, one process after another; node alone takes
// seconds to start on a loaded machine, so the budget is per test.
vi.setConfig({ testTimeout: 180_000 });

beforeAll(() => assertBuilt());

function dbFlags(h: Harness): string[] {
  const s = h.spec;
  if (s.backend === 'sqlite') return ['--db', `sqlite:${relative(ROOT, s.filename)}`, '--table-prefix', s.tablePrefix];
  return ['--db', s.connectionString, '--schema', s.schema, '--table-prefix', s.tablePrefix];
}

function json<T>(text: string): T {
  return JSON.parse(text) as T;
}

interface FlaggedJson {
  id: string;
  messageId: string;
  exchange: string | null;
  routingKey: string;
  error: string;
  failedAt: string;
  attempts: number;
  headers: Record<string, unknown>;
  body: string;
}

interface StatusJson {
  ok: boolean;
  problems: Array<{ consumer: string; kind: string; message: string }>;
  database?: {
    outbox: { pending: number; oldestPendingAgeMs: number; failed: number };
    retryTable: { rows: number; due: number; paused: number; waiting: number; oldestDueAgeMs: number };
    maxDueAgeMs: number;
  };
}

/** A declared topology, a store with one row flagged because its exchange does not exist, and a retry row due for 10 minutes. */
async function flaggedRow(backend: (typeof BACKENDS)[number]) {
  const h = await harness(backend);
  const store: AnyStore = h.store();
  const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { [name('audit')]: { bindings: ['order.*'] } } }));
  const queue = [...mod.topology.consumers.values()][0]?.queue as string;
  const app = await connectWarren(mod.topology);
  const missing = `${mod.topology.exchange}.missing`;
  const receipt = await store.transaction((tx) => store.outbox.add(tx, 'order.paid', { orderId: 'o-17', lines: [{ sku: 'A', qty: 2 }] }, { exchange: missing, headers: { tenant: 'acme' } }));
  const relay = store.relay({ publisher: app.publisher, exchange: mod.topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
  await relay.start();
  onTeardown(() => relay.stop());
  await waitFor(async () => (await store.outbox.lag()).failed === 1, 'the row for the missing exchange to be flagged');
  await store.retryTable.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() - 10 * 60_000) }));
  const db = dbFlags(h);
  const cli = (args: readonly string[]) => warren(args, { env: mod.env });
  return { h, store, relay, queue, missing, receipt, db, cli, topology: mod.topology };
}

describe.each(BACKENDS)('warren status --db and warren outbox: %s', (backend) => {
  it('status --db shows the outbox and retry-table figures and exits 1 for a flagged row and an old due row; without --db it is unchanged', async () => {
    const { db, cli } = await flaggedRow(backend);

    const plain = await cli(['status', '--json']);
    expect(plain.stderr).toBe('');
    expect(plain.code).toBe(0);
    expect(json<StatusJson>(plain.stdout).database).toBeUndefined();

    const withDb = await cli(['status', ...db, '--json']);
    expect(withDb.code).toBe(1);
    const s = json<StatusJson>(withDb.stdout);
    expect(s.ok).toBe(false);
    expect(s.database?.outbox).toMatchObject({ pending: 0, failed: 1 });
    expect(s.database?.retryTable).toMatchObject({ rows: 1, due: 1, paused: 0, waiting: 0 });
    expect(s.database?.retryTable.oldestDueAgeMs).toBeGreaterThan(9 * 60_000);
    expect(s.database?.maxDueAgeMs).toBe(5 * 60_000);
    expect(s.problems.filter((p) => p.consumer === 'database').map((p) => p.kind)).toEqual(['outbox-flagged', 'retry-overdue']);
    const messages = s.problems.map((p) => p.message).join('\n');
    expect(messages).toMatch(/1 outbox row is flagged/);
    expect(messages).toMatch(/oldest due retry-table row has been due for 10m/);

    // A higher threshold leaves the flagged row as the only problem.
    const lenient = await cli(['status', ...db, '--max-due-age', '1h']);
    expect(lenient.code).toBe(1);
    expect(lenient.stdout).toMatch(/database \(/);
    expect(lenient.stdout).toMatch(/outbox\s+1\s+0\s+-\s+1/);
    expect(lenient.stdout).toMatch(/retry table\s+1\s+10m \d\ds\s+1\s+0\s+0/);
    expect(lenient.stdout).toContain('1 problem:');
    expect(lenient.stdout).toMatch(/! database: 1 outbox row is flagged/);

    const bad = await cli(['status', ...db, '--max-due-age', 'soon']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--max-due-age: "soon" is not a duration/);
  });

  it('outbox list, show and release a row flagged because its exchange does not exist; once the exchange exists the released row is published', async () => {
    const { store, queue, missing, receipt, db, cli, topology } = await flaggedRow(backend);

    const listed = await cli(['outbox', 'list', ...db, '--json']);
    expect(listed.stderr).toBe('');
    expect(listed.code).toBe(0);
    const { rows, total } = json<{ rows: FlaggedJson[]; total: number }>(listed.stdout);
    expect(total).toBe(1);
    expect(rows[0]).toMatchObject({ id: receipt.id, messageId: receipt.messageId, exchange: missing, routingKey: 'order.paid', attempts: 1 });
    expect(rows[0]?.error).toMatch(/404 NOT_FOUND/);

    const table = await cli(['outbox', 'list', ...db, '--error', 'not_found']);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain(receipt.messageId);
    expect(table.stdout).toContain('1 flagged row matching error containing "not_found".');
    const none = await cli(['outbox', 'list', ...db, '--exchange', topology.exchange]);
    expect(none.code).toBe(0);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(/No flagged outbox row matches exchange .* \(1 flagged row in all\)/);

    const shown = await cli(['outbox', 'show', receipt.id, ...db]);
    expect(shown.stderr).toBe('');
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`Exchange     ${missing}`);
    expect(shown.stdout).toMatch(/Error\s+.*404 NOT_FOUND/);
    expect(shown.stdout).toMatch(/ {2}tenant: acme/);
    expect(shown.stdout).toMatch(/ {2}warren-occurred-at: \d{4}-/);
    expect(shown.stdout).toContain('  {\n    "orderId": "o-17",\n    "lines": [');
    const unknown = await cli(['outbox', 'show', '999999', ...db]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/No flagged outbox row has id 999999/);

    // Without --yes, with stdin not a terminal: refused, nothing released.
    const unconfirmed = await cli(['outbox', 'release', ...db, '--id', receipt.id]);
    expect(unconfirmed.code).toBe(2);
    expect(unconfirmed.stderr).toMatch(/Pass --yes to confirm/);
    const noFilter = await cli(['outbox', 'release', ...db, '--yes']);
    expect(noFilter.code).toBe(2);
    expect(noFilter.stderr).toMatch(/needs a filter/);
    expect((await store.outbox.lag()).failed).toBe(1);

    // The exchange is created (bound to the work queue), then the row released.
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.assertExchange(missing, 'topic', { durable: false });
    onTeardown(async () => void (await ch.deleteExchange(missing).catch(() => undefined)));
    await ch.bindQueue(queue, missing, 'order.*');
    const released = await cli(['outbox', 'release', ...db, '--exchange', missing, '--yes', '--actor', 'alice']);
    expect(released.code).toBe(0);
    expect(released.stdout).toContain('Released 1 row');
    const [recorded] = await store.actions.list({ action: 'outbox.release' });
    expect(recorded).toMatchObject({ actor: 'alice', count: 1, outcome: 'ok', filter: { exchange: missing }, detail: { ids: [receipt.id], counted: 1 } });
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the released row to be published');
    const [message] = await drain(conn, queue);
    expect(message?.properties.messageId).toBe(receipt.messageId);
    expect(message?.fields.exchange).toBe(missing);
    await waitFor(async () => {
      const lag = await store.outbox.lag();
      return lag.pending === 0 && lag.failed === 0;
    }, 'the released row to be marked sent');

    const after = await cli(['outbox', 'list', ...db]);
    expect(after.code).toBe(0);
    expect(after.stderr).toContain('No outbox row is flagged.');
    const again = await cli(['outbox', 'release', ...db, '--id', receipt.id, '--yes']);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/nothing was released/);
  });
});

describe('warren outbox: help and bad input', () => {
  it('has help with examples for every outbox command, leaves out the broker flags, and status --help names --db', async () => {
    const group = await warren(['outbox', '--help']);
    expect(group.code).toBe(0);
    for (const c of ['list', 'show', 'release']) {
      expect(group.stdout).toContain(`outbox ${c}`);
      const r = await warren(['outbox', c, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Usage: warren outbox ${c}`);
      expect(r.stdout).toMatch(/Examples:\n {2}warren outbox /);
      expect(r.stdout).toContain('--db URL');
      expect(r.stdout).not.toContain('--topology');
    }
    const status = await warren(['status', '--help']);
    expect(status.stdout).toContain('--db URL');
    expect(status.stdout).toContain('--max-due-age DURATION');
    expect(status.stdout).toContain('--topology');
  });

  it('names the bad value or missing filter, exit 2, before opening any database', async () => {
    const env = { WARREN_DB: 'sqlite:no/such/warren.db' };
    const cases: Array<[string[], RegExp]> = [
      [['outbox', 'list', '--id', 'abc'], /--id: "abc" is not an outbox row id/],
      [['outbox', 'show'], /needs the ID of a flagged row/],
      [['outbox', 'show', '0'], /"0" is not an outbox row id/],
      [['outbox', 'release', '--yes'], /needs a filter to say which rows/],
      [['outbox', 'release', '--all', '--id', '3', '--yes'], /--all means every flagged row; it does not go with filters \(--id 3\)/],
      [['outbox', 'list'], /there is no SQLite database at .*no\/such\/warren\.db/],
    ];
    for (const [args, expected] of cases) {
      const r = await warren(args, { env });
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toMatch(expected);
    }
    const noDb = await warren(['outbox', 'list']);
    expect(noDb.code).toBe(2);
    expect(noDb.stderr).toMatch(/No database given: pass --db URL or set WARREN_DB/);
  });
});
