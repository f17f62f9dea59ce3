/**
 * The parked commands with --db, through the built executable, on both databases: they
 * read the archive (exact counts and groups over every row, filters, pages, a message's
 * timeline) with the parked queue's depth beside, and act on its rows by id (a paced
 * replay that skips what is done and stops cleanly on Ctrl-C, purge, resolve, export).
 */
import type { ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { queueCounts, waitFor } from '../../test/helpers.js';
import { fingerprintOf, parkedRaw, type ParkedSpec } from '../archive/testing/messages.js';
import { archiveRow } from '../archive/row.js';
import { declared, failures, publishParked, takeAll } from '../park/testing/fixtures.js';
import { ARCHIVE_STATES } from '../store/archive.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { assertBuilt, dbFlags, tempDir, topologyModule, warren, type RunResult } from './testing/run.js';

vi.setConfig({ testTimeout: 240_000 });
beforeAll(() => assertBuilt());

const HOUR = 3_600_000;
const CLASSES = ['HttpError', 'TimeoutError', 'ValidationError'] as const;

/** Row `i` of the seed: three failure groups, four tenants, spread over a week, newest first. */
function seedSpec(i: number, now: number): ParkedSpec & { id: string; tenant: string } {
  const errorClass = CLASSES[i % 3] as string;
  const tenant = `t${i % 4}`;
  return { id: `o-${String(i).padStart(4, '0')}`, tenant, errorClass, error: `${errorClass === 'HttpError' ? 'carrier 503' : errorClass === 'TimeoutError' ? 'timed out' : 'bad field'} for tenant ${tenant}`, at: new Date(now - i * (HOUR / 2) - 60_000), headers: { tenant }, body: JSON.stringify({ note: `order ${i} of tenant ${tenant}` }) };
}

function json<T>(r: RunResult): T {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
}

interface ListJson {
  archived: number;
  queueDepth: number | null;
  rows: Array<{ id: string; messageId: string; failedAt: string; state: string }>;
  next: string | null;
  groups?: Array<{ fingerprint: string; count: number; errorClass: string }>;
}

async function setup(backend: (typeof BACKENDS)[number]) {
  const h = await harness(backend);
  const store = h.store();
  await store.migrate();
  const mod = await topologyModule(({ exchange, name }) => ({ exchange, retry: { delays: ['20ms'], maxAttempts: 2 }, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
  const conn = await declared(mod.topology);
  const billing = mod.topology.consumer('billing');
  const now = Date.now();
  const specs = Array.from({ length: 300 }, (_, i) => seedSpec(i, now));
  for (let i = 0; i < specs.length; i += 100) await store.archive.insert(specs.slice(i, i + 100).map((s) => archiveRow('billing', parkedRaw(s), new Date())));
  // Three parked messages no ingester has taken yet.
  await publishParked(conn, mod.topology, billing, failures(3, (i) => ({ id: `q-${i}` })));
  const db = dbFlags(h);
  const cli = (args: readonly string[], options: Parameters<typeof warren>[1] = {}) => warren(['parked', ...args.slice(0, 2), ...db, ...args.slice(2)], { ...options, env: { ...mod.env, USER: 'alice', ...options.env } });
  return { h, store, mod, conn, billing, specs, now, cli };
}

describe.each(BACKENDS)('warren parked --db on %s', (backend) => {
  it('reads the archive: exact groups, filters on error text, time, header and body, pages by cursor, the queue depth beside', async () => {
    const { specs, now, cli, billing, mod } = await setup(backend);
    const groups = json<ListJson>(await cli(['list', 'billing', '--group', '--json']));
    expect(groups.archived).toBe(300);
    expect(groups.queueDepth).toBe(3);
    expect(groups.groups?.map((g) => [g.errorClass, g.count]).sort()).toEqual([['HttpError', 100], ['TimeoutError', 100], ['ValidationError', 100]]);
    const grouped = await cli(['list', 'billing', '--group']);
    expect(grouped.stdout).toMatch(/^\s*100\s+HttpError\s+/m);
    expect(grouped.stdout).toMatch(/^300 open archived failures of billing in 3 groups; exact, over every row\.$/m);
    expect(grouped.stdout).toContain(`Parked queue ${billing.parkedQueue}: 3 messages not archived yet`);

    // "Last 2 days, tenant t1": every match, however deep in the table.
    const expected = specs.filter((s) => s.tenant === 't1' && (s.at as Date).getTime() >= now - 48 * HOUR);
    const t1 = await cli(['list', 'billing', '--error', 'tenant t1', '--since', '2d', '--limit', '1000']);
    expect(t1.code, t1.stderr).toBe(0);
    expect(t1.stdout).toContain(`${expected.length} open archived failures of billing matching error contains "tenant t1", failed since`);
    expect(t1.stdout.match(/^\s*\d+\s+o-\d{4}\s/gm)).toHaveLength(expected.length);
    const regex = json<ListJson>(await cli(['list', 'billing', '--error', '/(timed out|bad field) for tenant t[23]$/', '--json', '--limit', '1000']));
    expect(regex.archived).toBe(specs.filter((s) => s.errorClass !== 'HttpError' && (s.tenant === 't2' || s.tenant === 't3')).length);

    // Pages by header, newest first, then the next from the cursor: disjoint, in order, all of tenant t2.
    const t2 = specs.filter((s) => s.tenant === 't2').map((s) => s.id);
    const first = json<ListJson>(await cli(['list', 'billing', '--header', 'tenant=t2', '--limit', '30', '--json']));
    expect(first.archived).toBe(75);
    expect(first.rows.map((r) => r.messageId)).toEqual(t2.slice(0, 30));
    expect(first.next).not.toBeNull();
    const second = json<ListJson>(await cli(['list', 'billing', '--header', 'tenant=t2', '--limit', '30', '--after', first.next as string, '--json']));
    expect(second.rows.map((r) => r.messageId)).toEqual(t2.slice(30, 60));
    const text = await cli(['list', 'billing', '--header', 'tenant=t2', '--limit', '30']);
    expect(text.stdout).toMatch(/75 open archived failures of billing matching header tenant=t2; 30 shown, newest first\. Next page: --after \S+/);

    const oldest = json<ListJson>(await cli(['list', 'billing', '--body', 'of tenant t3', '--oldest', '--limit', '5', '--json']));
    expect(oldest.archived).toBe(75);
    expect(oldest.rows.map((r) => r.messageId)).toEqual(specs.filter((s) => s.tenant === 't3').map((s) => s.id).reverse().slice(0, 5));

    const exportFile = join(await tempDir(), 't0.jsonl');
    const exported = await cli(['export', 'billing', '--header', 'tenant=t0', '-o', exportFile]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(exported.stderr).toContain('Exported 75 open archived failures of billing matching header tenant=t0');
    const lines = (await readFile(exportFile, 'utf8')).trim().split('\n').map((l) => JSON.parse(l) as { messageId: string; rowId: string; state: string });
    expect(lines.map((l) => l.messageId).sort()).toEqual(specs.filter((s) => s.tenant === 't0').map((s) => s.id).sort());

    // Without --db the archive's flags are refused, naming --db.
    const noDb = await warren(['parked', 'list', 'billing', '--header', 'tenant=t2'], { env: mod.env });
    expect(noDb.code).toBe(2);
    expect(noDb.stderr).toMatch(/--header reads the archive: give --db URL \(or WARREN_DB\) without --queue/);
    const bad = await cli(['list', 'billing', '--header', 'tenant']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--header.*"tenant" is not NAME=VALUE/);
  });

  it('replays by id with the idempotency markers honoured, shows the timeline park → replay → park again, resolves and purges with an audit', async () => {
    const { store, cli, conn, billing, specs } = await setup(backend);
    const http = specs.filter((s) => s.errorClass === 'HttpError');
    // Two of the group were handled since (a duplicate did the work).
    const guard = store.idempotency();
    for (const s of http.slice(0, 2)) expect(await guard.run(s.id, 'billing', async () => undefined)).toBe('done');

    const dry = await cli(['replay', 'billing', '--fingerprint', fingerprintOf(http[0] as ParkedSpec), '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/Dry run: 100 open archived failures of billing matching fingerprint .* would be replayed/);
    expect((await queueCounts(conn, billing.queue)).ready).toBe(0);

    const r = await cli(['replay', 'billing', '--fingerprint', fingerprintOf(http[0] as ParkedSpec), '--rate', '2000']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^Replayed 98 archived messages of billing to queue \S+ in /m);
    expect(r.stdout).toMatch(/^2 messages already done: the consumer has handled their message ids since/m);
    const copies = await takeAll(conn, billing.queue);
    expect(copies.map((m) => String(m.properties.messageId)).sort()).toEqual(http.slice(2).map((s) => s.id).sort());
    expect(copies.every((m) => m.properties.headers?.['warren-replays'] === 1)).toBe(true);
    expect(await store.archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(98);
    expect(await store.archive.count({ consumer: 'billing', states: ['resolved'] })).toBe(2);
    // Again: nothing of the group is open.
    const again = await cli(['replay', 'billing', '--fingerprint', fingerprintOf(http[0] as ParkedSpec)]);
    expect(again.code).toBe(0);
    expect(again.stderr).toMatch(/No open archived failure of billing matching fingerprint/);

    // One of them fails again and is parked (archived) a second time: its timeline has it all.
    const back = http[5] as ParkedSpec & { id: string };
    await store.archive.insert([archiveRow('billing', parkedRaw({ ...back, replays: 1, at: new Date(), error: 'carrier 503 again' }), new Date())]);
    const show = await cli(['show', 'billing', back.id]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/^Archived message o-0015: row \d+ of billing, open \(parked 2 times; this is the newest parking\)$/m);
    const timeline = show.stdout.slice(show.stdout.indexOf('Timeline'), show.stdout.indexOf('Failure'));
    const steps = ['parked: max-attempts after attempt 6: HttpError: carrier 503 for tenant t3', 'replayed by alice', 'parked: max-attempts after attempt 6 (after 1 replay): HttpError: carrier 503 again'].map((step) => timeline.indexOf(step));
    expect(steps.every((at) => at >= 0), timeline).toBe(true);
    expect([...steps].sort((a, b) => a - b)).toEqual(steps);
    expect(show.stdout).toContain('"note": "order 15 of tenant t3"');
    const shown = json<{ timeline: Array<{ event: string; actor: string | null }> }>(await cli(['show', 'billing', back.id, '--json']));
    expect(shown.timeline.map((e) => e.event)).toEqual(['first-failure', 'parked', 'replayed', 'first-failure', 'parked']);
    expect(shown.timeline[2]?.actor).toBe('alice');
    const missing = await cli(['show', 'billing', 'nope']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/No archived message of billing with id nope\.\nParked queue \S+: 3 messages not archived yet/);

    // Resolve a group with a reason; it needs the reason.
    const validation = specs.filter((s) => s.errorClass === 'ValidationError');
    const noReason = await cli(['resolve', 'billing', '--fingerprint', fingerprintOf(validation[0] as ParkedSpec)]);
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toMatch(/needs --reason TEXT/);
    const resolved = await cli(['resolve', 'billing', '--fingerprint', fingerprintOf(validation[0] as ParkedSpec), '--reason', 'bad input from the old app']);
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(resolved.stdout).toMatch(/^Resolved 100 open archived failures of billing matching fingerprint .*: bad input from the old app$/m);
    const rows = json<ListJson>(await cli(['list', 'billing', '--state', 'resolved', '--fingerprint', fingerprintOf(validation[0] as ParkedSpec), '--limit', '1', '--json']));
    expect(rows.archived).toBe(100);
    // Every open failure of a consumer is asked about: without a terminal, --yes is needed.
    const everything = await cli(['resolve', 'billing', '--reason', 'all of it']);
    expect(everything.code).toBe(2);
    expect(everything.stderr).toMatch(/This would resolve 101 open archived failures of billing\. Pass --yes/);

    // Purge needs --yes; it deletes what it counted.
    const ask = await cli(['purge', 'billing', '--state', 'resolved']);
    expect(ask.code).toBe(2);
    expect(ask.stderr).toMatch(/This would delete 102 resolved archived failures of billing\. Pass --yes/);
    const purged = await cli(['purge', 'billing', '--state', 'resolved', '--yes']);
    expect(purged.code, purged.stderr).toBe(0);
    expect(purged.stdout).toMatch(/^Deleted 102 resolved archived failures of billing from the archive\.$/m);
    expect(await store.archive.count({ consumer: 'billing', states: ARCHIVE_STATES })).toBe(301 - 102);

    const actions = await store.actions.list();
    expect(actions.map((a) => [a.action, a.actor, a.count])).toEqual([
      ['archive.purge', 'alice', 102],
      ['archive.resolve', 'alice', 100],
      ['archive.replay', 'alice', 0],
      ['archive.replay', 'alice', 98],
    ]);
    expect(actions[1]?.detail).toMatchObject({ reason: 'bad input from the old app' });
    expect(actions[3]?.detail).toMatchObject({ alreadyDone: 2, stopReason: 'done', ratePerSecond: 2000 });
  });

  it('a paced replay stopped by Ctrl-C ends cleanly: what was sent is marked, the rest stays open, nothing is sent twice', async () => {
    const { store, cli, conn, billing, specs } = await setup(backend);
    const timeouts = specs.filter((s) => s.errorClass === 'TimeoutError');
    let child: ChildProcess | undefined;
    const running = cli(['replay', 'billing', '--error-class', 'TimeoutError', '--rate', '40'], { timeoutMs: 120_000, onSpawn: (c) => (child = c) });
    await waitFor(async () => (await queueCounts(conn, billing.queue)).ready >= 5, 'a few copies sent', 60_000);
    child?.kill('SIGINT');
    const r = await running;
    expect(r.code, r.stderr).toBe(130);
    expect(r.stderr).toMatch(/Interrupted: what was replayed is confirmed and marked; \d+ rows stay open\. Run the same command again to go on\./);
    const marked = await store.archive.count({ consumer: 'billing', states: ['replayed'] });
    expect(marked).toBeLessThan(100);
    expect((await queueCounts(conn, billing.queue)).ready).toBe(marked);
    // Again, at full speed: the rest, each once.
    const rest = await cli(['replay', 'billing', '--error-class', 'TimeoutError']);
    expect(rest.code, rest.stderr).toBe(0);
    const ids = (await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId));
    expect(ids.sort()).toEqual(timeouts.map((s) => s.id).sort());
  });

  it('a canary replays a few rows and watches them: parked again is a failure (exit 1), quiet for the window a success', async () => {
    const { store, cli, conn, billing, specs } = await setup(backend);
    // Claimed oldest failure first: the canary of ValidationError is the oldest of the group.
    const oldest = specs.filter((s) => s.errorClass === 'ValidationError').at(-1) as ParkedSpec & { id: string };
    let child: ChildProcess | undefined;
    const running = cli(['replay', 'billing', '--error-class', 'ValidationError', '--canary', '1', '--window', '60s'], { timeoutMs: 120_000, onSpawn: (c) => (child = c) });
    await waitFor(async () => (await queueCounts(conn, billing.queue)).ready === 1, 'the canary sent', 60_000);
    expect(child).toBeDefined();
    // It fails again, and is parked (archived) again.
    expect((await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId))).toEqual([oldest.id]);
    await store.archive.insert([archiveRow('billing', parkedRaw({ ...oldest, replays: 1, at: new Date(), error: 'bad field, still' }), new Date())]);
    const failed = await running;
    expect(failed.code, failed.stderr).toBe(1);
    expect(failed.stdout).toMatch(new RegExp(`^  row \\d+ \\(${oldest.id}\\): failed again, parked as row \\d+: ValidationError: bad field, still$`, 'm'));
    expect(failed.stdout).toMatch(/^Canary failed: a replayed message failed again\. 99 rows stay open; fix the cause before replaying them\.$/m);

    const quiet = await cli(['replay', 'billing', '--error-class', 'TimeoutError', '--canary', '2', '--window', '300ms']);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout).toMatch(/^Canary succeeded: 2 rows replayed; 98 rows stay open\. Replay them with the same filter without --canary\.$/m);
    expect((await takeAll(conn, billing.queue))).toHaveLength(2);
    expect((await store.actions.list()).map((a) => [a.action, a.count, a.outcome])).toEqual([['archive.canary', 2, 'ok'], ['archive.canary', 1, 'partial']]);
  });
});
