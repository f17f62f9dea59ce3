/**
 * The transactional outbox and its relay, over every backend, against a real broker:
 * stamping, order (also when the broker nacks a row in the middle of a batch), prompt
 * wake-up, unroutable rows and rows for a missing exchange, several relays, the broker or
 * the database down for a while, and a relay killed between publish and mark.
 */
import { describe, expect, it } from 'vitest';
import type * as amqp from 'amqplib';
import type { TopologyOptions } from '../index.js';
import { AMQP_URL, connectWarren, depth, drain, onTeardown, rawConnection, testTopology, uniqueName, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from './testing/harness.js';
import { exec, type AnyStore } from './testing/spec.js';
import { spawnChild } from './testing/spawn.js';
import { TcpProxy } from './testing/tcp-proxy.js';
import { sleep } from './options.js';
import type { OutboxAddOptions } from './index.js';

function setup(): { options: TopologyOptions; topology: ReturnType<typeof testTopology>; queue: string } {
  let options!: TopologyOptions;
  const topology = testTopology(({ exchange, name }) => {
    options = { exchange, consumers: { [name('audit')]: { bindings: ['order.*'] } } };
    return options;
  });
  const queue = [...topology.consumers.values()][0]?.queue as string;
  return { options, topology, queue };
}

async function add(store: AnyStore, n: number, options: OutboxAddOptions = {}, routingKey = 'order.created'): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await store.transaction((tx) => store.outbox.add(tx, routingKey, { i }, options))).messageId);
  return ids;
}

const idsOf = (messages: amqp.GetMessage[]) => messages.map((m) => m.properties.messageId as string);

describe.each(BACKENDS)('outbox relay: %s', (backend) => {
  it('publishes a row as the publisher would: same id, timestamp, headers, content type, persistence and routing', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const conn = await rawConnection();
    const occurredAt = new Date('2024-05-01T12:00:00.123Z');
    const options = { correlationId: 'corr-1', type: 'OrderCreated', headers: { tenant: 'acme' }, occurredAt };
    const [viaOutbox] = await add(store, 1, { ...options, messageId: 'from-outbox' });
    await warren.publish('order.created', { i: 0 }, { ...options, messageId: 'from-publisher' });
    const direct = (await drain(conn, queue))[0] as amqp.GetMessage;
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the row to be published');
    const relayed = (await drain(conn, queue))[0] as amqp.GetMessage;
    expect(viaOutbox).toBe('from-outbox');
    expect({ ...relayed.properties, messageId: 'x' }).toEqual({ ...direct.properties, messageId: 'x' });
    expect(relayed.properties).toMatchObject({ messageId: 'from-outbox', contentType: 'application/json', deliveryMode: 2, timestamp: Math.floor(occurredAt.getTime() / 1000), correlationId: 'corr-1', type: 'OrderCreated' });
    expect(relayed.properties.headers).toMatchObject({ tenant: 'acme', 'warren-occurred-at': occurredAt.toISOString() });
    expect(relayed.fields).toMatchObject({ exchange: topology.exchange, routingKey: 'order.created' });
    expect(relayed.content.toString()).toBe(direct.content.toString());
    await waitFor(async () => (await relay.lag()).pending === 0, 'the row to be marked sent');
    expect(relay.stats).toMatchObject({ published: 1, flagged: 0 });
  });

  it('publishes rows in insertion order, across batches', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const ids = await add(store, 30);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 7 });
    await relay.start();
    onTeardown(() => relay.stop());
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 30, 'all rows published');
    expect(idsOf(await drain(conn, queue))).toEqual(ids);
    expect(await relay.lag()).toEqual({ pending: 0, oldestPendingAgeMs: 0, failed: 0 });
  });

  it('wakes at once when a transaction adds a row, without waiting for its poll', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 60_000 });
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(() => relay.stats.passes >= 1, 'the first (empty) pass');
    await sleep(50);
    const conn = await rawConnection();
    const started = Date.now();
    await add(store, 1);
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the new row to be published', 3000);
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it('flags an unroutable row with the reason instead of retrying it forever; the rows after it still go out; release() retries it', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const [lost] = await add(store, 1, {}, 'nobody.listens');
    const [fine] = await add(store, 1);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20 });
    const flagged: unknown[] = [];
    relay.on('flagged', (f) => flagged.push(f));
    await relay.start();
    onTeardown(() => relay.stop());
    const conn = await rawConnection();
    await waitFor(async () => (await relay.lag()).failed === 1 && (await depth(conn, queue)) === 1, 'one row flagged, the other published');
    expect(idsOf(await drain(conn, queue))).toEqual([fine]);
    const failures = await store.outbox.failed();
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ messageId: lost, routingKey: 'nobody.listens', exchange: null, attempts: 1 });
    expect(failures[0]?.error).toMatch(/NO_ROUTE/);
    expect(flagged).toHaveLength(1);
    await sleep(100);
    expect(relay.stats.flagged).toBe(1); // not retried
    // Someone binds the key, then releases the row.
    const ch = await conn.createChannel();
    await ch.bindQueue(queue, topology.exchange, 'nobody.listens');
    await ch.close();
    expect(await store.outbox.release()).toBe(1);
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the released row to be published');
    expect(idsOf(await drain(conn, queue))).toEqual([lost]);
    // The broker routes the message before its confirm reaches the relay, which marks the
    // row sent only then: the queue can hold the message while the row is still pending.
    await waitFor(async () => {
      const lag = await relay.lag();
      return lag.pending === 0 && lag.failed === 0;
    }, 'the released row to be marked sent');
  });

  it('flags a row amqplib cannot encode with the encoder\'s error instead of retrying it; the rows after it go on; released, it is flagged again', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const [first] = await add(store, 1);
    // A header table over amqplib's frame buffer, and a short string over 255 bytes.
    const [bigHeader] = await add(store, 1, { headers: { note: 'x'.repeat(200_000) } });
    const [second] = await add(store, 1);
    const [longType] = await add(store, 1, { type: 't'.repeat(300) });
    const [third] = await add(store, 1);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    const flagged: Array<{ messageId: string; error: string }> = [];
    relay.on('flagged', (f: { messageId: string; error: string }) => flagged.push(f));
    const pass = await relay.runOnce();
    expect(pass).toMatchObject({ claimed: 5, published: 3, flagged: 2, failed: 0 });
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 3, 'the three encodable rows to be routed');
    expect(idsOf(await drain(conn, queue))).toEqual([first, second, third]);
    const failures = await store.outbox.failed();
    expect(failures.map((f) => f.messageId)).toEqual([bigHeader, longType]);
    for (const f of failures) {
      expect(f.attempts).toBe(1);
      expect(f.error).toMatch(/^amqplib cannot encode the message, so it can never be sent as it is \((RangeError|TypeError): .+\)$/);
    }
    expect(flagged.map((f) => f.messageId)).toEqual([bigHeader, longType]);
    expect(await relay.lag()).toMatchObject({ pending: 0, failed: 2 });
    // Released without a fix, they are flagged again, not left pending to be retried.
    expect(await store.outbox.release()).toBe(2);
    expect(await relay.runOnce()).toMatchObject({ claimed: 2, published: 0, flagged: 2, failed: 0 });
    expect((await store.outbox.failed()).map((f) => [f.messageId, f.attempts])).toEqual([
      [bigHeader, 2],
      [longType, 2],
    ]);
    expect(await depth(conn, queue)).toBe(0);
  });

  it('keeps strict order when the broker nacks a row in the middle of a batch: the rows behind it wait and go again after it', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const conn = await rawConnection();
    // A queue that holds one message and nacks publishes beyond it (reject-publish), bound
    // to one key only: filled, it nacks exactly the row with that key, deterministically,
    // while the rows around it (order.created, only to the audit queue) are confirmed.
    const ch = await conn.createChannel();
    const full = (await ch.assertQueue(uniqueName('full'), { exclusive: true, arguments: { 'x-max-length': 1, 'x-overflow': 'reject-publish' } })).queue;
    await ch.bindQueue(full, topology.exchange, 'order.limited');
    ch.sendToQueue(full, Buffer.from('filler'));
    await waitFor(async () => (await depth(conn, full)) === 1, 'the limited queue to fill');
    const [r0] = await add(store, 1);
    const [r1] = await add(store, 1, {}, 'order.limited');
    const [r2, r3] = await add(store, 2);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 10, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    await relay.start();
    onTeardown(() => relay.stop());
    // First pass: r1 nacked, r2 and r3 confirmed but held back; then r1 alone, again and again.
    await waitFor(() => relay.stats.failed >= 5, 'the nacked row to be tried again');
    expect(await relay.lag()).toMatchObject({ pending: 3, failed: 0 });
    expect(relay.stats.published).toBe(1);
    // The audit queue (order.*) also takes a copy of r1 at each nacked try. r2 and r3 went
    // out once, pipelined behind r1, and not again while r1 is refused.
    const stuck = idsOf(await drain(conn, queue));
    expect(stuck.filter((id) => id !== r1)).toEqual([r0, r2, r3]);
    expect(stuck.slice(0, 2)).toEqual([r0, r1]);
    // Room in the limited queue: r1 is confirmed, then r2 and r3 go again, after it.
    await ch.purgeQueue(full);
    await waitFor(async () => (await relay.lag()).pending === 0, 'the rows to go out');
    const after = idsOf(await drain(conn, queue));
    expect(after.slice(-3)).toEqual([r1, r2, r3]);
    expect(after.filter((id) => id !== r1)).toEqual([r2, r3]);
    expect(idsOf(await drain(conn, full))).toEqual([r1]);
    expect(relay.stats).toMatchObject({ published: 4, flagged: 0 });
  });

  it('flags a row whose exchange does not exist (404) instead of retrying it and closing the channel again; the rows after it go on; release() retries it', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warnings: string[] = [];
    const logger = { debug() {}, info() {}, warn: (message: string) => void warnings.push(message), error() {} };
    const warren = await connectWarren(topology, { logger });
    const conn = await rawConnection();
    const missing = `${topology.exchange}.missing`;
    const [r0] = await add(store, 1);
    const [r1] = await add(store, 1, { exchange: missing });
    const [r2, r3] = await add(store, 2);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    const flagged: unknown[] = [];
    relay.on('flagged', (f) => flagged.push(f));
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(async () => (await relay.lag()).failed === 1 && (await relay.lag()).pending === 0, 'one row flagged, the others published');
    // r0 may go twice: the channel close fails its publish too if it was not confirmed yet.
    expect([...new Set(idsOf(await drain(conn, queue)))]).toEqual([r0, r2, r3]);
    const failures = await store.outbox.failed();
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ messageId: r1, exchange: missing, attempts: 1 });
    expect(failures[0]?.error).toMatch(/404 NOT_FOUND/);
    expect(failures[0]?.error).toContain(`'${missing}'`);
    await sleep(200);
    // Not retried: the broker closed the publisher's channel once, not at every pass.
    expect(relay.stats.flagged).toBe(1);
    expect(flagged).toHaveLength(1);
    expect(warnings.filter((w) => w === 'publish channel error')).toHaveLength(1);
    await expect(warren.publish('order.created', { app: true })).resolves.toHaveProperty('messageId');
    await drain(conn, queue);
    // Someone creates the exchange (bound to the audit queue), then releases the row.
    const ch = await conn.createChannel();
    await ch.assertExchange(missing, 'topic', { durable: false });
    onTeardown(async () => void (await ch.deleteExchange(missing).catch(() => undefined)));
    await ch.bindQueue(queue, missing, 'order.*');
    expect(await store.outbox.release()).toBe(1);
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the released row to be published');
    expect(idsOf(await drain(conn, queue))).toEqual([r1]);
    // The row is marked sent once its confirm is back, which can come after it was delivered.
    await waitFor(async () => { const lag = await relay.lag(); return lag.pending === 0 && lag.failed === 0; }, 'the released row to be marked sent');
  });

  it('is safe with several relays at once: each row once, still in insertion order (strictOrder)', async () => {
    const h = await harness(backend);
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const ids = await add(h.store(), 120);
    const relays = [h.store(), h.store(), h.store()].map((s) => s.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 10, pollMs: 10 }));
    await Promise.all(relays.map((r) => r.start()));
    onTeardown(async () => void (await Promise.all(relays.map((r) => r.stop()))));
    const conn = await rawConnection();
    await waitFor(async () => (await h.store().outbox.lag()).pending === 0, 'every row sent', 15_000);
    expect(idsOf(await drain(conn, queue))).toEqual(ids);
    expect(relays.reduce((n, r) => n + r.stats.published, 0)).toBe(120);
  });

  it('lets several relays publish side by side with strictOrder off: each row exactly once', async () => {
    const h = await harness(backend);
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const ids = await add(h.store(), 120);
    const relays = [h.store(), h.store(), h.store()].map((s) => s.relay({ publisher: warren.publisher, exchange: topology.exchange, batchSize: 10, pollMs: 10, strictOrder: false }));
    await Promise.all(relays.map((r) => r.start()));
    onTeardown(async () => void (await Promise.all(relays.map((r) => r.stop()))));
    const conn = await rawConnection();
    await waitFor(async () => (await h.store().outbox.lag()).pending === 0, 'every row sent', 15_000);
    const got = idsOf(await drain(conn, queue));
    expect(got).toHaveLength(120);
    expect([...got].sort()).toEqual([...ids].sort());
  });

  it('keeps rows while the broker is down, backs off, then publishes them in order', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const u = new URL(AMQP_URL);
    u.port = String(proxy.port);
    const warren = await connectWarren(topology, { url: u.toString(), reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 100 } });
    await relay.start();
    onTeardown(() => relay.stop());
    const before = await add(store, 3);
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 3, 'rows published while the broker is up');
    // In the queue is not yet sent: the relay marks a row once its confirm is back, and a
    // cut before that would have it publish the row again (at least once, as documented).
    await waitFor(async () => (await relay.lag()).pending === 0, 'the three rows marked sent');
    await proxy.cut();
    const during = await add(store, 20);
    await sleep(300);
    expect((await relay.lag()).pending).toBe(20);
    await proxy.restore();
    await waitFor(async () => (await relay.lag()).pending === 0, 'the waiting rows to go out', 20_000);
    expect(idsOf(await drain(conn, queue))).toEqual([...before, ...during]);
  });

  it('waits while the database is down and publishes once it is back', async () => {
    const h = await harness(backend);
    const { store, down, up } = await h.outage();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const ids = await add(store, 5);
    await down();
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 100 } });
    await relay.start();
    onTeardown(() => relay.stop());
    const conn = await rawConnection();
    await sleep(300);
    expect(await depth(conn, queue)).toBe(0);
    await up();
    await waitFor(async () => (await depth(conn, queue)) === 5, 'the rows to go out', 15_000);
    expect(idsOf(await drain(conn, queue))).toEqual(ids);
    await waitFor(async () => (await relay.lag()).pending === 0, 'the rows to be marked sent');
  });

  it('loses nothing when the relay is killed between publish and mark: at most a duplicate', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { options, topology, queue } = setup();
    const warren = await connectWarren(topology);
    const ids = await add(store, 10);
    const child = spawnChild({
      WARREN_STORE: JSON.stringify({ spec: h.spec }),
      WARREN_CHILD_ROLE: 'relay',
      WARREN_AMQP_URL: AMQP_URL,
      WARREN_TOPOLOGY: JSON.stringify(options),
      WARREN_CRASH: 'after-publish:3',
      WARREN_LEASE_MS: '300',
    });
    expect(await child.exited).toBe('SIGKILL');
    const publishedByChild = child.lines.filter((l) => l.startsWith('published ')).map((l) => l.slice('published '.length));
    expect(publishedByChild.length).toBeGreaterThanOrEqual(3);
    // Nothing was marked: the kill came before the mark.
    expect((await store.outbox.lag()).pending).toBe(10);
    // The same leaseMs as the dead relay's: a relay takes rows over once it has seen their
    // lease expired for a further leaseMs of its own.
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, leaseMs: 300 });
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(async () => (await relay.lag()).pending === 0, 'a fresh relay to publish the rest', 15_000);
    const got = idsOf(await drain(await rawConnection(), queue));
    expect(new Set(got)).toEqual(new Set(ids));
    // Each row at most twice; the second copy only for rows the dead relay got out.
    for (const id of ids) {
      const copies = got.filter((g) => g === id).length;
      expect(copies).toBeLessThanOrEqual(2);
      if (copies === 2) expect(got.indexOf(id)).toBeLessThan(10);
    }
    // The fresh relay sends in insertion order.
    expect(got.slice(got.length - 10)).toEqual(ids);
  });

  it('stops cleanly: rows added after stop() stay pending for the next relay', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = setup();
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 10 });
    await relay.start();
    await add(store, 2);
    await waitFor(async () => (await relay.lag()).pending === 0, 'rows sent');
    await relay.stop();
    await add(store, 2);
    await sleep(100);
    expect((await relay.lag()).pending).toBe(2);
    expect(relay.stats.published).toBe(2);
  });

  it('prunes sent rows like markers', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    await add(store, 5);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    await relay.runOnce();
    await drain(await rawConnection(), queue);
    expect((await store.prune({ olderThanMs: 0, batchSize: 2 })).outbox).toBe(5);
    const left = await store.transaction((tx) => exec(h.spec, tx, `SELECT count(*) AS n FROM ${store.tables.outbox}`));
    expect(Number((left[0] as { n: number }).n)).toBe(0);
  });
});
