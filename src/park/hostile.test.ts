import { describe, expect, it } from 'vitest';
import { HEADER, MAX_ERROR_CLASS_CHARS, MAX_ERROR_MESSAGE_CHARS } from '../headers.js';
import { readAttempts } from '../retry/attempts.js';
import { describeFailure, failureFingerprint, failureHeaders } from './failure.js';
import { copyProperties, fitHeaders, headerTableBytes, isBrokerHeader, refreshHeaders, toParkedMessage } from './message.js';

describe('describeFailure never throws and stays bounded', () => {
  it('describes errors whose fields are huge, not strings, or throwing getters', () => {
    const named = describeFailure(Object.assign(new Error('x'), { name: 'N'.repeat(100_000) }));
    expect(named.errorClass.length).toBeLessThanOrEqual(MAX_ERROR_CLASS_CHARS);
    const odd = describeFailure(Object.assign(new Error('x'), { name: 7, message: { a: 1 }, stack: 42 }));
    expect(odd).toEqual({ errorClass: 'Error', message: '{"a":1}', stack: '' });
    const e = new Error('x');
    for (const k of ['stack', 'name', 'message']) Object.defineProperty(e, k, { get: () => { throw new Error('no'); } });
    expect(describeFailure(e).errorClass).toBe('Error');
    const hugeStack = Object.assign(new Error('x'), { stack: `Error: x\n${'    at f (a.js:1:1)\n'.repeat(200_000)}` });
    expect(describeFailure(hugeStack).stack.split('\n')).toHaveLength(5);
  });
  it('describes values that are not errors, including ones that cannot be read', () => {
    expect(describeFailure(undefined).errorClass).toBe('undefined');
    expect(describeFailure(null).message).toBe('null');
    expect(describeFailure(10n).message).toBe('10');
    const trap = () => { throw new Error('trap'); };
    const proxy = new Proxy({}, { get: trap, getPrototypeOf: trap, ownKeys: trap, getOwnPropertyDescriptor: trap });
    expect(() => describeFailure(proxy)).not.toThrow();
    expect(describeFailure(Object.defineProperty({}, 'toJSON', { get: trap })).errorClass).toBe('object');
  });
  it('bounds every failure header, and keeps a forged first-failure time out', () => {
    const h = failureHeaders({ errorClass: 'c'.repeat(10_000), message: 'm'.repeat(10_000), stack: 's'.repeat(10_000) }, { [HEADER.firstFailedAt]: 'y'.repeat(10_000) }, new Date('2026-01-01T00:00:00Z'));
    expect(h[HEADER.errorClass]!.length).toBeLessThanOrEqual(MAX_ERROR_CLASS_CHARS);
    expect(h[HEADER.errorMessage]!.length).toBeLessThanOrEqual(MAX_ERROR_MESSAGE_CHARS);
    expect(h[HEADER.errorStack]!.length).toBeLessThanOrEqual(1505);
    expect(h[HEADER.firstFailedAt]).toBe('2026-01-01T00:00:00.000Z');
    expect(failureFingerprint('c'.repeat(100_000), 'm'.repeat(100_000), '').length).toBeLessThanOrEqual(MAX_ERROR_MESSAGE_CHARS);
  });
});

describe('broker headers are never copied', () => {
  const broker = { 'x-death': ['a', 5], 'x-first-death-queue': 'q', 'x-first-death-reason': 'r', 'x-last-death-exchange': 'e', 'x-delivery-count': 3, 'x-acquired-count': 7 };
  it('copyProperties drops them, whoever calls it', () => {
    for (const k of Object.keys(broker)) expect(isBrokerHeader(k)).toBe(true);
    for (const k of ['x-custom', 'x', '', 'X-death', 'y-death', 'x-deaths', 'x-first-death', 'xx-death']) expect(isBrokerHeader(k)).toBe(false);
    expect(copyProperties({ messageId: 'm' }, { ...broker, keep: 1 }).headers).toEqual({ keep: 1 });
  });
  it('copies only a table\'s own names, never what its prototype holds', () => {
    const inherited = Object.create({ inherited: 'no', 'x-death': [] }) as Record<string, unknown>;
    inherited['own'] = 'yes';
    inherited['x-delivery-count'] = 2;
    expect(copyProperties({ messageId: 'm' }, inherited).headers).toEqual({ own: 'yes' });
    expect(Object.getPrototypeOf(copyProperties({ messageId: 'm' }, inherited).headers)).toBe(Object.prototype);
  });
  it('a parked-queue walk keeps what the broker\'s record told, in warren\'s headers', () => {
    const deadLettered = { 'x-death': [{ queue: 'billing', reason: 'delivery_limit', count: 1, exchange: 'events', 'routing-keys': ['order.paid'], time: { '!': 'timestamp', value: 1_767_000_000 } }] };
    const h = refreshHeaders(deadLettered);
    expect(h['x-death']).toBeUndefined();
    const m = toParkedMessage({ content: Buffer.alloc(0), fields: { routingKey: 'billing.parked', exchange: '' }, properties: { headers: h } }, 1);
    expect(m).toMatchObject({ routingKey: 'order.paid', exchange: 'events', reason: 'delivery_limit' });
  });
  it('the x-death fallback count still reads what the broker dead-lettered itself', () => {
    const xDeath = [{ queue: 'billing.retry.5s', reason: 'expired', count: 3 }, 'junk', { queue: 'billing.retry.5s', reason: 'expired', count: 'abc' }];
    expect(readAttempts({ 'x-death': xDeath }, new Set(['billing.retry.5s']))).toMatchObject({ failed: 3, source: 'x-death' });
  });
});

describe('header tables that cannot be encoded', () => {
  it('measures a table as amqplib encodes it', () => {
    expect(headerTableBytes({})).toBe(4);
    expect(headerTableBytes({ a: 'xy' })).toBe(4 + 1 + 1 + 5 + 2);
    expect(headerTableBytes({ ['k'.repeat(256)]: 1 })).toBe(Infinity);
  });
  it('keeps warren\'s own headers and drops the producer\'s largest until the table fits', () => {
    const { headers, dropped } = fitHeaders({ [HEADER.parkedReason]: 'max-attempts' }, { huge: 'h'.repeat(70_000), big: 'b'.repeat(1000), small: 's', 'x-death': [] }, 65_000);
    expect(dropped).toEqual(['huge']);
    expect(Object.keys(headers).sort()).toEqual(['big', 'small', HEADER.parkedReason].sort());
  });
});
