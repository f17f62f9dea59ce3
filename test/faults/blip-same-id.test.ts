/**
 * The blip memory is keyed by message id. Two deliveries with one id (a publish sent
 * again after a lost confirm, as invariant 6 allows; a producer that reuses ids) in
 * flight together when the channel closes are noted once: the first redelivery uses
 * the note up, and the second is counted as a death and moved with
 * `warren-redeliveries: 1`, although this process lived through the same blip.
 */
import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../helpers.js';

function cutSocket(model: amqp.ChannelModel): void {
  (model as unknown as { connection: { stream: { destroy(error: Error): void } } }).connection.stream.destroy(new Error('socket cut by the test'));
}

describe('two deliveries with one message id through one blip', () => {
  // Failed before the fix: "expected 1 to be +0" (one redelivery moved as a death).
  it('neither redelivery is counted as a death', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('blipsameid')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    let runs = 0;
    const release: Array<() => void> = [];
    const consumer = await warren.consume(c.name, async () => {
      runs++;
      if (runs <= 2) await new Promise<void>((r) => release.push(r));
    }, { concurrency: 4, prefetch: 4 });
    await warren.publish('x', { n: 1 }, { messageId: 'same-id' });
    await warren.publish('x', { n: 1 }, { messageId: 'same-id' });
    await waitFor(() => runs === 2, 'both deliveries to start');
    const before = await warren.connection.waitReady(5000);
    cutSocket(before);
    await waitFor(async () => consumer.attached && (await warren.connection.waitReady(5000)) !== before, 'the consumer to re-attach after the blip', 15_000);
    // The redeliveries are held behind the runs still going (never run beside them) and
    // settled by their outcome when they end.
    for (const r of release) r();
    await waitFor(() => consumer.stats.acked === 2, 'both to be handled after the blip', 15_000);
    expect(consumer.stats.redeliveryMoved, 'both redeliveries followed a blip this process saw').toBe(0);
    expect(runs, 'no second run of either delivery').toBe(2);
  });
});
