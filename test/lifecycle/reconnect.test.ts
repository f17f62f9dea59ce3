import { describe, expect, it } from 'vitest';
import { PublishNotConfirmedError } from '../../src/index.js';
import { connectWarren, depth, drain, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';
import { findConnection, forceCloseConnection, uniqueConnectionName } from './support.js';

describe('the broker closes the connection mid-stream', () => {
  it('consumers come back by themselves: every message handled at least once, none parked, the queue ends empty', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('stream')]: { bindings: ['tick'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const connectionName = uniqueConnectionName('stream');
    const warren = await connectWarren(topology, { connectionName, reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    const brokerName = await findConnection(connectionName);
    const N = 300;
    const published = new Set<string>();
    for (let i = 0; i < N; i++) published.add((await warren.publish('tick', { i })).messageId);

    const handled = new Map<string, number>();
    let reconnected = false;
    warren.connection.once('connected', () => (reconnected = true));
    const consumer = await warren.consume(c.name, async (_p, ctx) => {
      handled.set(ctx.messageId!, (handled.get(ctx.messageId!) ?? 0) + 1);
      await sleep(2);
    }, { prefetch: 20, concurrency: 5 });

    await waitFor(() => handled.size >= 60, 'some messages to be handled');
    expect(handled.size, 'the connection must close while messages are still flowing').toBeLessThan(N);
    await forceCloseConnection(brokerName);
    await waitFor(() => reconnected && consumer.attached, 'the connection and the consumer to come back');
    await waitFor(() => handled.size === N, `every message to be handled (${handled.size}/${N} so far)`, 20_000);
    await waitFor(() => consumer.stats.inFlight === 0, 'the consumer to be idle');
    expect(warren.connection.currentGeneration).toBe(2);

    expect(new Set(handled.keys())).toEqual(published);
    // Closing returns anything still unacked to the queue, so an empty queue
    // afterwards means every message was acked.
    await warren.close();
    const raw = await rawConnection();
    expect(await depth(raw, c.queue)).toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
    for (const q of c.retryQueues) expect(await depth(raw, q), q).toBe(0);
    expect(consumer.stats.parked).toBe(0);
  });

  it('a publish in flight when the connection dies is rejected with PublishNotConfirmedError or confirmed, never confirmed falsely', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('sink')]: { bindings: ['fact'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const connectionName = uniqueConnectionName('publish');
    const warren = await connectWarren(topology, { connectionName, reconnect: { initialDelayMs: 20, maxDelayMs: 200 }, publisher: { maxInFlight: 100 } });

    const confirmed: string[] = [];
    const rejected: unknown[] = [];
    let published = 0;
    let outstanding = 0;
    let stop = false;
    // Paused while the management API is asked for the connection (it can take seconds).
    let paused = true;
    const padding = 'x'.repeat(4096);
    // Publish in a steady stream, a few more than the publisher lets out at once, so
    // that publishes are always awaiting their confirm.
    const stream = (async () => {
      const all: Array<Promise<void>> = [];
      while (!stop) {
        if (paused || outstanding >= 150) {
          await sleep(1);
          continue;
        }
        const messageId = `m-${published++}`;
        outstanding++;
        all.push(
          warren
            .publish('fact', { padding }, { messageId })
            .then(() => void confirmed.push(messageId), (error: unknown) => void rejected.push(error))
            .finally(() => outstanding--),
        );
      }
      await Promise.all(all);
    })();
    // Close the connection from the broker's side while the stream runs, and again
    // until a close catches publishes unconfirmed: the broker often confirms all it
    // has read before it closes, and then nothing is in flight at that instant.
    const killed = new Set<string>();
    try {
      while (rejected.length === 0 && killed.size < 5) {
        paused = true;
        // Publishes have a connection of their own.
        const brokerName = await findConnection(`${connectionName} (publish)`, killed);
        paused = false;
        const before = confirmed.length;
        await waitFor(() => confirmed.length >= before + 300, 'publishes to be confirmed');
        await forceCloseConnection(brokerName);
        killed.add(brokerName);
        await waitFor(() => warren.publishConnection.currentGeneration === killed.size + 1 && warren.publishConnection.ready, 'the connection to come back');
        const after = confirmed.length;
        await waitFor(() => confirmed.length >= after + 300, 'publishes on the new connection to be confirmed');
      }
    } finally {
      stop = true;
      await stream;
    }

    expect(rejected.length, `no publish was in flight at any of ${killed.size} closes`).toBeGreaterThan(0);
    expect(confirmed.length + rejected.length).toBe(published);
    for (const error of rejected) expect(error).toBeInstanceOf(PublishNotConfirmedError);
    // A confirm is a promise that the broker has the message: check each one.
    const inQueue = new Set((await drain(await rawConnection(), c.queue)).map((m) => m.properties.messageId as string));
    const missing = confirmed.filter((id) => !inQueue.has(id));
    expect(missing, `${missing.length} confirmed messages are not in the queue`).toEqual([]);
  });
});

describe('separate connections', () => {
  it('publishes on a connection of their own, so losing it leaves consumers attached', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('split')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const connectionName = uniqueConnectionName('split');
    const warren = await connectWarren(topology, { connectionName, reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    const handled: number[] = [];
    const consumer = await warren.consume(c.name, (p: { i: number }) => void handled.push(p.i));
    await findConnection(connectionName);
    const publishing = await findConnection(`${connectionName} (publish)`);
    await forceCloseConnection(publishing);
    await waitFor(() => warren.publishConnection.currentGeneration === 2 && warren.publishConnection.ready, 'the publish connection to come back');
    expect(warren.connection.currentGeneration).toBe(1);
    expect(consumer.attached).toBe(true);
    await warren.publish('k', { i: 1 });
    await waitFor(() => handled.length === 1, 'the message to be handled');
  });
});
