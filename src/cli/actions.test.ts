/**
 * The action record from the command line: `parked replay` and `parked purge` record to
 * --audit-file or to the database of --db, `outbox release` and the retry-table changes to
 * their database; the actor is --actor, else $USER. A dry run records nothing.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { groupParked } from '../park/message.js';
import { listParked } from '../park/operations.js';
import { declared, failures, peekIds, publishParked, takeAll } from '../park/testing/fixtures.js';
import { retryRowFixture } from '../retry-table/testing/rows.js';
import { BACKENDS, harness, type Harness } from '../store/testing/harness.js';
import { assertBuilt, ROOT, tempDir, topologyModule, warren } from './testing/run.js';

vi.setConfig({ testTimeout: 180_000 });
beforeAll(() => assertBuilt());

function dbFlags(h: Harness): string[] {
  const s = h.spec;
  if (s.backend === 'sqlite') return ['--db', `sqlite:${relative(ROOT, s.filename)}`, '--table-prefix', s.tablePrefix];
  return ['--db', s.connectionString, '--schema', s.schema, '--table-prefix', s.tablePrefix];
}

async function parkedBilling() {
  const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
  const billing = mod.topology.consumer('billing');
  const conn = await declared(mod.topology);
  const ids = await publishParked(conn, mod.topology, billing, failures(6, (i) => ({ errorClass: i < 4 ? 'HttpError' : 'TypeError', message: i < 4 ? `carrier ${500 + i} down` : 'x is undefined' })));
  return { ...mod, billing, conn, ids };
}

describe('action record from the CLI', () => {
  it('parked replay --fingerprint records who replayed which group, in --audit-file; a dry run records nothing', async () => {
    const p = await parkedBilling();
    const file = join(await tempDir(), 'actions.jsonl');
    const groups = groupParked((await listParked(p.conn, p.billing)).messages);
    const http = groups.find((g) => g.errorClass === 'HttpError')?.fingerprint as string;
    const env = { ...p.env, USER: 'carol' };

    const dry = await warren(['parked', 'replay', 'billing', '--fingerprint', http, '--dry-run', '--audit-file', file], { env });
    expect(dry.code, dry.stderr).toBe(0);
    await expect(readFile(file, 'utf8')).rejects.toThrow(/ENOENT/);

    const r = await warren(['parked', 'replay', 'billing', '--fingerprint', http, '--limit', '3', '--audit-file', file], { env });
    expect(r.code, r.stderr).toBe(0);
    expect((await takeAll(p.conn, p.billing.queue)).map((m) => m.properties.messageId)).toEqual(p.ids.slice(0, 3));
    const lines = (await readFile(file, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ actor: 'carol', action: 'parked.replay', consumer: 'billing', filter: { fingerprint: http }, count: 3, outcome: 'ok', detail: { limit: 3 } });
    expect(await peekIds(p.conn, p.billing.parkedQueue)).toEqual(p.ids.slice(3));
  });

  it.each(BACKENDS)('parked purge records in the database of --db (%s), with --actor', async (backend) => {
    const p = await parkedBilling();
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const r = await warren(['parked', 'purge', 'billing', '--error-class', 'TypeError', '--yes', '--actor', 'dave', '--queue', ...dbFlags(h)], { env: p.env });
    expect(r.code, r.stderr).toBe(0);
    expect(await peekIds(p.conn, p.billing.parkedQueue)).toEqual(p.ids.slice(0, 4));
    const [entry, ...rest] = await store.actions.list();
    expect(rest).toEqual([]);
    expect(entry).toMatchObject({ actor: 'dave', action: 'parked.purge', consumer: 'billing', filter: { errorClass: 'TypeError' }, count: 2, outcome: 'ok', detail: { counted: 2, notFound: 0 } });
  });

  it.each(BACKENDS)('retry pause and resume record in the action record as well as the retry history (%s)', async (backend) => {
    const h = await harness(backend);
    const store = h.store();
    await store.retryTable.insert(retryRowFixture({ tenant: '42' }));
    const cli = (args: string[]) => warren(['retry', ...dbFlags(h), ...args], { env: { USER: 'erin' } });
    expect((await cli(['pause', '--tenant', '42'])).code).toBe(0);
    expect((await cli(['resume', '--tenant', '42', '--due-now'])).code).toBe(0);
    const entries = await store.actions.list();
    expect(entries.map((e) => [e.action, e.actor, e.count, e.filter])).toEqual([
      ['retry.resume', 'erin', 1, { tenant: '42' }],
      ['retry.pause', 'erin', 1, { tenant: '42' }],
    ]);
    expect(entries[0]?.detail).toEqual({ dueNow: true });
  });

  it('a record that cannot be written fails the command, after the change', async () => {
    const p = await parkedBilling();
    const dir = await tempDir();
    // A directory where the file should be: the append fails.
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'TypeError', '--audit-file', dir], { env: p.env });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/The action was not recorded in/);
    expect(await peekIds(p.conn, p.billing.parkedQueue)).toEqual(p.ids.slice(0, 4));
  });
});
