/**
 * The relay's order under contention, over every backend, against a real broker: two
 * relays while one publish outlasts the SQLite lease, and transactions that insert
 * outbox rows in one order and commit in the other.
 */
import { describe, expect, it } from 'vitest';
import type * as amqp from 'amqplib';
import type { OutgoingMessage } from '../publish/publisher.js';
import { AMQP_URL, connectWarren, depth, drain, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from './testing/harness.js';
import type { AnyStore } from './testing/spec.js';
import { TcpProxy } from './testing/tcp-proxy.js';

function setup(): { topology: ReturnType<typeof testTopology>; queue: string } {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('audit')]: { bindings: ['order.*'] } } }));
  const queue = [...topology.consumers.values()][0]?.queue as string;
  return { topology, queue };
}

const idsOf = (messages: amqp.GetMessage[]) => messages.map((m) => m.properties.messageId as string);

/** Resolves once `open()` is called: a gate a test holds a transaction open with. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

async function add(store: AnyStore, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push((await store.transaction((tx) => store.outbox.add(tx, 'order.created', { i }))).messageId);
  return ids;
}

describe.each(BACKENDS)('outbox relay order: %s', (backend) => {
  it('keeps its claim while a publish outlasts the lease: a second relay never sends the same rows meanwhile', async () => {
    const h = await harness(backend);
    const { topology, queue } = setup();
    // The first relay publishes through a proxy that holds the broker's confirms back.
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const viaProxy = new URL(AMQP_URL);
    viaProxy.port = String(proxy.port);
    const slow = await connectWarren(topology, { url: viaProxy.toString() });
    const fast = await connectWarren(topology);
    let sending = 0;
    const slowPublisher = { send: (m: OutgoingMessage) => (sending++, slow.publisher.send(m)) };
    const first = h.store().relay({ publisher: slowPublisher, exchange: topology.exchange, leaseMs: 300, pollMs: 10 });
    await first.start();
    onTeardown(() => first.stop());
    onTeardown(async () => proxy.release());
    proxy.hold();
    const writer = h.store();
    // One transaction, so the relay claims all five in one batch.
    const ids = await writer.transaction(async (tx) => {
      const out: string[] = [];
      for (let i = 0; i < 5; i++) out.push((await writer.outbox.add(tx, 'order.created', { i })).messageId);
      return out;
    });
    await waitFor(() => sending === 5, 'the first relay to send the rows (their confirms held)');
    const claimedAt = Date.now();
    const second = h.store().relay({ publisher: fast.publisher, exchange: topology.exchange, leaseMs: 300, pollMs: 10 });
    await second.start();
    onTeardown(() => second.stop());
    // Well past the lease, with the second relay polling every 10 ms all along.
    await waitFor(() => Date.now() - claimedAt > 1500, 'time to pass the lease several times');
    const conn = await rawConnection();
    expect(await depth(conn, queue)).toBe(5); // the first relay's copies: the broker has them, its confirms are held
    proxy.release();
    await waitFor(async () => (await h.store().outbox.lag()).pending === 0, 'the rows to be marked sent');
    expect(idsOf(await drain(conn, queue))).toEqual(ids);
    expect(second.stats.published).toBe(0);
    expect(first.stats.published).toBe(5);
  });

  it('publishes rows in insertion order when the transaction that inserted first commits last', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 10 });
    await relay.start();
    onTeardown(() => relay.stop());
    const [before] = await add(store, 1);
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the first row to go out');
    const hold = gate();
    const added = gate();
    let first = '';
    const t1 = store.transaction(async (tx) => {
      first = (await store.outbox.add(tx, 'order.created', { t: 1 })).messageId;
      added.open();
      await hold.wait;
    });
    await added.wait;
    let second = '';
    let committed = false;
    const t2 = store
      .transaction(async (tx) => void (second = (await store.outbox.add(tx, 'order.created', { t: 2 })).messageId))
      .then(() => void (committed = true));
    if (backend === 'postgres') {
      // The later row is committed and visible while the earlier one is not: let the relay look.
      await waitFor(() => committed, 'the second transaction to commit');
      const passes = relay.stats.passes;
      await waitFor(() => relay.stats.passes >= passes + 3, 'the relay to pass with the second row visible');
    }
    hold.open();
    await Promise.all([t1, t2]);
    await waitFor(async () => (await store.outbox.lag()).pending === 0, 'both rows to go out');
    expect(idsOf(await drain(conn, queue))).toEqual([before, first, second]);
  });

  it('does not hold rows back for long behind an insert that rolled back', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 10 });
    await relay.start();
    onTeardown(() => relay.stop());
    const hold = gate();
    const added = gate();
    const t1 = store.transaction(async (tx) => {
      await store.outbox.add(tx, 'order.created', { t: 1 });
      added.open();
      await hold.wait;
      throw new Error('the app changed its mind');
    });
    await added.wait;
    const t2 = store.transaction((tx) => store.outbox.add(tx, 'order.created', { t: 2 }));
    if (backend === 'postgres') await t2;
    hold.open();
    await expect(t1).rejects.toThrow('changed its mind');
    const { messageId: second } = await t2;
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the committed row to go out', 3000);
    expect(idsOf(await drain(conn, queue))).toEqual([second]);
  });

  it.runIf(backend === 'postgres')('stops holding rows back after gapTimeoutMs: the late row goes out after the rows behind it', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology);
    const warnings: string[] = [];
    const logger = { debug() {}, info() {}, warn: (message: string) => void warnings.push(message), error() {} };
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 10, gapTimeoutMs: 200, logger });
    await relay.start();
    onTeardown(() => relay.stop());
    const hold = gate();
    const added = gate();
    let first = '';
    const t1 = store.transaction(async (tx) => {
      first = (await store.outbox.add(tx, 'order.created', { t: 1 })).messageId;
      added.open();
      await hold.wait;
    });
    onTeardown(async () => hold.open());
    await added.wait;
    const [second] = await add(store, 1);
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the later row to go out once the wait is over');
    expect(warnings.some((w) => w.includes('stopped waiting'))).toBe(true);
    hold.open();
    await t1;
    await waitFor(async () => (await depth(conn, queue)) === 2, 'the late row to go out');
    expect(idsOf(await drain(conn, queue))).toEqual([second, first]);
  });
});
