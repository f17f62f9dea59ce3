/**
 * A retry inside the work queue (`retry.inQueue`, RabbitMQ 4.3's delayed retry), without
 * a broker: the declaration's checks, the queue arguments, the contract's decisions at
 * every attempt, how attempts are read, and which brokers have the feature.
 */
import { describe, expect, it } from 'vitest';
import { InvalidOptionError, PermanentError, UnsupportedBrokerError } from '../errors.js';
import { HEADER } from '../headers.js';
import { checkBrokerFeatures, hasInQueueRetry, parseVersion } from '../topology/broker-features.js';
import { defineTopology, type TopologyOptions } from '../topology/declaration.js';
import { consumerQueues } from '../topology/plan.js';
import { CrashLoopError, decide } from '../consume/contract.js';
import { readInQueueAttempts } from './attempts.js';
import { decideInQueueRetry, inQueueDelay } from './ladder.js';

function topology(extra: Partial<TopologyOptions['consumers'][string]> = {}, top: Partial<TopologyOptions> = {}) {
  return defineTopology({ queueType: 'quorum', ...top, consumers: { billing: { bindings: ['order.*'], retry: { inQueue: { min: '500ms', max: '2s' }, maxAttempts: 6 }, ...extra } } });
}

describe('declaring a retry inside the queue', () => {
  it('declares no tier queue, and the work queue with the delayed-retry arguments and room above the cap', () => {
    const c = topology().consumer('billing');
    expect(c.inQueue).toEqual({ minMs: 500, maxMs: 2000 });
    expect(c.retryQueues).toEqual([]);
    const queues = consumerQueues(c);
    expect(queues.map((q) => q.role)).toEqual(['work', 'parked']);
    expect(queues[0]?.arguments).toMatchObject({
      'x-queue-type': 'quorum',
      'x-delayed-retry-type': 'failed',
      'x-delayed-retry-min': 500,
      'x-delayed-retry-max': 2000,
      'x-delivery-limit': 8,
      'x-dead-letter-routing-key': c.parkedQueue,
      'x-dead-letter-strategy': 'at-least-once',
    });
  });

  it('refuses it on a classic queue, naming the option and the fix', () => {
    expect(() => topology({ queueType: 'classic' })).toThrow(/consumers\.billing\.retry\.inQueue.*needs a quorum queue.*queueType: 'quorum'/);
  });

  it('refuses delays and inQueue given together, a max below min, a missing bound, an unknown key', () => {
    expect(() => topology({ retry: { delays: ['1s'], inQueue: { min: '1s', max: '2s' } } })).toThrow(/consumers\.billing\.retry\.inQueue.*given with `delays`/);
    expect(() => topology({ retry: { inQueue: { min: '2s', max: '1s' } } })).toThrow(/retry\.inQueue\.max.*1s is shorter than min \(2s\)/);
    expect(() => topology({ retry: { inQueue: { min: '2s' } as never } })).toThrow(/needs both `min` and `max`/);
    expect(() => topology({ retry: { inQueue: { min: '1s', max: '2s', mx: 3 } as never } })).toThrow(InvalidOptionError);
  });

  it("refuses a consumer's own crashLimit: the broker counts failures and deaths in one number", () => {
    expect(() => topology({ crashLimit: 3 })).toThrow(/consumers\.billing\.crashLimit.*does not apply.*maxAttempts/);
  });

  it("takes the topology's inQueue, and lets a consumer's delays replace it", () => {
    const t = defineTopology({
      queueType: 'quorum',
      retry: { inQueue: { min: '1s', max: '10s' } },
      consumers: { a: { bindings: ['a'] }, b: { bindings: ['b'], retry: { delays: ['5s'] } } },
    });
    expect(t.consumer('a').inQueue).toEqual({ minMs: 1000, maxMs: 10_000 });
    expect(t.consumer('b').inQueue).toBeUndefined();
    expect(t.consumer('b').retryQueues).toHaveLength(1);
  });
});

describe('the linear schedule', () => {
  it('waits min × n, capped at max, and parks at maxAttempts runs', () => {
    const retry = { minMs: 500, maxMs: 2000 };
    expect([1, 2, 3, 4, 5, 6].map((n) => inQueueDelay(n, retry))).toEqual([500, 1000, 1500, 2000, 2000, 2000]);
    expect(decideInQueueRetry(0, retry, 3)).toEqual({ action: 'retry', delayMs: 500, attempts: 1 });
    expect(decideInQueueRetry(1, retry, 3)).toEqual({ action: 'retry', delayMs: 1000, attempts: 2 });
    expect(decideInQueueRetry(2, retry, 3)).toEqual({ action: 'park', attempts: 3 });
  });
});

describe('the contract for a consumer that retries inside its queue', () => {
  const c = topology().consumer('billing');
  const threw = { kind: 'threw', error: new Error('ledger down') } as const;

  it('retries in the work queue while attempts are left, then parks with the failure', () => {
    for (let failed = 0; failed < c.maxAttempts - 1; failed++) {
      expect(decide({ happened: threw, attempts: failed, headers: {}, consumer: c })).toMatchObject({ kind: 'retry', inQueue: true, queue: c.queue, counted: true, attempts: failed + 1, delayMs: Math.min(500 * (failed + 1), 2000) });
    }
    expect(decide({ happened: threw, attempts: c.maxAttempts - 1, headers: {}, consumer: c })).toMatchObject({ kind: 'park', reason: 'max-attempts', attempts: c.maxAttempts, error: threw.error, minimal: false });
  });

  it('parks a permanent error at once', () => {
    expect(decide({ happened: { kind: 'threw', error: new PermanentError('no such account') }, attempts: 0, headers: {}, consumer: c })).toMatchObject({ kind: 'park', reason: 'permanent-error', attempts: 1 });
  });

  it('gives back uncounted when the database is away', () => {
    expect(decide({ happened: { kind: 'store-unavailable', error: new Error('down') }, attempts: 2, headers: {}, consumer: c })).toMatchObject({ kind: 'retry', inQueue: true, counted: false, attempts: 2 });
  });

  it('runs a redelivery under the cap, and parks one counted maxAttempts times as a crash loop', () => {
    const redelivered = { kind: 'redelivered', seenInFlight: false } as const;
    expect(decide({ happened: redelivered, attempts: c.maxAttempts - 1, headers: {}, consumer: c })).toEqual({ kind: 'run' });
    const parked = decide({ happened: redelivered, attempts: c.maxAttempts, headers: {}, consumer: c });
    expect(parked).toMatchObject({ kind: 'park', reason: 'crash-loop' });
    expect((parked as { error: unknown }).error).toBeInstanceOf(CrashLoopError);
    // The tier guard's crashLimit plays no part: under maxAttempts, a run.
    expect(decide({ happened: redelivered, attempts: c.crashLimit, headers: { 'x-delivery-count': c.crashLimit }, consumer: c })).toEqual({ kind: 'run' });
  });
});

describe('attempts of a consumer that retries inside its queue', () => {
  const none = new Set<string>();
  it("reads the broker's count on a redelivery only, added to warren's header", () => {
    expect(readInQueueAttempts({ 'x-delivery-count': 7 }, false, none)).toMatchObject({ failed: 0 });
    expect(readInQueueAttempts({ 'x-delivery-count': 3 }, true, none)).toMatchObject({ failed: 3, source: 'x-delivery-count' });
    expect(readInQueueAttempts({ 'x-delivery-count': 2, [HEADER.attempts]: 2 }, true, none)).toMatchObject({ failed: 4 });
    expect(readInQueueAttempts({ [HEADER.attempts]: 2 }, false, none)).toMatchObject({ failed: 2, source: 'header' });
    expect(readInQueueAttempts({ 'x-delivery-count': 'lots' }, true, none)).toMatchObject({ failed: 0 });
  });
});

describe('which brokers retry inside a queue', () => {
  it('RabbitMQ 4.3 and later, nothing else', () => {
    expect(parseVersion('4.3.6')).toEqual({ major: 4, minor: 3 });
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '4.3.6' })).toBe(true);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '4.4.0' })).toBe(true);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '5.0.0-beta.1' })).toBe(true);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '4.2.3' })).toBe(false);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '4.0.5' })).toBe(false);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: '3.10.8' })).toBe(false);
    expect(hasInQueueRetry({ product: 'LavinMQ', version: '4.3.0' })).toBe(false);
    expect(hasInQueueRetry({ product: 'RabbitMQ', version: undefined })).toBe(false);
  });

  it('refuses a consumer that retries inside its queue on an older broker, naming the option and what to do', () => {
    const consumers = topology().consumers.values();
    let error: unknown;
    try {
      checkBrokerFeatures({ product: 'RabbitMQ', version: '4.0.5' }, consumers);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(UnsupportedBrokerError);
    const e = error as UnsupportedBrokerError;
    expect(e.option).toBe('consumers.billing.retry.inQueue');
    expect(e.server).toBe('RabbitMQ 4.0.5');
    expect(e.message).toMatch(/needs RabbitMQ 4\.3 or later.*the broker is RabbitMQ 4\.0\.5.*Upgrade the broker.*retry\.delays/);
    expect(() => checkBrokerFeatures({ product: 'RabbitMQ', version: '4.3.6' }, topology().consumers.values())).not.toThrow();
    // A topology without it connects to any broker.
    expect(() => checkBrokerFeatures({ product: 'RabbitMQ', version: '3.10.8' }, defineTopology({ consumers: { a: { bindings: ['a'] } } }).consumers.values())).not.toThrow();
  });
});

describe('what else reads the ladder', () => {
  it("the canary's window covers the whole in-queue schedule", async () => {
    const { inQueueLadderMs } = await import('../park/canary.js');
    // maxAttempts 6: five waits, 500 + 1000 + 1500 + 2000 + 2000.
    expect(inQueueLadderMs({ minMs: 500, maxMs: 2000 }, 6)).toBe(7000);
  });
});
