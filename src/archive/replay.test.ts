/**
 * Actions on archived rows against the real broker and both databases: replay of a group
 * with its history, what the idempotency markers say is done, a replay stopped, killed,
 * cut from the broker or from its database (never a row lost, each sent at most once
 * more), canaries, resolve, purge, export, and edit and retry.
 */
import { fileURLToPath } from 'node:url';
import * as amqp from 'amqplib';
import { describe, expect, it, vi } from 'vitest';
import { AMQP_URL, connectWarren, guarded, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { InvalidOptionError, PermanentError } from '../errors.js';
import { HEADER } from '../headers.js';
import type { MessageContext } from '../consume/types.js';
import { declared } from '../park/testing/fixtures.js';
import { BACKENDS, harness, type Harness } from '../store/testing/harness.js';
import type { AnyStore, StoreSpec } from '../store/testing/spec.js';
import { spawnChild } from '../store/testing/spawn.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import type { TopologyOptions } from '../topology/declaration.js';
import { Archive } from './archive.js';

const CHILD = fileURLToPath(new URL('./testing/child.ts', import.meta.url));

interface Setup {
  spec: StoreSpec;
  store: AnyStore;
  archive: Archive;
  options: TopologyOptions;
  topology: ReturnType<typeof testTopology>;
  conn: amqp.ChannelModel;
  /** Handler runs that succeeded, per message id. */
  handled: Map<string, number>;
  /** Which payloads fail: `(n) => true` fails all. */
  failing: { fn: (n: number) => boolean };
  lastHeaders: Map<string, Readonly<Record<string, unknown>>>;
  lastBody: Map<string, unknown>;
  publish(n: number, first?: number): Promise<string[]>;
}

async function setup(backend: 'sqlite' | 'postgres', o: { store?: AnyStore; harness?: Harness; guard?: boolean } = {}): Promise<Setup> {
  const h = o.harness ?? (await harness(backend));
  const s = o.store ?? h.store();
  let options: TopologyOptions | undefined;
  const topology = testTopology(({ exchange, name }) => (options = { exchange, retry: { delays: [20], maxAttempts: 1 }, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
  const warren = await connectWarren(topology, { archive: { store: s, batchSize: 20, maxBatchDelayMs: 5 } });
  const handled = new Map<string, number>();
  const lastHeaders = new Map<string, Readonly<Record<string, unknown>>>();
  const lastBody = new Map<string, unknown>();
  const failing = { fn: (_n: number) => true };
  await warren.consume(
    'billing',
    async (payload: { n: number }, ctx: MessageContext<unknown>) => {
      if (failing.fn(payload.n)) throw new PermanentError(payload.n % 2 === 0 ? `carrier down for tenant t${payload.n % 4}` : `card ${payload.n} declined`);
      const id = ctx.messageId as string;
      handled.set(id, (handled.get(id) ?? 0) + 1);
      lastHeaders.set(id, ctx.headers);
      lastBody.set(id, payload);
    },
    { ...(o.guard === false ? {} : { idempotency: s.idempotency() }), concurrency: 5 },
  );
  const conn = await declared(topology);
  return {
    spec: h.spec,
    store: s,
    archive: new Archive(s),
    options: options as TopologyOptions,
    topology,
    conn,
    handled,
    failing,
    lastHeaders,
    lastBody,
    async publish(n, first = 0) {
      const receipts = await Promise.all(Array.from({ length: n }, (_, i) => warren.publish('order.created', { n: first + i })));
      return receipts.map((r) => r.messageId);
    },
  };
}

async function openCount(s: Setup): Promise<number> {
  return s.archive.count({ consumer: 'billing' });
}

// Children and brokers take their time on a busy machine: these tests wait for what they check.
vi.setConfig({ testTimeout: 120_000 });

describe.each(BACKENDS)('archive actions: %s', (backend) => {
  it('replays a group to its consumer, marks the rows, and keeps one timeline per message across park, replay and park again', async () => {
    const s = await setup(backend);
    const ids = await s.publish(40);
    await waitFor(async () => (await openCount(s)) === 40, 'the 40 failures are archived', 20_000);
    const groups = await s.archive.groups({ consumer: 'billing' });
    expect(groups.map((g) => g.count)).toEqual([20, 20]);
    const carrier = groups.find((g) => g.sampleMessage?.startsWith('carrier')) as (typeof groups)[number];
    s.failing.fn = (n) => n % 2 !== 0;
    const model = s.conn;
    const r = await s.archive.replay(model, s.topology.consumer('billing'), { filter: { consumer: 'billing', fingerprint: carrier.fingerprint }, actor: 'alice' });
    expect(r).toMatchObject({ matched: 20, replayed: 20, alreadyDone: 0, stopReason: 'done' });
    await waitFor(() => s.handled.size === 20, 'the consumer handled the 20 replayed', 20_000);
    expect([...s.handled.values()].every((n) => n === 1)).toBe(true);
    expect(await s.archive.count({ consumer: 'billing', fingerprint: carrier.fingerprint })).toBe(0);
    expect(await s.archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(20);

    // The other group fails again when replayed: new rows, which this replay does not take up.
    const card = groups.find((g) => g !== carrier) as (typeof groups)[number];
    const again = await s.archive.replay(model, s.topology.consumer('billing'), { filter: { consumer: 'billing', fingerprint: card.fingerprint }, actor: 'bob' });
    expect(again.replayed).toBe(20);
    await waitFor(async () => (await s.archive.count({ consumer: 'billing', fingerprint: card.fingerprint })) === 20, 'the 20 failed again and are archived again', 20_000);
    const oneCard = ids[1] as string;
    const { entries } = await s.archive.history('billing', oneCard);
    expect(entries.map((e) => [e.event, e.actor])).toEqual([['parked', null], ['replayed', 'bob'], ['parked', null]]);
    expect(entries[2]?.detail).toMatch(/after 1 replay/);
    expect(entries[0]?.detail).toMatch(/card 1 declined/);
    const replayedHeaders = s.lastHeaders.get(ids[0] as string);
    expect(replayedHeaders?.[HEADER.replays]).toBe(1);
    expect(replayedHeaders?.[HEADER.archiveRow]).toBeDefined();
  });

  it('skips rows whose work was done since (the idempotency marker), unless forced', async () => {
    const s = await setup(backend);
    const [id] = await s.publish(1);
    await waitFor(async () => (await openCount(s)) === 1, 'archived', 20_000);
    s.failing.fn = () => false;
    // A later copy of the same message succeeded (a duplicate, a re-send).
    const warren = await connectWarren(s.topology);
    await warren.publish('order.created', { n: 0 }, { messageId: id as string });
    await waitFor(() => s.handled.get(id as string) === 1, 'the copy was handled', 20_000);
    const r = await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice' });
    expect(r).toMatchObject({ matched: 1, replayed: 0, alreadyDone: 1 });
    const [row] = (await s.archive.page({ filter: { consumer: 'billing', states: ['resolved'] } })).rows;
    expect(row?.resolveReason).toMatch(/already done/);
    expect(row?.resolvedBy).toBe('alice');
    const forced = await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing', states: ['resolved'] }, actor: 'alice', force: true });
    expect(forced.replayed).toBe(1);
    // The guard still runs the work once.
    await new Promise((r) => setTimeout(r, 300));
    expect(s.handled.get(id as string)).toBe(1);
  });

  it('stopped half-way, then run again: every row replayed, each message handled once', async () => {
    const s = await setup(backend);
    const ids = await s.publish(100);
    await waitFor(async () => (await openCount(s)) === 100, 'archived', 20_000);
    s.failing.fn = () => false;
    const stop = new AbortController();
    const first = await s.archive.replay(s.conn, s.topology.consumer('billing'), {
      filter: { consumer: 'billing' },
      actor: 'alice',
      ratePerSecond: 400,
      batchSize: 10,
      signal: stop.signal,
      onProgress: (p) => {
        if (p.replayed >= 20) stop.abort();
      },
    });
    expect(first.stopReason).toBe('aborted');
    expect(first.replayed).toBeGreaterThanOrEqual(20);
    expect(first.replayed).toBeLessThan(100);
    const second = await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice' });
    expect(first.replayed + second.replayed).toBe(100);
    await waitFor(() => s.handled.size === 100, 'all handled', 20_000);
    expect([...s.handled.entries()].filter(([, n]) => n !== 1)).toEqual([]);
    expect(new Set(s.handled.keys())).toEqual(new Set(ids));
  });

  it('killed with -9 mid-replay: no row lost, each message sent at most once more', async () => {
    // No idempotency guard here: every copy that arrives runs the handler, so copies are counted.
    const s = await setup(backend, { guard: false });
    const ids = await s.publish(150);
    await waitFor(async () => (await openCount(s)) === 150, 'archived', 20_000);
    s.failing.fn = () => false;
    const child = spawnChild({ WARREN_STORE: JSON.stringify({ spec: s.spec }), WARREN_AMQP_URL: AMQP_URL, WARREN_TOPOLOGY: JSON.stringify(s.options), WARREN_CHILD_ROLE: 'replay', WARREN_CONSUMER: 'billing', WARREN_RATE: '150', WARREN_BATCH: '10', WARREN_LEASE_MS: '1500' }, CHILD);
    await child.line('replayed ', 60_000);
    await waitFor(() => s.handled.size >= 15, 'the child replays', 20_000);
    child.process.kill('SIGKILL');
    await child.exited;
    expect(s.handled.size).toBeLessThan(150);
    // Run again until nothing is open: the killed replay's claimed batch frees after its lease.
    await waitFor(
      async () => {
        await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice', leaseMs: 1500 });
        return (await openCount(s)) === 0;
      },
      'every row replayed',
      30_000,
    );
    await waitFor(() => s.handled.size === 150, 'every message arrived', 20_000);
    expect(new Set(s.handled.keys())).toEqual(new Set(ids));
    expect([...s.handled.entries()].filter(([, n]) => n > 2)).toEqual([]);
    expect(await s.archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(150);
  });

  it('killed with -9 between a confirm and its mark, batches in flight: no row lost, each message sent at most once more', async () => {
    // Not paced: batches are claimed and sent while earlier ones wait for their confirms.
    // The child dies as the third batch is to be marked: its copies are confirmed, and the
    // batches after it may be sent, confirmed or not. No idempotency guard: copies are counted.
    const s = await setup(backend, { guard: false });
    const rows = 400;
    const ids = await s.publish(rows);
    await waitFor(async () => (await openCount(s)) === rows, 'archived', 30_000);
    s.failing.fn = () => false;
    const child = spawnChild({ WARREN_STORE: JSON.stringify({ spec: s.spec }), WARREN_AMQP_URL: AMQP_URL, WARREN_TOPOLOGY: JSON.stringify(s.options), WARREN_CHILD_ROLE: 'replay', WARREN_CONSUMER: 'billing', WARREN_RATE: '0', WARREN_BATCH: '40', WARREN_LEASE_MS: '8000', WARREN_CRASH: 'before-mark:3' }, CHILD);
    await child.exited;
    expect(await s.archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(80);
    // The third batch's copies were confirmed: they arrive, though their rows are still open.
    await waitFor(() => s.handled.size >= 120, 'the confirmed copies arrive', 20_000);
    // Its claims still hold the third batch and those it claimed (and maybe sent) ahead of
    // that mark, up to its window of three: a replay now sends only the rest.
    const rest = await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice' });
    expect(rest.stopReason).toBe('done');
    const held = rows - 80 - rest.replayed;
    expect([40, 80, 120]).toContain(held);
    await waitFor(
      async () => {
        await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice', leaseMs: 1500 });
        return (await openCount(s)) === 0;
      },
      'every row replayed',
      30_000,
    );
    await waitFor(() => s.handled.size === rows, 'every message arrived', 20_000);
    expect(new Set(s.handled.keys())).toEqual(new Set(ids));
    expect(await s.archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(rows);
    // Sent twice: the third batch (confirmed, not marked) and what the child sent of the held batches after it.
    await waitFor(() => [...s.handled.values()].filter((n) => n === 2).length >= 40, 'the unmarked batch arrives again', 20_000);
    expect([...s.handled.values()].filter((n) => n === 2).length).toBeLessThanOrEqual(held);
    expect([...s.handled.entries()].filter(([, n]) => n > 2)).toEqual([]);
  });

  it('a mark the database refuses, batches in flight: the replay stops as failed, the rows stay open, and a later replay sends them', async () => {
    const s = await setup(backend);
    await s.publish(120);
    await waitFor(async () => (await openCount(s)) === 120, 'archived', 30_000);
    s.failing.fn = () => false;
    // The second batch's mark fails for good while later batches are claimed and sent.
    const tables = Object.create(s.store.archive) as typeof s.store.archive;
    let marks = 0;
    tables.markReplayed = async (ids, mark) => {
      if (++marks === 2) throw new Error('constraint violated');
      return s.store.archive.markReplayed(ids, mark);
    };
    const refusing = new Archive({ archive: tables, processed: (c, ids) => s.store.processed(c, ids) });
    const r = await refusing.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice', batchSize: 20, leaseMs: 1500 });
    expect(r).toMatchObject({ stopReason: 'failed', replayed: 20, error: 'constraint violated' });
    await waitFor(
      async () => {
        await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice', leaseMs: 1500 });
        return (await openCount(s)) === 0;
      },
      'every row replayed',
      30_000,
    );
    await waitFor(() => s.handled.size === 120, 'all handled', 20_000);
    expect([...s.handled.values()].every((n) => n === 1)).toBe(true);
    // The rows whose copies went out unmarked are found done by their markers when they come round again.
    const replayed = await s.archive.count({ consumer: 'billing', states: ['replayed'] });
    const done = await s.archive.count({ consumer: 'billing', states: ['resolved'] });
    expect({ sum: replayed + done, atLeastTheUnmarked: done >= 20 }).toEqual({ sum: 120, atLeastTheUnmarked: true });
  });

  it('loses its broker connection mid-replay: the rows not confirmed stay open, and a later replay finishes', async () => {
    const s = await setup(backend);
    await s.publish(120);
    await waitFor(async () => (await openCount(s)) === 120, 'archived', 20_000);
    s.failing.fn = () => false;
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const u = new URL(AMQP_URL);
    u.port = String(proxy.port);
    const viaProxy = guarded(await amqp.connect(u.toString(), { noDelay: true }));
    onTeardown(() => viaProxy.close().catch(() => undefined));
    const cut = s.archive.replay(viaProxy, s.topology.consumer('billing'), {
      filter: { consumer: 'billing' },
      actor: 'alice',
      ratePerSecond: 300,
      batchSize: 10,
      leaseMs: 1500,
      onProgress: (p) => {
        if (p.replayed >= 30) void proxy.cut();
      },
    });
    const r = await cut;
    expect(r.stopReason).toBe('failed');
    expect(r.replayed).toBeLessThan(120);
    await waitFor(
      async () => {
        await s.archive.replay(s.conn, s.topology.consumer('billing'), { filter: { consumer: 'billing' }, actor: 'alice', leaseMs: 1500 });
        return (await openCount(s)) === 0;
      },
      'every row replayed',
      30_000,
    );
    await waitFor(() => s.handled.size === 120, 'all handled once', 20_000);
    expect([...s.handled.values()].every((n) => n === 1)).toBe(true);
  });

  it('rides out a database restart in the middle of a replay', async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    await outage.store.migrate();
    const s = await setup(backend, { store: outage.store, harness: h });
    await s.publish(80);
    await waitFor(async () => (await openCount(s)) === 80, 'archived', 20_000);
    s.failing.fn = () => false;
    let downed = false;
    const r = await s.archive.replay(s.conn, s.topology.consumer('billing'), {
      filter: { consumer: 'billing' },
      actor: 'alice',
      ratePerSecond: 200,
      batchSize: 10,
      onProgress: (p) => {
        if (p.replayed >= 20 && !downed) {
          downed = true;
          void outage.down().then(() => setTimeout(() => void outage.up(), 1500));
        }
      },
    });
    expect(downed).toBe(true);
    expect(r).toMatchObject({ replayed: 80, stopReason: 'done' });
    await waitFor(() => s.handled.size === 80, 'all handled', 30_000);
    expect([...s.handled.values()].every((n) => n === 1)).toBe(true);
  });

  it('canaries: succeed by the marker, fail when parked again; resolve, purge and export act on rows', async () => {
    const s = await setup(backend);
    await s.publish(20);
    await waitFor(async () => (await openCount(s)) === 20, 'archived', 20_000);
    const target = s.topology.consumer('billing');
    const failed = await s.archive.canary(s.conn, target, { filter: { consumer: 'billing' }, actor: 'alice', count: 2, windowMs: 15_000, pollMs: 50 });
    expect(failed.verdict).toBe('failed');
    expect(failed.canaries.every((c) => c.outcome === 'failed' && c.evidence === 'parked-again')).toBe(true);
    s.failing.fn = () => false;
    const ok = await s.archive.canary(s.conn, target, { filter: { consumer: 'billing' }, actor: 'alice', count: 3, windowMs: 15_000, pollMs: 50 });
    expect(ok.verdict).toBe('succeeded');
    expect(ok.canaries.map((c) => c.evidence)).toEqual(['processed', 'processed', 'processed']);
    // 20 archived, 2 failed again (2 new open rows), 2 + 3 replayed: 17 open.
    expect(ok.remaining).toBe(17);

    const tenant = { consumer: 'billing', error: { contains: 'tenant t2' } };
    const toResolve = await s.archive.count(tenant);
    expect(toResolve).toBeGreaterThan(0);
    expect((await s.archive.resolve({ filter: tenant, actor: 'bob', reason: 'tenant t2 refunded by hand' })).count).toBe(toResolve);
    await expect(s.archive.resolve({ filter: tenant, actor: 'bob', reason: ' ' })).rejects.toThrow(InvalidOptionError);
    const lines: string[] = [];
    const exported = await s.archive.export({ filter: { consumer: 'billing' }, write: (l) => void lines.push(l) });
    expect(exported.exported).toBe(17 - toResolve);
    const record = JSON.parse(lines[0] as string) as { rowId: string; state: string; body: { n: number }; failure: { message: string } };
    expect(record.state).toBe('open');
    expect(typeof record.body.n).toBe('number');
    expect((await s.archive.get(record.rowId))?.viewedAt).toBeInstanceOf(Date);
    expect((await s.archive.purge({ filter: { consumer: 'billing' }, actor: 'bob', limit: 5 })).count).toBe(5);
    expect(await openCount(s)).toBe(17 - toResolve - 5);
  });

  it('edits a message and sends it as a new one that names the original; the original row is kept, resolved', async () => {
    const s = await setup(backend);
    const [id] = await s.publish(1, 7);
    await waitFor(async () => (await openCount(s)) === 1, 'archived', 20_000);
    const [row] = (await s.archive.page({ filter: { consumer: 'billing' } })).rows;
    const target = s.topology.consumer('billing');
    await expect(s.archive.editAndRetry(s.conn, target, row?.id as string, { body: { json: { n: 8 } } }, { actor: 'alice', reason: 'fix' })).rejects.toThrow(/editing archived messages is off/);
    s.failing.fn = () => false;
    const editing = new Archive(s.store, { edits: true });
    await expect(editing.editAndRetry(s.conn, target, row?.id as string, { setHeaders: { 'warren-attempts': 1 } }, { actor: 'alice', reason: 'x' })).rejects.toThrow(/warren or the broker owns/);
    const r = await editing.editAndRetry(s.conn, target, row?.id as string, { body: { json: { n: 8, fixed: true } }, setHeaders: { tenant: 't9' } }, { actor: 'alice', reason: 'wrong amount' });
    expect(r.originalMessageId).toBe(id);
    expect(r.messageId).not.toBe(id);
    expect(r.diff.body).toEqual({ before: '{"n":7}', after: '{"n":8,"fixed":true}' });
    expect(r.diff.headers).toEqual({ tenant: { before: null, after: 't9' } });
    await waitFor(() => s.handled.has(r.messageId), 'the edited message was handled', 20_000);
    expect(s.lastBody.get(r.messageId)).toEqual({ n: 8, fixed: true });
    expect(s.lastHeaders.get(r.messageId)?.[HEADER.editedFrom]).toBe(id);
    expect(s.lastHeaders.get(r.messageId)?.['tenant']).toBe('t9');
    const original = await s.archive.get(row?.id as string);
    expect(original).toMatchObject({ state: 'resolved', resolvedBy: 'alice' });
    expect(original?.resolveReason).toContain(r.messageId);
  });
});
