/**
 * Invariant 10: every delivery reaches an outcome within a bounded time, whatever user
 * code does. A schema's `validate` may be asynchronous (Standard Schema allows a
 * promise), and it runs before the handler's clock starts.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../helpers.js';

describe('breaker: a schema whose validate never settles', () => {
  // Fails today: the delivery sits in flight forever (until the broker's consumer
  // timeout, 30 min, closes the channel and takes back every delivery on it; the
  // redelivery is then noted as a blip and the same thing happens again). Suggested
  // fix: start the run's clock before decoding (or race validate() against
  // `timeoutMs`) and park as invalid-payload / retry on timeout.
  it.fails('the delivery reaches an outcome within the handler timeout', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('schemahang')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const outcomes: string[] = [];
    const schema = { '~standard': { version: 1 as const, vendor: 'test', validate: () => new Promise<never>(() => undefined) } };
    const consumer = await warren.consume(c.name, async () => undefined, { schema, timeoutMs: 200, onOutcome: (o) => void outcomes.push(o.kind) });
    await warren.publish('x', { n: 1 });
    await waitFor(() => consumer.stats.inFlight === 1, 'the delivery to start');
    await waitFor(() => outcomes.length === 1, 'an outcome for the delivery', 5_000);
    expect(consumer.stats.inFlight).toBe(0);
  });
});
