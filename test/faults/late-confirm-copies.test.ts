/**
 * A move's publish whose confirm is late (the broker is slow to read: a stall, a busy
 * node) is rejected with PublishNotConfirmedError at `confirmTimeoutMs`, and the move
 * publishes the copy again, on the same live channel, while the first copy is still on
 * its way. Every retry adds a copy; when the broker reads them, all land.
 */
import { describe, expect, it } from 'vitest';
import { BlockingProxy } from '../../src/publish/testing/blocking-proxy.js';
import { AMQP_URL, connectWarren, depth, onTeardown, rawConnection, testTopology, waitFor } from '../helpers.js';

describe('a move whose confirm is late', () => {
  // Without waiting for the late answer, each confirm timeout wrote another copy on the
  // same live channel (4 to 6 seen with confirmTimeoutMs 300 and a stall of a few
  // seconds), each of which would fail and multiply again at the next tier.
  it('one failed delivery leaves one copy in the retry queue, however long the broker is slow', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('lateconfirm')]: { bindings: ['x'], retry: { delays: ['1m'] } } } }));
    const c = [...topology.consumers.values()][0]!;
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const warren = await connectWarren(topology, { url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, publisher: { confirmTimeoutMs: 300 } });
    let gate: (() => void) | undefined;
    const waits: string[] = [];
    const consumer = await warren.consume(c.name, async () => {
      await new Promise<void>((r) => (gate = r));
      throw new Error('transient');
    }, { logger: { debug: () => undefined, info: () => undefined, warn: (m) => void waits.push(m), error: () => undefined } });
    await warren.publish('x', { n: 1 });
    await waitFor(() => gate !== undefined, 'the handler to start');
    proxy.stall();
    gate!();
    await waitFor(() => waits.some((w) => w.startsWith('no confirm yet for a moved copy')), 'the move to wait for the late answer');
    // Several confirm timeouts' worth of stall: time enough to write copies, were it to.
    await new Promise((r) => setTimeout(r, 1500));
    proxy.unblock();
    await waitFor(() => consumer.stats.retried === 1, 'the move to succeed');
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.retryQueues[0]!)) >= 1, 'the copy to land');
    // Give every written copy time to land.
    await new Promise((r) => setTimeout(r, 500));
    expect(await depth(raw, c.retryQueues[0]!), 'identical copies of one failed delivery in the retry queue').toBe(1);
    expect(consumer.stats.inFlight).toBe(0);
  });
});
