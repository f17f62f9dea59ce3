import { describe, expect, it } from 'vitest';
import { connectWarren, rawConnection, testTopology, waitFor } from '../helpers.js';

describe('the broker cancels the consumer', () => {
  it('when its work queue is deleted, the consumer re-declares its queues, re-attaches and handles what comes next', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('cancelme')]: { bindings: ['evt'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const handled: string[] = [];
    const consumer = await warren.consume(c.name, (_p, ctx) => void handled.push(ctx.messageId!));
    const cancelled: unknown[] = [];
    consumer.on('cancelled', (e) => cancelled.push(e));

    const before = await warren.publish('evt', { n: 1 });
    await waitFor(() => handled.length === 1, 'the first message to be handled');

    const raw = await rawConnection();
    const ch = await raw.createChannel();
    await ch.deleteQueue(c.queue);
    await waitFor(() => cancelled.length === 1, 'the consumer to notice the cancel');
    expect(cancelled[0]).toEqual({ consumer: c.name, queue: c.queue });
    await waitFor(() => consumer.attached, 'the consumer to re-attach');

    // The queue is back, with its binding: a publish reaches it and is handled.
    const after = await warren.publish('evt', { n: 2 });
    await waitFor(() => handled.length === 2, 'the message published afterwards to be handled');
    expect(handled).toEqual([before.messageId, after.messageId]);
    const q = await ch.checkQueue(c.queue);
    expect(q.consumerCount).toBe(1);
    expect(q.messageCount).toBe(0);
    await ch.close();
  });
});
