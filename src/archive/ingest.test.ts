/**
 * Ingestion against the real broker and both databases: every parked message ends up in
 * the archive exactly once, through a kill -9 of the ingester between commit and ack, a
 * lost broker connection, a database that goes away, and several ingesters at once.
 */
import { fileURLToPath } from 'node:url';
import * as amqp from 'amqplib';
import { describe, expect, it, vi } from 'vitest';
import { AMQP_URL, connectWarren, guarded, onTeardown, queueCounts, testTopology, waitFor } from '../../test/helpers.js';
import { PermanentError } from '../errors.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import type { ArchiveRowInput, ArchiveStore } from '../store/archive.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import type { AnyStore } from '../store/testing/spec.js';
import { spawnChild } from '../store/testing/spawn.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import type { TopologyOptions } from '../topology/declaration.js';
import { decodeFields } from './encoding.js';
import { ArchiveIngester } from './ingest.js';
import { archiveRow } from './row.js';

const CHILD = fileURLToPath(new URL('./testing/child.ts', import.meta.url));

function topologyOptions(): { options: TopologyOptions; topology: ReturnType<typeof testTopology> } {
  let options: TopologyOptions | undefined;
  const topology = testTopology(({ exchange, name }) => {
    options = { exchange, retry: { delays: [20], maxAttempts: 2 }, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } };
    return options;
  });
  return { options: options as TopologyOptions, topology };
}

/** Every archived message id of billing, with how many rows each has. */
async function archivedIds(store: AnyStore): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let after: string | undefined;
  for (;;) {
    const page = await store.archive.page({ filter: { consumer: 'billing', states: ['open', 'replayed', 'resolved'] }, limit: 1000, order: 'oldest', ...(after ? { after } : {}) });
    for (const r of page.rows) out.set(r.messageId ?? '', (out.get(r.messageId ?? '') ?? 0) + 1);
    if (!page.next) return out;
    after = page.next;
  }
}

function exactlyOnce(ids: readonly string[], archived: Map<string, number>): void {
  expect([...archived.keys()].sort()).toEqual([...ids].sort());
  expect([...archived.values()].every((n) => n === 1)).toBe(true);
}

function ingester(store: { archive: ArchiveStore }, topology: ReturnType<typeof testTopology>, connection: () => Promise<amqp.ChannelModel>, options: ConstructorParameters<typeof ArchiveIngester>[1] = {}): ArchiveIngester {
  const i = new ArchiveIngester({ store, topology, connection }, { batchSize: 25, maxBatchDelayMs: 5, holdMs: 15_000, retry: { initialDelayMs: 20, maxDelayMs: 200 }, ...options });
  onTeardown(() => i.stop());
  return i;
}

// Children and brokers take their time on a busy machine: these tests wait for what they check.
vi.setConfig({ testTimeout: 120_000 });

describe.each(BACKENDS)('archive ingestion: %s', (backend) => {
  it('moves what a parked queue already holds into the archive, bytes and headers exactly, once each', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ids = await publishParked(conn, topology, billing, failures(120, (i) => ({ extraHeaders: { tenant: `t${i % 5}`, when: { '!': 'timestamp', value: 1_700_000_000 + i }, raw: Buffer.from([i, 0, 255]), nested: { list: [i, 'x'] } } })));
    // One binary body, not UTF-8, published as it is.
    const ch = await conn.createConfirmChannel();
    const binary = Buffer.from([0xff, 0x00, 0xc3, 0x28, 0x80]);
    ch.sendToQueue(billing.parkedQueue, binary, { messageId: 'binary', contentEncoding: 'gzip', headers: { 'warren-error-message': 'bad \u0000 bytes' } });
    await ch.waitForConfirms();
    await ch.close();
    const i = ingester(store, topology, async () => conn);
    i.start();
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 121, 'all 121 archived', 20_000);
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).ready === 0, 'the parked queue is empty');
    exactlyOnce([...ids, 'binary'], await archivedIds(store));
    expect(i.state()[0]).toMatchObject({ consumer: 'billing', status: 'running', archived: 121 });

    const page = await store.archive.page({ filter: { consumer: 'billing', messageIds: ['binary', ids[7] as string] } });
    const bin = await store.archive.get(page.rows.find((r) => r.messageId === 'binary')?.id as string);
    expect(bin?.body.equals(binary)).toBe(true);
    expect(bin?.errorMessage).toBe('bad \ufffd bytes');
    expect(bin?.notIndexed).toMatch(/NUL/);
    const seventh = await store.archive.get(page.rows.find((r) => r.messageId === ids[7])?.id as string);
    const headers = decodeFields(seventh?.headers ?? '');
    expect(headers['when']).toEqual({ '!': 'timestamp', value: 1_700_000_007 });
    expect(headers['raw']).toEqual(Buffer.from([7, 0, 255]));
    expect(headers['nested']).toEqual({ list: [7, 'x'] });
    expect(await store.archive.count({ consumer: 'billing', headers: [{ name: 'tenant', value: 't2' }] })).toBe(24);
  });

  it('runs inside the application: a consumer parks, the archive keeps it, the parked queue stays empty', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = topologyOptions();
    const warren = await connectWarren(topology, { archive: { store, batchSize: 10, maxBatchDelayMs: 5 } });
    await warren.consume('billing', async () => {
      throw new PermanentError('card declined for tenant t4');
    });
    const sent = await Promise.all(Array.from({ length: 30 }, (_, n) => warren.publish('order.created', { n })));
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 30, 'the 30 failures are archived', 20_000);
    const conn = await declared(topology);
    expect((await queueCounts(conn, topology.consumer('billing').parkedQueue)).ready).toBe(0);
    exactlyOnce(sent.map((s) => s.messageId), await archivedIds(store));
    const [group] = await store.archive.groups({ consumer: 'billing' }, 10);
    expect(group).toMatchObject({ errorClass: 'PermanentError', count: 30, sampleMessage: 'card declined for tenant t4' });
    expect(warren.archive?.state()[0]?.status).toBe('running');
  });

  it('recognises a copy it archived before a kill -9 between commit and ack, and keeps it once', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const { options, topology } = topologyOptions();
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, topology.consumer('billing'), failures(200));
    const child = spawnChild({ WARREN_STORE: JSON.stringify({ spec: h.spec }), WARREN_AMQP_URL: AMQP_URL, WARREN_TOPOLOGY: JSON.stringify(options), WARREN_BATCH: '20', WARREN_CRASH: 'after-commit:3' }, CHILD);
    expect(await child.exited).toBe('SIGKILL');
    const committed = Number(child.lines.filter((l) => l.startsWith('committed ')).pop()?.split(' ')[1]);
    expect(committed).toBeGreaterThanOrEqual(3);
    // The killed ingester's batches were committed, the last not acknowledged: they come again.
    await waitFor(async () => (await queueCounts(conn, topology.consumer('billing').parkedQueue)).consumers === 0, 'the queue dropped the dead ingester');
    const next = ingester(store, topology, async () => conn);
    next.start();
    await waitFor(async () => (await queueCounts(conn, topology.consumer('billing').parkedQueue)).ready === 0 && next.state()[0]?.held === 0, 'the rest is ingested', 20_000);
    exactlyOnce(ids, await archivedIds(store));
    // At least the last committed batch, never acknowledged, came again.
    expect(next.state()[0]?.duplicates).toBeGreaterThanOrEqual(1);
    expect(await store.archive.count({ consumer: 'billing' })).toBe(200);
  });

  it('loses nothing when killed at any moment while batches are in flight', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const { options, topology } = topologyOptions();
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, topology.consumer('billing'), failures(400));
    const child = spawnChild({ WARREN_STORE: JSON.stringify({ spec: h.spec }), WARREN_AMQP_URL: AMQP_URL, WARREN_TOPOLOGY: JSON.stringify(options), WARREN_BATCH: '10' }, CHILD);
    await child.line('committed ', 60_000);
    child.process.kill('SIGKILL');
    await child.exited;
    await waitFor(async () => (await queueCounts(conn, topology.consumer('billing').parkedQueue)).consumers === 0, 'the queue dropped the dead ingester');
    const next = ingester(store, topology, async () => conn);
    next.start();
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 400, 'every message archived', 30_000);
    await waitFor(async () => (await queueCounts(conn, topology.consumer('billing').parkedQueue)).ready === 0 && next.state()[0]?.held === 0, 'the queue is empty');
    exactlyOnce(ids, await archivedIds(store));
  });

  it('comes back after the broker connection is lost, and archives each message once', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const u = new URL(AMQP_URL);
    u.port = String(proxy.port);
    let live: amqp.ChannelModel | undefined;
    const connection = async () => {
      if (!live) {
        live = guarded(await amqp.connect(u.toString(), { noDelay: true }));
        live.on('close', () => (live = undefined));
        const mine = live;
        onTeardown(() => mine.close().catch(() => undefined));
      }
      return live;
    };
    const i = ingester(store, topology, connection, { batchSize: 10 });
    i.start();
    const first = await publishParked(conn, topology, billing, failures(100, (n) => ({ id: `a-${n}` })));
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) >= 30, 'some archived');
    await proxy.cut();
    const second = await publishParked(conn, topology, billing, failures(100, (n) => ({ id: `b-${n}` })));
    await waitFor(() => i.state()[0]?.status === 'connecting', 'the ingester sees the connection gone');
    await proxy.restore();
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 200, 'all 200 archived', 30_000);
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).ready === 0 && i.state()[0]?.held === 0, 'the queue is empty');
    exactlyOnce([...first, ...second], await archivedIds(store));
  });

  it('waits out a database outage: the queue keeps the messages, the state says behind, then everything is archived once', async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    const store = outage.store;
    await store.migrate();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const i = ingester(store, topology, async () => conn, { holdMs: 500 });
    const behind: string[] = [];
    i.on('behind', (e: { consumer: string }) => behind.push(e.consumer));
    i.start();
    const first = await publishParked(conn, topology, billing, failures(50, (n) => ({ id: `a-${n}` })));
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 50, 'the first 50 archived');
    await outage.down();
    const second = await publishParked(conn, topology, billing, failures(80, (n) => ({ id: `b-${n}` })));
    await waitFor(() => i.behind, 'the ingester says it is behind', 15_000);
    expect(new Set(behind)).toEqual(new Set(['billing']));
    expect(i.state()[0]?.behindSince).toBeInstanceOf(Date);
    // Held no longer than holdMs, then given back: the parked queue has them all (and, on a
    // busy machine, copies of a batch whose commit came after its wait: the archive has those already).
    let counts = { ready: 0, consumers: 0 };
    await waitFor(async () => (counts = await queueCounts(conn, billing.parkedQueue)).ready >= 80 && counts.consumers === 0, () => `the parked queue keeps the 80 messages (it has ${JSON.stringify(counts)}; ingester ${JSON.stringify(i.state())})`, 15_000);
    await outage.up();
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).ready === 0 && i.state()[0]?.held === 0, 'ingestion resumes by itself', 30_000);
    await waitFor(() => !i.behind, 'no longer behind');
    exactlyOnce([...first, ...second], await archivedIds(store));
  });

  it('shares the queue between several ingesters: each message once', async () => {
    const h = await harness(backend);
    const a = h.store();
    const b = h.store();
    await a.migrate();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const i1 = ingester(a, topology, async () => conn, { batchSize: 7 });
    const i2 = ingester(b, topology, async () => conn, { batchSize: 11 });
    i1.start();
    i2.start();
    const ids = await publishParked(conn, topology, billing, failures(300));
    await waitFor(async () => (await a.archive.count({ consumer: 'billing' })) === 300, 'all archived', 30_000);
    exactlyOnce(ids, await archivedIds(a));
    expect((i1.state()[0]?.archived ?? 0) + (i2.state()[0]?.archived ?? 0)).toBe(300);
  });

  it('while every store slot is busy, goes on filling the next batch past its delay and stores it whole once a slot frees', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    // The real archive, each insert held until the test lets it go; the sizes of the batches it was given.
    const sizes: number[] = [];
    const gates: Array<() => void> = [];
    const archive = Object.create(store.archive) as ArchiveStore;
    archive.insert = async (rows: readonly ArchiveRowInput[]) => {
      sizes.push(rows.length);
      await new Promise<void>((resolve) => gates.push(resolve));
      return store.archive.insert(rows);
    };
    const i = ingester({ archive }, topology, async () => conn, { batchSize: 10 });
    i.start();
    await waitFor(() => i.state()[0]?.status === 'running', 'the ingester reads the parked queue');
    // Two messages, one after the other: two batches of one, both held in the store.
    const ids = [...(await publishParked(conn, topology, billing, failures(1, () => ({ id: 'first' }))))];
    await waitFor(() => sizes.length === 1, 'the first batch is being stored');
    ids.push(...(await publishParked(conn, topology, billing, failures(1, () => ({ id: 'second' })))));
    await waitFor(() => sizes.length === 2, 'the second batch is being stored');
    // Three more, each well past the batch delay: no slot is free, so they wait as one batch.
    for (let n = 0; n < 3; n++) {
      ids.push(...(await publishParked(conn, topology, billing, failures(1, () => ({ id: `later-${n}` })))));
      const held = 3 + n;
      await waitFor(() => i.state()[0]?.held === held, `${held} messages held`);
      await new Promise((r) => setTimeout(r, 30));
    }
    expect(sizes).toEqual([1, 1]);
    (gates.shift() as () => void)();
    await waitFor(() => sizes.length === 3, 'the third batch is being stored');
    for (const open of gates.splice(0)) open();
    expect(sizes).toEqual([1, 1, 3]);
    await waitFor(() => gates.length === 0 && i.state()[0]?.held === 0, 'every batch stored', 20_000);
    exactlyOnce(ids, await archivedIds(store));
  });

  it('archives a message the database refuses as it is, with nothing indexed but its identity, and goes on', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = topologyOptions();
    const conn = await declared(topology);
    // The real archive, refusing any row that carries the poison's error text as indexed.
    const archive = Object.create(store.archive) as ArchiveStore;
    archive.insert = (rows: readonly ArchiveRowInput[]) => {
      if (rows.some((r) => r.errorMessage === 'poison')) return Promise.reject(Object.assign(new Error('value too long for type character varying(10)'), { code: '22001' }));
      return store.archive.insert(rows);
    };
    const ids = await publishParked(conn, topology, topology.consumer('billing'), failures(40, (n) => ({ message: n === 17 ? 'poison' : 'carrier 503' })));
    const i = ingester({ archive }, topology, async () => conn, { batchSize: 10 });
    i.start();
    await waitFor(async () => (await store.archive.count({ consumer: 'billing' })) === 40, 'all 40 archived', 20_000);
    exactlyOnce(ids, await archivedIds(store));
    const poison = (await store.archive.page({ filter: { consumer: 'billing', messageIds: [ids[17] as string] } })).rows[0];
    expect(poison?.fingerprint).toBe('(not indexed)');
    expect(poison?.notIndexed).toMatch(/refused the row.*value too long/);
    expect(decodeFields((await store.archive.get(poison?.id as string))?.headers ?? '')['warren-error-message']).toBe('poison');
    expect(archiveRow('billing', { content: Buffer.alloc(0), fields: { routingKey: '', exchange: '' }, properties: {} }, new Date()).fingerprint).toBeTypeOf('string');
  });
});
