/**
 * An outcome listener's failure must not become anyone's failure (the consumer catches
 * a listener that throws). `onOutcome` is typed `(outcome) => void`, which an async
 * function satisfies; its rejection escapes the consumer as an unhandled rejection,
 * which ends a Node process by default, and with it every delivery in flight (whose
 * redeliveries a restarted process then counts as deaths).
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, sleep, testTopology, waitFor } from '../helpers.js';

describe('an async outcome listener that rejects', () => {
  // Failed before the fix (test/setup.ts reported the unhandled rejection "listener failed").
  it('is logged, not left unhandled', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('asynclistener')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let calls = 0;
    const logged: string[] = [];
    const consumer = await warren.consume(c.name, async () => undefined, {
      logger: { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (m) => void logged.push(m) },
      // eslint-disable-next-line @typescript-eslint/no-misused-promises -- what a user without this rule writes
      onOutcome: async () => {
        calls++;
        throw new Error('listener failed');
      },
    });
    await warren.publish('x', { n: 1 });
    await waitFor(() => consumer.stats.acked === 1 && calls === 1, 'the message to be acked');
    await waitFor(() => logged.includes('an outcome listener threw'), 'the rejection to be logged');
    await sleep(50); // an unhandled rejection would surface here
    expect(consumer.stats.acked).toBe(1);
  });
});
