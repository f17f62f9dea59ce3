/**
 * Invariant 10: every delivery reaches an outcome within a bounded time, whatever user
 * code does. A schema's `validate` may be asynchronous (Standard Schema allows a
 * promise), and it runs before the handler's clock starts.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../helpers.js';

describe('a schema whose validate never settles', () => {
  // Without a bound the delivery would sit in flight until the broker's consumer timeout
  // (30 min). validate() gets the handler's timeoutMs and a timeout is a transient failure.
  it('the delivery reaches an outcome within the handler timeout: retried, then parked at the cap', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('schemahang')]: { bindings: ['x'], retry: { delays: ['20ms'], maxAttempts: 2 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const outcomes: string[] = [];
    const schema = { '~standard': { version: 1 as const, vendor: 'test', validate: () => new Promise<never>(() => undefined) } };
    const consumer = await warren.consume(c.name, async () => undefined, { schema, timeoutMs: 200, onOutcome: (o) => void outcomes.push(o.kind) });
    await warren.publish('x', { n: 1 });
    await waitFor(() => consumer.stats.inFlight === 1, 'the delivery to start');
    await waitFor(() => outcomes.length === 2, 'a retry, then parking at the cap', 10_000);
    expect(outcomes).toEqual(['retried', 'parked']);
    await waitFor(() => consumer.stats.inFlight === 0, 'the consumer to be idle');
  });
});
