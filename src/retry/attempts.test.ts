import { describe, expect, it } from 'vitest';
import { countDeaths, readAttempts } from './attempts.js';

const retryQueues = new Set(['billing.retry.10ms', 'billing.retry.20ms']);

describe('readAttempts', () => {
  it('is zero on a first delivery', () => {
    expect(readAttempts(undefined, retryQueues)).toEqual({ failed: 0, source: 'none' });
    expect(readAttempts({}, retryQueues)).toEqual({ failed: 0, source: 'none' });
  });
  it("reads warren's header, numeric strings included", () => {
    expect(readAttempts({ 'warren-attempts': 3 }, retryQueues)).toEqual({ failed: 3, source: 'header' });
    expect(readAttempts({ 'warren-attempts': '4' }, retryQueues)).toEqual({ failed: 4, source: 'header' });
  });
  it('prefers the header to x-death, which RabbitMQ 4 does not carry across a republish', () => {
    const xDeath = [{ queue: 'billing.retry.10ms', reason: 'expired', count: 1 }];
    expect(readAttempts({ 'warren-attempts': 5, 'x-death': xDeath }, retryQueues).failed).toBe(5);
  });
  it('falls back to x-death when the header is missing or unusable', () => {
    const xDeath = [
      { queue: 'other.retry.10ms', reason: 'expired', count: 9 },
      { queue: 'billing.retry.20ms', reason: 'expired', count: 2 },
      { queue: 'billing.retry.10ms', reason: 'rejected', count: 7 },
      { queue: 'billing.retry.10ms', reason: 'expired', count: 1 },
    ];
    expect(readAttempts({ 'x-death': xDeath }, retryQueues)).toEqual({ failed: 3, source: 'x-death' });
    const bad = readAttempts({ 'warren-attempts': 'many', 'x-death': xDeath }, retryQueues);
    expect(bad.failed).toBe(3);
    expect(bad.warning).toMatch(/not a whole number/);
  });
  it('reads a negative count as zero and caps a huge one', () => {
    const neg = readAttempts({ 'warren-attempts': -4 }, retryQueues);
    expect(neg.failed).toBe(0);
    expect(neg.warning).toMatch(/negative/);
    expect(readAttempts({ 'warren-attempts': 1e15 }, retryQueues).failed).toBe(1_000_000);
    expect(readAttempts({ 'warren-attempts': 2.5 }, retryQueues).warning).toBeDefined();
  });
  it('skips malformed x-death entries', () => {
    expect(countDeaths('nonsense', retryQueues)).toBe(0);
    expect(countDeaths([null, 3, { queue: 5 }, { queue: 'billing.retry.10ms', reason: 'expired', count: 'x' }], retryQueues)).toBe(0);
  });
});
