/**
 * A consumer started while the connection is reconnecting, after the model is up but
 * before every ready hook has run: `onReady` neither runs the new hook (the connection
 * is not ready yet) nor is the hook in the list the reconnect is running (a copy taken
 * when it began). The consumer never attaches, until the next reconnect.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, sleep, testTopology, waitFor } from '../helpers.js';

describe('consume() while the connection runs its ready hooks', () => {
  // Failed before the fix: "Timed out after 5000 ms waiting for: the consumer to attach".
  it('the consumer attaches and handles messages', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('midhooks')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    // A slow ready hook (any setup step: declaring topology, another consumer's attach).
    let inHooks = false;
    await warren.connection.onReady(async () => {
      inHooks = true;
      await sleep(500);
      inHooks = false;
    });
    const model = await warren.connection.waitReady(1000);
    (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
    await waitFor(() => inHooks, 'the reconnect to be running its hooks');
    const handled: number[] = [];
    const consumer = await warren.consume(c.name, async (p: { n: number }) => void handled.push(p.n));
    await waitFor(() => warren.connection.ready, 'the reconnect to finish');
    await warren.publish('k', { n: 1 });
    await waitFor(() => consumer.attached, 'the consumer to attach', 5_000);
    await waitFor(() => handled.length === 1, 'the message to be handled');
    expect(handled).toEqual([1]);
  });
});
