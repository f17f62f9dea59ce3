/**
 * `warren archive` as a user runs it: the built executable as a child process, a real
 * broker and both databases. Parked messages drain into the archive; the process killed
 * (SIGKILL) and started again leaves every message archived exactly once; SIGTERM stops
 * it cleanly.
 */
import { writeFileSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { queueCounts, waitFor } from '../../test/helpers.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { ARCHIVE_STATES } from '../store/archive.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import { onTeardown, PG_URL } from '../../test/helpers.js';
import type { AnyStore } from '../store/testing/spec.js';
import { assertBuilt, dbFlags, topologyModule, warren, type RunResult } from './testing/run.js';

vi.setConfig({ testTimeout: 180_000 });
beforeAll(() => assertBuilt());

/** Every archived message id of `consumer`, with how many rows each has. */
async function archivedIds(store: AnyStore, consumer = 'billing'): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let after: string | undefined;
  for (;;) {
    const page = await store.archive.page({ filter: { consumer, states: ARCHIVE_STATES }, limit: 1000, order: 'oldest', ...(after ? { after } : {}) });
    for (const r of page.rows) out.set(r.messageId ?? '', (out.get(r.messageId ?? '') ?? 0) + 1);
    if (!page.next) return out;
    after = page.next;
  }
}

/** Starts `warren archive` and gives back the child and its end. */
function start(args: readonly string[]): { child: Promise<ChildProcess>; done: Promise<RunResult> } {
  let give: (c: ChildProcess) => void = () => undefined;
  const child = new Promise<ChildProcess>((resolve) => (give = resolve));
  const done = warren(['archive', ...args], { timeoutMs: 150_000, onSpawn: give });
  return { child, done };
}

describe.each(BACKENDS)('warren archive on %s', (backend) => {
  it('drains the parked queue into the archive; killed and started again, every message is there once; SIGTERM stops it cleanly', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, retry: { delays: ['20ms'], maxAttempts: 2 }, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] }, shipping: { queue: name('shipping'), bindings: ['order.paid'] } } }));
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    const shipping = mod.topology.consumer('shipping');
    const failedAt = new Date(Date.now() - 60_000);
    // Parked before any ingester runs: ingested on first start.
    const first = await publishParked(conn, mod.topology, billing, failures(400, () => ({ failedAt })));
    const ship = await publishParked(conn, mod.topology, shipping, failures(5, (i) => ({ id: `s-${i}`, failedAt })));
    const args = ['-t', mod.path, ...dbFlags(h), '--batch-size', '20', '--progress', '100ms'];

    // First run: killed with SIGKILL once some batches are in, possibly between a commit and its ack.
    const one = start(args);
    const c1 = await one.child;
    await waitFor(async () => (await store.archive.count({ consumer: 'billing', states: ARCHIVE_STATES })) >= 60, 'some rows archived by the first run', 60_000);
    c1.kill('SIGKILL');
    const r1 = await one.done;
    expect(r1.signal).toBe('SIGKILL');
    expect(r1.stdout).toMatch(/^warren archive: ingesting the parked queues of billing, shipping into /m);

    // The same messages again (copies, as a crash between commit and ack leaves them), and new ones.
    await publishParked(conn, mod.topology, billing, failures(10, () => ({ failedAt })));
    const later = await publishParked(conn, mod.topology, billing, failures(30, (i) => ({ id: `late-${i}` })));

    const two = start(args);
    const c2 = await two.child;
    await waitFor(async () => (await store.archive.count({ consumer: 'billing', states: ARCHIVE_STATES })) === 430 && (await queueCounts(conn, billing.parkedQueue)).ready === 0, 'all 430 billing messages archived and the parked queue empty', 60_000);
    await waitFor(async () => (await store.archive.count({ consumer: 'shipping' })) === 5, 'the shipping messages archived');
    // A progress line names the totals and each consumer's queue depth.
    c2.kill('SIGTERM');
    const r2 = await two.done;
    expect(r2.code, r2.stderr).toBe(0);
    // The last progress line, printed on the way out: nothing left in either parked queue.
    expect(r2.stdout).toMatch(/^archived [\d,]+ \(\+[\d,]+, [\d,]+\/s\), [\d,]+ cop(y|ies) recognised; billing [\d,]+ \((running|stopped), 0 in \S+billing\S*\); shipping [\d,]+ \((running|stopped), 0 in \S+\)$/m);
    expect(r2.stdout).toMatch(/^Stopped after \S+: [\d,]+ messages? archived, [\d,]+ cop(y|ies) recognised as archived already\.$/m);

    const archived = await archivedIds(store);
    expect([...archived.keys()].sort()).toEqual([...first, ...later].sort());
    expect([...archived.values()].every((n) => n === 1)).toBe(true);
    expect([...(await archivedIds(store, 'shipping')).keys()].sort()).toEqual(ship.sort());
    expect((await queueCounts(conn, billing.parkedQueue)).ready).toBe(0);
    expect((await queueCounts(conn, billing.parkedQueue)).consumers).toBe(0);
  });

  it('refuses a database without the archive tables, naming what to do', async () => {
    const h = await harness(backend);
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    // An empty SQLite file; a PostgreSQL schema nobody migrated.
    if (h.spec.backend === 'sqlite') writeFileSync(h.spec.filename, '');
    const r = await warren(['archive', '-t', mod.path, ...dbFlags(h)]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/has no warren tables/);
  });
});

describe('warren archive: the database goes away', () => {
  it('says it is behind, leaves the messages in the parked queue, and archives each once when PostgreSQL is back', async () => {
    const h = await harness('postgres');
    const store = h.store();
    await store.migrate();
    if (h.spec.backend !== 'postgres') throw new Error('postgres only');
    const proxy = await TcpProxy.start(Number(new URL(PG_URL).port || 5432));
    onTeardown(() => proxy.close());
    const url = new URL(h.spec.connectionString);
    url.port = String(proxy.port);
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    const run = start(['-t', mod.path, '--db', url.toString(), '--schema', h.spec.schema, '--table-prefix', h.spec.tablePrefix, '--batch-size', '10', '--connect-timeout', '1s', '--progress', '100ms']);
    const child = await run.child;
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).consumers === 1, 'the ingester reads the parked queue', 60_000);
    await proxy.cut();
    const ids = await publishParked(conn, mod.topology, billing, failures(50));
    // Time for the ingester to try and fail; nothing is archived while the database is away (the test's store reaches it directly).
    await new Promise((r) => setTimeout(r, 1500));
    expect(await store.archive.count({ consumer: 'billing' })).toBe(0);
    await proxy.restore();
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 50 && (await queueCounts(conn, billing.parkedQueue)).ready === 0, 'all 50 archived once PostgreSQL is back', 90_000);
    child.kill('SIGTERM');
    const r = await run.done;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^billing: the archive is behind: the database does not take batches \(.+\); the parked queue keeps the messages\.$/m);
    expect(r.stderr).toMatch(/^billing: the database takes batches again; ingestion goes on\.$/m);
    const archived = await archivedIds(store);
    expect([...archived.keys()].sort()).toEqual([...ids].sort());
    expect([...archived.values()].every((n) => n === 1)).toBe(true);
  });
});

describe('warren archive: bad input', () => {
  it('names the flag that is wrong', async () => {
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const noDb = await warren(['archive', '-t', mod.path]);
    expect(noDb.code).toBe(2);
    expect(noDb.stderr).toMatch(/No database given: pass --db URL/);
    const keep = await warren(['archive', '-t', mod.path, '--db', 'sqlite:x.db', '--keep', '14 weeks']);
    expect(keep.code).toBe(2);
    expect(keep.stderr).toMatch(/--keep: "14 weeks" is not an age from 1m to 3650d/);
    const who = await warren(['archive', '-t', mod.path, '--db', 'sqlite:x.db', '--consumer', 'nobody']);
    expect(who.code).toBe(2);
    expect(who.stderr).toMatch(/nobody/);
  });
});
