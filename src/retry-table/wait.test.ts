import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import type { MessageContext } from '../consume/types.js';
import { checkFilter, holdOf, whereOf, type SqlWriter } from './filter.js';
import { checkPolicy, decideWait, DEFAULT_WAIT_MS, recordedFailure, WaitForConditionError, type RetryTablePolicy } from './wait.js';
import type { RetryTable } from './index.js';
import { retryRow, storableText, storableValue } from './row.js';

const table = { insert: async () => ({ id: '1', paused: false }), nameDependency: () => undefined } as unknown as RetryTable;
const now = new Date('2026-01-01T00:00:00Z');
const ctx = { messageId: 'm', routingKey: 'order.created', headers: {}, attempt: 1 } as unknown as MessageContext<unknown>;

class CarrierDownError extends Error {}
class TaxError extends Error {}

describe('decideWait', () => {
  it('takes the dependency, tenant and time a WaitForConditionError gives; a past time is now', () => {
    const at = new Date(now.getTime() + 5000);
    expect(decideWait(new WaitForConditionError('carrier', { tenant: '42', retryAt: at }), { table }, {}, ctx, now)).toEqual({ dependency: 'carrier', tenant: '42', nextAttemptAt: at });
    expect(decideWait(new WaitForConditionError('carrier', { retryAt: new Date(0) }), { table }, {}, ctx, now)?.nextAttemptAt).toEqual(now);
    expect(decideWait(new WaitForConditionError('carrier', { retryAt: null }), { table }, {}, ctx, now)?.nextAttemptAt).toBeNull();
    expect(decideWait(new WaitForConditionError('carrier', { delayMs: 250 }), { table }, {}, ctx, now)?.nextAttemptAt).toEqual(new Date(now.getTime() + 250));
  });

  it("uses the policy's delay (60 s unless set, or none) when the error gives no time", () => {
    expect(decideWait(new WaitForConditionError('carrier'), { table }, {}, ctx, now)?.nextAttemptAt).toEqual(new Date(now.getTime() + DEFAULT_WAIT_MS));
    expect(decideWait(new WaitForConditionError('carrier'), { table, delayMs: 10 }, {}, ctx, now)?.nextAttemptAt).toEqual(new Date(now.getTime() + 10));
    expect(decideWait(new WaitForConditionError('carrier'), { table, delayMs: null }, {}, ctx, now)?.nextAttemptAt).toBeNull();
  });

  it('sends errors that a rule names to the table, the first rule that matches, with its tenant and delay', () => {
    const policy: RetryTablePolicy<{ tenant: string }> = {
      table,
      rules: [
        { when: CarrierDownError, dependency: 'carrier', tenant: (p) => p.tenant },
        { when: (e) => e instanceof Error && /tax/.test(e.message), dependency: 'tax', delayMs: null },
      ],
      tenant: () => 'fallback',
    };
    expect(decideWait(new CarrierDownError('503'), policy, { tenant: 'acme' }, ctx, now)).toEqual({ dependency: 'carrier', tenant: 'acme', nextAttemptAt: new Date(now.getTime() + DEFAULT_WAIT_MS) });
    expect(decideWait(new TaxError('tax API down'), policy, { tenant: 'acme' }, ctx, now)).toEqual({ dependency: 'tax', tenant: 'fallback', nextAttemptAt: null });
    expect(decideWait(new Error('something else'), policy, { tenant: 'acme' }, ctx, now)).toBeUndefined();
    expect(decideWait(new Error('no policy'), undefined, {}, ctx, now)).toBeUndefined();
  });

  it('records the cause a wait carries', () => {
    const cause = new CarrierDownError('503');
    expect(recordedFailure(new WaitForConditionError('carrier', { cause }))).toBe(cause);
    const bare = new WaitForConditionError('carrier');
    expect(recordedFailure(bare)).toBe(bare);
  });
});

describe('bad input', () => {
  it('refuses a wait without a dependency, or with a bad time', () => {
    expect(() => new WaitForConditionError('')).toThrow(/dependency/);
    expect(() => new WaitForConditionError('carrier', { retryAt: new Date('nope') })).toThrow(/retryAt/);
    expect(() => new WaitForConditionError('carrier', { delayMs: -1 })).toThrow(/delayMs/);
  });

  it('refuses a policy with no table, a bad cap or a rule without a dependency', () => {
    expect(() => checkPolicy({ table: {} as RetryTable })).toThrow(/retryTable.table/);
    expect(() => checkPolicy({ table, maxAttempts: 0 })).toThrow(/retryTable.maxAttempts/);
    expect(() => checkPolicy({ table, delayMs: -5 })).toThrow(/retryTable.delayMs/);
    expect(() => checkPolicy({ table, rules: [{ when: CarrierDownError, dependency: '' }] })).toThrow(/rules\[0\].dependency/);
    expect(() => checkPolicy({ table, rules: [{ when: 'CarrierDownError' as never, dependency: 'carrier' }] })).toThrow(InvalidOptionError);
  });

  it('refuses filters with unknown fields, wrong types or ids that are not row ids', () => {
    expect(() => checkFilter({ tenant: 42 } as never)).toThrow(/filter.tenant/);
    expect(() => checkFilter({ paused: 'yes' } as never)).toThrow(/filter.paused/);
    expect(() => checkFilter({ ids: ['1', '0'] })).toThrow(/"0" is not a row id/);
    expect(() => checkFilter({ ids: [] })).toThrow(/non-empty/);
    expect(checkFilter({ ids: ['3', '3'], tenant: 'a' })).toEqual({ ids: ['3'], tenant: 'a' });
  });
});

describe('filters as SQL', () => {
  const writer = (): SqlWriter & { values: unknown[] } => {
    const values: unknown[] = [];
    return { values, now: ':now', param: (v) => (values.push(v), `$${values.length}`), bool: (b) => (b ? 1 : 0), ids: (c, ids) => `${c} IN (${ids.join(',')})` };
  };

  it('writes every field given, ANDed, with parameters', () => {
    const w = writer();
    expect(whereOf({ ids: ['4'], dependency: 'carrier', tenant: '42', errorClass: 'E', paused: true, due: true }, w, 'r')).toBe(
      "r.id IN (4) AND r.dependency = $1 AND r.tenant = $2 AND r.error_class = $3 AND r.paused = $4 AND (r.next_attempt_at IS NOT NULL AND r.next_attempt_at <= :now)",
    );
    expect(w.values).toEqual(['carrier', '42', 'E', 1]);
    expect(whereOf({}, writer())).toBe('1 = 1');
    expect(whereOf({ due: false }, writer())).toBe('(next_attempt_at IS NULL OR next_attempt_at > :now)');
  });

  it('keeps a pause by name (or of every row) as a hold, and a pause by id or state as rows only', () => {
    expect(holdOf({ tenant: '42' })).toEqual({ consumer: null, dependency: null, tenant: '42', errorClass: null });
    expect(holdOf({ ids: ['1'] })).toBeUndefined();
    expect(holdOf({ dependency: 'carrier', due: true })).toBeUndefined();
    expect(holdOf({})).toEqual({ consumer: null, dependency: null, tenant: null, errorClass: null });
  });
});

describe('retryRow', () => {
  it('keeps what the message goes back with, drops what the broker wrote, and names the wait', () => {
    const r = retryRow({
      messageId: 'm-1',
      content: Buffer.from('{"a":1}'),
      properties: { contentType: 'application/json', timestamp: 5, correlationId: 'c-1', type: 'order.created' },
      headers: { 'x-death': [{ queue: 'q', reason: 'expired' }], 'x-delivery-count': 3, 'warren-attempts': 1, 'warren-tenant': 'old', app: 'keep' },
      exchange: 'events',
      routingKey: 'order.created',
      consumer: 'shipping',
      queue: 'shipping.q',
      parkedQueue: 'shipping.parked',
      waits: 2,
      failure: { errorClass: 'CarrierDownError', message: 'carrier 503', stack: '' },
      decision: { dependency: 'carrier', tenant: null, nextAttemptAt: null },
      now,
    });
    const props = JSON.parse(r.properties) as { headers: Record<string, unknown>; correlationId: string; type: string; timestamp: number };
    expect(props.headers['x-death']).toBeUndefined();
    expect(props.headers['x-delivery-count']).toBeUndefined();
    expect(props.headers['warren-tenant']).toBeUndefined();
    expect(props.headers).toMatchObject({ app: 'keep', 'warren-attempts': 1, 'warren-waits': 2, 'warren-dependency': 'carrier', 'warren-error-class': 'CarrierDownError', 'warren-routing-key': 'order.created' });
    expect(props).toMatchObject({ correlationId: 'c-1', type: 'order.created', timestamp: 5 });
    expect(r).toMatchObject({ messageId: 'm-1', correlationId: 'c-1', attempt: 2, content: '{"a":1}', tenant: null, lastError: 'carrier 503' });
  });

  it('replaces the characters PostgreSQL refuses, and nothing else', () => {
    expect(storableText('a\u0000b\ud800c\udc00d\ud83d\ude00')).toBe('a\ufffdb\ufffdc\ufffdd\ud83d\ude00');
    expect(storableValue({ 'k\u0000': ['x\u0000', 1, { y: '\udfff' }] })).toEqual({ 'k\ufffd': ['x\ufffd', 1, { y: '\ufffd' }] });
  });
});
