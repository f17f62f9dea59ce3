/**
 * A socket destroyed without an error (by a proxy agent, a TLS layer, a timeout handler)
 * emits only 'close': amqplib listens for 'end' and 'error', so it noticed only by the
 * heartbeat, two to three intervals later (about 30 s with the default 10 s heartbeat),
 * and the consumer stayed detached all that while.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../helpers.js';

describe('a socket closed without an error', () => {
  // Failed before the fix: 'disconnected' came ~30 s later ("Heartbeat timeout"), the
  // wait below timed out after 5 s.
  it('is a lost connection at once: the consumer re-attaches within seconds, not heartbeats', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('silent')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    const handled: number[] = [];
    const consumer = await warren.consume(c.name, async (p: { n: number }) => void handled.push(p.n));
    let lost = false;
    warren.connection.on('disconnected', () => (lost = true));
    const model = await warren.connection.waitReady(1000);
    (model as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    await waitFor(() => lost, 'the connection to be seen lost', 5_000);
    await waitFor(() => consumer.attached && warren.connection.currentGeneration === 2, 'the consumer to re-attach', 5_000);
    await warren.publish('k', { n: 1 });
    await waitFor(() => handled.length === 1, 'a message to be handled on the new connection');
    expect(handled).toEqual([1]);
  });
});
