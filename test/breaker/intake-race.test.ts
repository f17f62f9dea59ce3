/**
 * A pause that comes while the consumer's consume is on its way to the broker (a resume,
 * a breaker's close or an attach just asked for one): the broker may send deliveries
 * before the cancel that follows takes effect. They never start while paused, and they go
 * back to the queue; the next resume handles them, whether or not more messages come.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, depth, rawConnection, testTopology, waitFor } from '../helpers.js';

describe('an intake change while a consume is on its way', () => {
  it('a pause within the round trip of a resume leaves nothing held; the next resume handles every message', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('ship')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const raw = await rawConnection();
    const runs: number[] = [];
    const consumer = await warren.consume<{ i: number }>(c.name, ({ i }) => void runs.push(i), { prefetch: 10, concurrency: 2 });
    await consumer.pause('before the messages');
    for (let i = 0; i < 5; i++) await warren.publish('x', { i });
    await waitFor(async () => (await depth(raw, c.queue)) === 5, 'the 5 messages to wait in the work queue');
    // A resume and, before the broker has answered its consume, a pause: several times, so
    // that some of them land between the broker's consume-ok and the deliveries it sends.
    for (let round = 0; round < 5; round++) {
      const resumed = consumer.resume();
      await new Promise((r) => setImmediate(r));
      const paused = consumer.pause(`round ${round}`);
      await Promise.all([resumed, paused]);
      // Whatever came before the cancel took effect went back: the queue holds all 5 again.
      await waitFor(async () => (await depth(raw, c.queue)) + runs.length === 5, () => `the unstarted messages back in the work queue (${runs.length} handled)`);
    }
    expect(consumer.intake.consuming).toBe(false);
    // No more messages come: the resume alone must start every one.
    await consumer.resume();
    await waitFor(() => runs.length === 5, () => `the 5 messages handled after the resume (${runs.length})`);
    expect([...runs].sort()).toEqual([0, 1, 2, 3, 4]);
    expect(consumer.stats.parked).toBe(0);
  });
});
