/**
 * Consumer.close() waits for the broker (the cancel, the channel's close) only so long:
 * a broker that stops answering must not hold an application's shutdown forever. Only
 * the broker's answers are held here, so the handler close() waited for is acked, once.
 */
import { describe, expect, it } from 'vitest';
import { TcpProxy } from '../../src/store/testing/tcp-proxy.js';
import { AMQP_URL, connectWarren, onTeardown, rawConnection, testTopology, waitFor } from '../helpers.js';

describe('Consumer.close() against a broker that stops answering', () => {
  it('returns within its bounds; the handler it waited for finishes, and its ack still reaches the broker', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const url = new URL(AMQP_URL);
    url.port = String(proxy.port);
    const held = await connectWarren(topology, { url: url.toString() });
    let release!: () => void;
    const started: string[] = [];
    const consumer = await held.consume('billing', async (_p: unknown, ctx) => {
      started.push(ctx.messageId as string);
      await new Promise<void>((r) => (release = r));
    }, { shutdownTimeoutMs: 1_000 });
    const direct = await connectWarren(topology);
    const { messageId } = await direct.publish('order.created', { n: 1 });
    await waitFor(() => started.length === 1, 'the handler started');

    proxy.hold(); // from here on the broker's answers never reach the consumer
    const began = Date.now();
    const closing = consumer.close();
    release();
    await closing;
    const tookMs = Date.now() - began;
    // Cancel and channel close wait at most 1 s each (shutdownTimeoutMs, at least 1 s).
    expect(tookMs).toBeGreaterThanOrEqual(1_000);
    expect(tookMs).toBeLessThan(15_000);

    // What the client sent still went through: the ack, then the cancel and the close.
    await proxy.cut();
    const seen: string[] = [];
    await direct.consume('billing', async (_p: unknown, ctx) => void seen.push(ctx.messageId as string));
    const conn = await rawConnection();
    await waitFor(async () => {
      const ch = await conn.createChannel();
      try {
        const q = await ch.checkQueue(topology.consumer('billing').queue);
        return q.messageCount === 0 && q.consumerCount >= 1;
      } finally {
        await ch.close();
      }
    }, 'the queue drained');
    await new Promise((r) => setTimeout(r, 300)); // a redelivery, had there been one, would have reached the handler by now
    expect(started).toEqual([messageId]);
    expect(seen).toEqual([]);
  });

  it('lets handlers that ignore their abort still time out after close(), so their deliveries leave the consumer', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    let started = 0;
    const consumer = await warren.consume('billing', async () => {
      started += 1;
      await new Promise(() => undefined); // never settles, never looks at its signal
    }, { timeoutMs: 500, shutdownTimeoutMs: 100, concurrency: 2, prefetch: 2 });
    await warren.publish('order.created', { n: 1 });
    await warren.publish('order.created', { n: 2 });
    await waitFor(() => started === 2, 'both handlers started');
    await consumer.close();
    expect(consumer.stats.inFlight).toBe(2);
    await waitFor(() => consumer.stats.inFlight === 0, 'both runs timed out after the close');
  });
});
