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
    const first = h.store().relay({ publisher: slowPublisher, exchange: topology.exchange, leaseMs: 100, pollMs: 10 });
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
    const second = h.store().relay({ publisher: fast.publisher, exchange: topology.exchange, leaseMs: 100, pollMs: 10 });
    await second.start();
    onTeardown(() => second.stop());
    // Well past the lease, with the second relay polling every 10 ms all along.
    await waitFor(() => Date.now() - claimedAt > 800, 'time to pass the lease several times');
    const conn = await rawConnection();
    expect(await depth(conn, queue)).toBe(5); // the first relay's copies: the broker has them, its confirms are held
    proxy.release();
    await waitFor(async () => (await h.store().outbox.lag()).pending === 0, 'the rows to be marked sent');
    expect(idsOf(await drain(conn, queue))).toEqual(ids);
    expect(second.stats.published).toBe(0);
    expect(first.stats.published).toBe(5);
  });
});
