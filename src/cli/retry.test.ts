/**
 * `warren retry …` against real databases (a SQLite file, a PostgreSQL schema), through
 * the built executable. The broker URL points at a closed port: these commands must
 * not need it, nor a topology.
 */
import { relative } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { retryRowFixture } from '../retry-table/testing/rows.js';
import { BACKENDS, harness, type Harness } from '../store/testing/harness.js';
import type { AnyStore } from '../store/testing/spec.js';
import { parseAt, retryFilterOf } from './commands/retry.js';
import { redactDbUrl, secretsOf } from './context.js';
import { UsageError } from './errors.js';
import { assertBuilt, ROOT, tempDir, warren as run, type RunOptions } from './testing/run.js';

// Each test runs the built CLI several times, one process after another. Node alone takes
// 3-5 s to start on a loaded 2-core machine (0.6 s idle), so the budget is per test, not per run.
vi.setConfig({ testTimeout: 180_000 });

beforeAll(() => assertBuilt());

/** No broker: a retry command that tried to reach one would fail. */
const NO_BROKER = { WARREN_AMQP_URL: 'amqp://guest:guest@127.0.0.1:1', WARREN_MANAGEMENT_URL: 'http://guest:guest@127.0.0.1:1' };

function warren(args: readonly string[], options: RunOptions = {}) {
  return run(args, { ...options, env: { ...NO_BROKER, ...options.env } });
}


/** The flags that point the CLI at a harness's tables; the SQLite file is given relative to the CLI's directory. */
function dbFlags(h: Harness): string[] {
  const s = h.spec;
  if (s.backend === 'sqlite') return ['--db', `sqlite:${relative(ROOT, s.filename)}`, '--table-prefix', s.tablePrefix];
  return ['--db', s.connectionString, '--schema', s.schema, '--table-prefix', s.tablePrefix];
}

function json<T>(text: string): T {
  return JSON.parse(text) as T;
}

/** A fresh namespace with four rows: tenant 42 (due), tenant 7 on tax (due), one later, one with no next attempt. */
async function seeded(backend: (typeof BACKENDS)[number]) {
  const h = await harness(backend);
  const store: AnyStore = h.store();
  const t = store.retryTable;
  const ids = {
    t42: (await t.insert(retryRowFixture({ tenant: '42' }))).id,
    tax: (await t.insert(retryRowFixture({ tenant: '7', dependency: 'tax', errorClass: 'TaxApiError', lastError: 'tax service answered 502' }))).id,
    later: (await t.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + 3_600_000) }))).id,
    none: (await t.insert(retryRowFixture({ nextAttemptAt: null, tenant: '42', consumer: 'billing' }))).id,
  };
  const db = dbFlags(h);
  // The test's own flags come last, so they override the database flags.
  const cli = (args: readonly string[], options: RunOptions = {}) => warren(['retry', ...db, ...args], options);
  return { h, store, t, ids, db, cli };
}

interface ListJson {
  total: number;
  offset: number;
  limit: number;
  rows: Array<{ id: string; messageId: string; tenant: string | null; dependency: string; paused: boolean; nextAttemptAt: string | null; content: string; headers: Record<string, unknown> }>;
}

describe.each(BACKENDS)('warren retry on %s', (backend) => {
  it('lists rows with filters, pages, counts, and prints full rows with --json', async () => {
    const { ids, cli } = await seeded(backend);
    const all = await cli(['list']);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toMatch(/^id\s+consumer\s+dependency\s+tenant\s+error class\s+attempt\s+next attempt\s+paused\s+last error$/m);
    expect(all.stdout).toMatch(new RegExp(`^\\s*${ids.tax}\\s+shipping\\s+tax\\s+7\\s+TaxApiError\\s+1\\s+\\S+ ago \\(\\d{4}-\\d\\d-\\d\\dT[\\d:]+Z\\)\\s+no\\s+tax service answered 502$`, 'm'));
    expect(all.stdout).toMatch(new RegExp(`^\\s*${ids.later}\\s+.*in (59m|1h)[^)]*\\)\\s+no`, 'm'));
    expect(all.stdout).toMatch(new RegExp(`^\\s*${ids.none}\\s+billing\\s+carrier\\s+42\\s+.*\\bnone\\s+no`, 'm'));
    expect(all.stdout).toMatch(/^4 rows\.$/m);

    const carrier = await cli(['list', '--dependency', 'carrier', '--due']);
    expect(carrier.stdout).toContain('1 row matching dependency carrier, due.');

    const page = await cli(['list', '--limit', '1', '--offset', '1']);
    expect(page.stdout).toMatch(/Rows 2 to 2 of 4\. Next page: --offset 2\./);

    const j = await cli(['list', '--tenant', '42', '--json']);
    expect(j.code).toBe(0);
    const listed = json<ListJson>(j.stdout);
    expect(listed.total).toBe(2);
    // Next attempt first, rows with none last; the full row, body and headers included.
    expect(listed.rows.map((r) => r.id)).toEqual([ids.t42, ids.none]);
    expect(listed.rows[0]).toMatchObject({ tenant: '42', dependency: 'carrier', paused: false, headers: { 'warren-waits': 1 } });
    expect(JSON.parse(listed.rows[0]?.content ?? '')).toHaveProperty('n');
    expect(listed.rows[1]?.nextAttemptAt).toBeNull();

    const byId = json<ListJson>((await cli(['list', '--id', `${ids.tax},${ids.later}`, '--json'])).stdout);
    expect(byId.rows.map((r) => r.id).sort()).toEqual([ids.tax, ids.later].sort());

    const none = await cli(['list', '--tenant', 'nobody']);
    expect(none.code).toBe(0);
    expect(none.stderr).toContain('No row matches tenant nobody (4 rows in the retry table).');

    const counted = await cli(['count', '--by', 'dependency', '--json']);
    expect(json(counted.stdout)).toEqual({ filter: {}, total: 4, by: 'dependency', groups: [{ dependency: 'carrier', rows: 3 }, { dependency: 'tax', rows: 1 }] });
    expect((await cli(['count', '--due'])).stdout.trim()).toBe('2 rows match due.');
  });

  it('pauses by tenant (rows added later too), counts paused, and resumes them due now', async () => {
    const { t, ids, cli } = await seeded(backend);
    const paused = await cli(['pause', '--tenant', '42', '--actor', 'alice']);
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toContain('Paused 2 rows matching tenant 42 (recorded as alice).');
    expect(paused.stdout).toContain('Rows of tenant 42 added later are paused too, until `warren retry resume --tenant 42`.');
    expect((await t.insert(retryRowFixture({ tenant: '42' }))).paused).toBe(true);
    expect(json<{ total: number }>((await cli(['count', '--paused', '--json'])).stdout).total).toBe(3);

    const signals = await cli(['signals']);
    expect(signals.code).toBe(0);
    expect(signals.stdout).toMatch(/Retry table: 5 rows, \d due, 3 paused, 0 waiting for a person\./);
    expect(signals.stdout).toMatch(/Pauses in force\n\s+consumer\s+dependency\s+tenant\s+error class\s+by\s+since\n\s+\*\s+\*\s+42\s+\*\s+alice\s+\d{4}-/);
    const sj = json<{ rows: number; paused: number; byDependency: Record<string, { rows: number }>; holds: Array<{ tenant: string; actor: string }> }>((await cli(['signals', '--json'])).stdout);
    expect(sj).toMatchObject({ rows: 5, paused: 3, byDependency: { carrier: { rows: 4 }, tax: { rows: 1 } }, holds: [{ tenant: '42', actor: 'alice' }] });

    const resumed = await cli(['resume', '--tenant', '42', '--due-now'], { env: { WARREN_ACTOR: 'bob' } });
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toContain('Resumed 3 rows matching tenant 42, due now (recorded as bob).');
    expect(resumed.stdout).toContain('Lifted 1 pause: tenant 42 (by alice).');
    expect(await t.count({ paused: true })).toBe(0);
    expect(await t.holds()).toEqual([]);
    // The row that had no next attempt is due now.
    expect(await t.count({ ids: [ids.none], due: true })).toBe(1);
  });

  it('a resume says which rows another pause still holds', async () => {
    const { t, cli } = await seeded(backend);
    await t.pause({ tenant: '42' }, { actor: 'alice' });
    await t.pause({ dependency: 'carrier' }, { actor: 'carol' });
    const r = await cli(['resume', '--dependency', 'carrier', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r.stdout)).toMatchObject({ action: 'resume', rows: 1, stillPaused: 2, liftedPauses: [{ dependency: 'carrier', actor: 'carol' }] });
  });

  it('schedules: none clears the next attempt, a time in the past means now', async () => {
    const { t, ids, cli } = await seeded(backend);
    const cleared = await cli(['schedule', '--id', ids.t42, '--at', 'none']);
    expect(cleared.code, cleared.stderr).toBe(0);
    expect(cleared.stdout).toMatch(/Cleared the next attempt of 1 row matching id \d+ \(recorded as .+\): it waits until someone schedules it/);
    expect((await t.list({ ids: [ids.t42] }))[0]?.nextAttemptAt).toBeNull();
    expect(await t.count({ due: true })).toBe(1);

    const before = Date.now();
    const past = await cli(['schedule', '--id', `${ids.t42},${ids.later}`, '--at', '2001-01-01T00:00:00Z']);
    expect(past.code, past.stderr).toBe(0);
    expect(past.stdout).toContain('2001-01-01T00:00:00Z is in the past, so they are due now.');
    for (const id of [ids.t42, ids.later]) expect((await t.list({ ids: [id] }))[0]?.nextAttemptAt?.getTime()).toBeGreaterThanOrEqual(before - 1000);
    expect(await t.count({ due: true })).toBe(3);

    const later = await cli(['schedule', '--tenant', '7', '--at', '+2h', '--json']);
    const lj = json<{ rows: number; nextAttemptAt: string; inThePast: boolean }>(later.stdout);
    expect(lj).toMatchObject({ rows: 1, inThePast: false });
    expect(Math.abs(new Date(lj.nextAttemptAt).getTime() - (Date.now() + 7_200_000))).toBeLessThan(60_000);

    const bad = await cli(['schedule', '--tenant', '7', '--at', 'tomorrow']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--at: "tomorrow" is not a time\. Give now, none, an ISO time such as 2026-03-01T12:00:00Z/);
    const missing = await cli(['schedule', '--tenant', '7']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/needs --at: now, none, an ISO time/);
  });

  it('parks rows into the outbox, addressed to their parked queue, and the history shows who did what', async () => {
    const { store, t, cli } = await seeded(backend);
    await cli(['pause', '--dependency', 'carrier', '--actor', 'alice']);
    const parked = await cli(['park', '--dependency', 'tax', '--json'], { env: { WARREN_ACTOR: 'bob' } });
    expect(parked.code, parked.stderr).toBe(0);
    expect(json(parked.stdout)).toMatchObject({ action: 'park', rows: 1, actor: 'bob', filter: { dependency: 'tax' }, outboxPending: 1 });
    expect(await t.count()).toBe(3);
    expect(await t.count({ dependency: 'tax' })).toBe(0);
    expect((await store.outbox.lag()).pending).toBe(1);
    const text = await cli(['park', '--tenant', '42']);
    expect(text.stdout).toMatch(/Parked 2 rows matching tenant 42 \(recorded as .+\)\.\nThey are in the outbox, addressed to their parked queues \(3 messages waiting there in all\)/);
    expect((await store.outbox.lag()).pending).toBe(3);

    const history = await cli(['history']);
    expect(history.code, history.stderr).toBe(0);
    const lines = history.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^when\s+actor\s+action\s+filter\s+detail\s+rows$/);
    expect(lines[2]).toMatch(/^\d{4}-\S+Z\s+bob\s+park\s+dependency tax\s+-\s+1$/);
    expect(lines[3]).toMatch(/^\d{4}-\S+Z\s+alice\s+pause\s+dependency carrier\s+pauses later rows\s+3$/);
    const hj = json<{ entries: Array<{ actor: string; action: string; rows: number; filter: object }> }>((await cli(['history', '--limit', '2', '--json'])).stdout);
    expect(hj.entries.map((e) => [e.action, e.rows])).toEqual([
      ['park', 2],
      ['park', 1],
    ]);
  });

  it('an unknown dependency exits 2 listing the known ones; --allow-unknown pauses ahead of the first row', async () => {
    const { t, cli } = await seeded(backend);
    for (const action of ['pause', 'resume', 'park']) {
      const r = await cli([action, '--dependency', 'carier']);
      expect(r.code, action).toBe(2);
      expect(r.stderr).toMatch(/Unknown dependency 'carier'.*Known: carrier, tax\..*--allow-unknown/);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
    const ahead = await cli(['pause', '--dependency', 'new-carrier', '--allow-unknown']);
    expect(ahead.code, ahead.stderr).toBe(0);
    expect(ahead.stdout).toContain('Paused 0 rows matching dependency new-carrier');
    expect((await t.insert(retryRowFixture({ dependency: 'new-carrier' }))).paused).toBe(true);
  });

  it('refuses a change without a filter unless --all, and --all with filters', async () => {
    const { t, cli } = await seeded(backend);
    for (const action of ['pause', 'resume', 'park']) {
      const r = await cli([action]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`\`warren retry ${action}\` needs a filter to say which rows`);
      expect(r.stderr).toContain('pass --all');
    }
    const schedule = await cli(['schedule', '--at', 'now']);
    expect(schedule.code).toBe(2);
    expect((await cli(['pause', '--all', '--tenant', '42'])).stderr).toMatch(/--all means every row; it does not go with filters \(--tenant 42\)/);
    expect(await t.count({ paused: true })).toBe(0);
    const all = await cli(['pause', '--all']);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toMatch(/^Paused 4 rows \(recorded as /);
    expect(all.stdout).toContain('Every row added later is paused too, until `warren retry resume --all`.');
    expect(await t.count({ paused: true })).toBe(4);
    expect((await t.holds()).map((h) => [h.consumer, h.dependency, h.tenant, h.errorClass])).toEqual([[null, null, null, null]]);
  });

  it('says the schema is not set up when the tables are not there (exit 1)', async () => {
    const { cli } = await seeded(backend);
    const r = await cli(['list', '--table-prefix', 'absent_']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/has no warren tables with prefix absent_.*Start the application once .* or run its migrate step/);
  });
});

describe('warren retry: database selection and failures', () => {
  it('without --db or WARREN_DB: exit 2 naming both, with an example', async () => {
    for (const args of [['retry', 'list'], ['retry', 'pause', '--tenant', '42'], ['retry', 'signals']]) {
      const r = await warren(args);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/No database given: pass --db URL or set WARREN_DB .* e\.g\. --db sqlite:data\/warren\.db/);
    }
  });

  it('a missing SQLite file is refused (exit 2) and not created; an unknown --db form is explained', async () => {
    const dir = await tempDir();
    const r = await warren(['retry', 'list'], { env: { WARREN_DB: `sqlite:${dir}/nothing-here.db` } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/WARREN_DB: there is no SQLite database at .*nothing-here\.db/);
    const again = await warren(['retry', 'list', '--db', `${dir}/nothing-here.db`]);
    expect(again.stderr).toMatch(/--db: there is no SQLite database/);
    const odd = await warren(['retry', 'list', '--db', 'mysql://db/shop']);
    expect(odd.code).toBe(2);
    expect(odd.stderr).toMatch(/is neither sqlite:PATH, a path ending in \.db or \.sqlite, nor a postgres:\/\/ URL/);
    const schema = await warren(['retry', 'list', '--db', `${dir}/x.db`, '--schema', 'ops']);
    expect(schema.stderr).toMatch(/--schema is for PostgreSQL only/);
  });

  it('PostgreSQL unreachable: one line, exit 3, no password', async () => {
    const r = await warren(['retry', 'list', '--db', 'postgres://postgres:s3cret-Pa55@127.0.0.1:1/test']);
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^warren: Cannot reach the database at postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/test \(--db\): .*ECONNREFUSED/);
    expect(r.stderr + r.stdout).not.toContain('s3cret-Pa55');
    const viaEnv = await warren(['retry', 'pause', '--tenant', '42'], { env: { WARREN_DB: 'postgres://postgres@127.0.0.1:1/test?password=s3cret-Pa55' } });
    expect(viaEnv.code).toBe(3);
    expect(viaEnv.stderr).toContain('(WARREN_DB)');
    expect(viaEnv.stderr + viaEnv.stdout).not.toContain('s3cret-Pa55');
  });

  it('never prints the database password, whatever the command says', async () => {
    const h = await harness('postgres');
    if (h.spec.backend !== 'postgres') throw new Error('unreachable');
    await h.store().retryTable.insert(retryRowFixture({ lastError: 'boom' }));
    const url = new URL(h.spec.connectionString);
    // The test server trusts local connections, so the password is accepted and ignored.
    url.password = 's3cret-Pa55';
    const flags = ['--db', url.toString(), '--schema', h.spec.schema, '--table-prefix', h.spec.tablePrefix];
    for (const args of [['list'], ['list', '--json'], ['signals'], ['history'], ['pause', '--dependency', 'nope'], ['list', '--table-prefix', 'absent_'], ['list', '--colour']]) {
      const r = await warren(['retry', ...flags, ...args]);
      expect(r.stderr + r.stdout, args.join(' ')).not.toContain('s3cret-Pa55');
    }
    const missing = await warren(['retry', 'list', ...flags, '--table-prefix', 'absent_']);
    expect(missing.stderr).toContain(':***@');
  });

  it('has help with examples for every retry command, and leaves out the broker flags', async () => {
    const group = await warren(['retry', '--help']);
    expect(group.code).toBe(0);
    for (const c of ['list', 'count', 'pause', 'resume', 'schedule', 'park', 'history', 'signals']) {
      expect(group.stdout).toContain(`retry ${c}`);
      const r = await warren(['retry', c, '--help']);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`Usage: warren retry ${c}`);
      expect(r.stdout).toMatch(/Examples:\n {2}warren retry /);
      expect(r.stdout).toContain('--db URL');
      expect(r.stdout).not.toContain('--topology');
    }
    const main = await warren(['--help']);
    expect(main.stdout).toContain('WARREN_DB');
    expect(main.stdout).toContain('WARREN_ACTOR');
  });
});

describe('retry flags', () => {
  it('reads filters, ids repeated or comma-separated, and refuses contradictions', () => {
    expect(retryFilterOf({ tenant: '42', 'error-class': 'X', id: ['3,4', '4', ' 5'], paused: true, 'not-due': true })).toEqual({ tenant: '42', errorClass: 'X', ids: ['3', '4', '5'], paused: true, due: false });
    expect(retryFilterOf({})).toEqual({});
    expect(() => retryFilterOf({ id: ['12,x'] })).toThrow(/--id: "x" is not a row id/);
    expect(() => retryFilterOf({ id: [''] })).toThrow(UsageError);
    expect(() => retryFilterOf({ tenant: ' ' })).toThrow(/--tenant: " " is not a name/);
    expect(() => retryFilterOf({ paused: true, unpaused: true })).toThrow(/--paused and --unpaused exclude each other/);
    expect(() => retryFilterOf({ due: true, 'not-due': true })).toThrow(/--due and --not-due/);
  });
  it('reads --at', () => {
    const now = Date.parse('2026-03-01T12:00:00Z');
    expect(parseAt('now', now)).toBe('now');
    expect(parseAt('NONE', now)).toBeNull();
    expect(parseAt('+30m', now)).toEqual(new Date('2026-03-01T12:30:00Z'));
    expect(parseAt('2026-03-02T06:00:00Z', now)).toEqual(new Date('2026-03-02T06:00:00Z'));
    expect(parseAt('2026-03-02 06:00+01:00', now)).toEqual(new Date('2026-03-02T05:00:00Z'));
    for (const bad of ['tomorrow', '30m', '2026-13-45T00:00:00Z', '']) expect(() => parseAt(bad, now)).toThrow(/--at: .* is not a time/);
  });
  it('masks database passwords, in the user part and as a parameter', () => {
    expect(redactDbUrl('postgres://app:s3cret@db/shop')).toBe('postgres://app:***@db/shop');
    expect(redactDbUrl('postgres://app@db/shop?sslmode=require&password=s3cret')).toBe('postgres://app@db/shop?sslmode=require&password=***');
    expect(secretsOf('postgres://app@db/shop?password=s3cr%40t')).toEqual(['s3cr@t', 's3cr%40t']);
  });
});
