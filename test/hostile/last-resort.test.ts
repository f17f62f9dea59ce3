/**
 * Every delivery reaches an outcome whatever user code throws, even where the failure
 * path does not expect it: here a retry table whose insert throws a value that throws
 * when looked at. The last resort parks the message with minimal metadata.
 */
import { describe, expect, it } from 'vitest';
import { HEADER, WaitForConditionError, type RetryTablePolicy } from '../../src/index.js';
import { connectWarren, depth, drain, rawConnection, testTopology, waitFor } from '../helpers.js';

const trap = (): never => {
  throw new Error('trap');
};

describe('the last resort', () => {
  it('parks a delivery whose failure path throws (failure-path-error), and the consumer keeps working', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('last')]: { bindings: ['x'], retry: { delays: [10], maxAttempts: 2 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const table = {
      nameDependency: () => undefined,
      insert: () => Promise.reject(new Proxy({}, { get: trap, getPrototypeOf: trap, ownKeys: trap })),
    };
    const handled: unknown[] = [];
    const consumer = await warren.consume(c.name, (p: { wait?: boolean }) => {
      if (p.wait) throw new WaitForConditionError('carrier');
      handled.push(p);
    }, { retryTable: { table } as unknown as RetryTablePolicy<unknown> });
    const { messageId } = await warren.publish('x', { wait: true });
    await warren.publish('x', { after: true });
    await waitFor(() => consumer.stats.parked === 1 && handled.length === 1, 'the message to be parked and the next one handled');
    const raw = await rawConnection();
    const [parked] = await drain(raw, c.parkedQueue);
    expect(parked?.properties.messageId).toBe(messageId);
    expect(parked?.properties.headers?.[HEADER.parkedReason]).toBe('failure-path-error');
    expect(parked?.properties.headers?.[HEADER.consumer]).toBe(c.name);
    expect(JSON.parse(parked!.content.toString())).toEqual({ wait: true });
    expect(await depth(raw, c.queue)).toBe(0);
  });
});
