import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { exportRecord } from './operations.js';
import { attemptHistory, copyProperties, decodeBody, groupParked, plainValue, replayHeaders, summarize, toParkedMessage, type ParkedMessage } from './message.js';

function parked(headers: Record<string, unknown>, extra: { messageId?: string; routingKey?: string; content?: Buffer; position?: number } = {}): ParkedMessage {
  return toParkedMessage(
    {
      content: extra.content ?? Buffer.from('{"orderId":42}'),
      fields: { routingKey: extra.routingKey ?? 'billing.parked', exchange: '' },
      properties: { messageId: extra.messageId ?? 'id-1', headers, contentType: 'application/json', timestamp: 1_767_000_000, userId: 'guest', expiration: '1000' } as never,
    },
    extra.position ?? 1,
  );
}

const warrenParked = {
  [HEADER.attempts]: 6,
  [HEADER.exchange]: 'shop.events',
  [HEADER.routingKey]: 'order.created',
  [HEADER.consumer]: 'billing',
  [HEADER.firstFailedAt]: '2026-03-01T10:00:00.000Z',
  [HEADER.lastFailedAt]: '2026-03-01T10:11:00.000Z',
  [HEADER.errorClass]: 'HttpError',
  [HEADER.errorMessage]: 'carrier 503',
  [HEADER.errorStack]: 'at send (/app/carrier.js:10:5)\nat run (/app/x.js:1:1)',
  [HEADER.parkedReason]: 'max-attempts',
  [HEADER.parkedAt]: '2026-03-01T10:11:00.000Z',
  [HEADER.redeliveries]: 2,
  'x-death': [
    { queue: 'billing.retry.1m', reason: 'expired', count: 4, exchange: '', 'routing-keys': ['billing.retry.1m'], time: 1_772_359_800 },
    // amqplib decodes AMQP timestamps as typed values.
    { queue: 'billing.retry.5s', reason: 'expired', count: 1, exchange: '', 'routing-keys': ['billing.retry.5s'], time: { '!': 'timestamp', value: 1_772_359_205 } },
  ],
  'x-first-death-queue': 'billing.retry.5s',
  'x-delivery-count': 4,
};

describe('toParkedMessage', () => {
  it('reads what warren wrote when it parked the message', () => {
    const m = parked(warrenParked);
    expect(m).toMatchObject({
      messageId: 'id-1',
      routingKey: 'order.created',
      exchange: 'shop.events',
      consumer: 'billing',
      errorClass: 'HttpError',
      errorMessage: 'carrier 503',
      attempts: 6,
      reason: 'max-attempts',
      replays: 0,
      fingerprint: 'HttpError: carrier <n> @ send (carrier.js)',
    });
    expect(m.failedAt?.toISOString()).toBe('2026-03-01T10:11:00.000Z');
    expect(summarize(m)).toMatchObject({ position: 1, messageId: 'id-1', failedAt: '2026-03-01T10:11:00.000Z', exchange: 'shop.events' });
  });

  it('falls back to the broker’s record for a message the broker parked itself', () => {
    const m = parked(
      { 'x-death': [{ queue: 'billing', reason: 'delivery_limit', count: 1, exchange: 'shop.events', 'routing-keys': ['order.created'], time: 1_772_359_800 }], 'x-first-death-reason': 'delivery_limit' },
      { routingKey: 'billing.parked' },
    );
    expect(m).toMatchObject({ routingKey: 'order.created', exchange: 'shop.events', reason: 'delivery_limit', errorClass: undefined, attempts: undefined });
    expect(m.failedAt?.toISOString()).toBe(new Date(1_772_359_800_000).toISOString());
    expect(m.fingerprint).toBe('(delivery_limit): ');
  });

  it('tolerates malformed headers', () => {
    const m = parked({ [HEADER.attempts]: 'many', [HEADER.lastFailedAt]: 'not a date', 'x-death': 'nope', [HEADER.replays]: -1 });
    expect(m).toMatchObject({ attempts: undefined, failedAt: undefined, replays: 0, routingKey: 'billing.parked' });
  });
});

describe('replayHeaders', () => {
  it('resets the attempt count, records the replay and keeps the original routing key', () => {
    const now = new Date('2026-03-02T09:00:00Z');
    const h = replayHeaders(parked({ ...warrenParked, [HEADER.replays]: 1, [HEADER.waits]: 20, [HEADER.dependency]: 'carrier', [HEADER.tenant]: '42' }), now);
    expect(h[HEADER.attempts]).toBeUndefined();
    // Parked at the retry table's cap: a replay gets its waits back too.
    expect(h[HEADER.waits]).toBeUndefined();
    expect(h[HEADER.dependency]).toBeUndefined();
    expect(h[HEADER.tenant]).toBeUndefined();
    expect(h[HEADER.redeliveries]).toBeUndefined();
    // The consumer reads x-death as a fallback count; left in place it would park the copy at once.
    expect(h['x-death']).toBeUndefined();
    expect(h['x-first-death-queue']).toBeUndefined();
    expect(h['x-delivery-count']).toBeUndefined();
    expect(h[HEADER.replays]).toBe(2);
    expect(h[HEADER.replayedAt]).toBe('2026-03-02T09:00:00.000Z');
    expect(h[HEADER.routingKey]).toBe('order.created');
    expect(h[HEADER.exchange]).toBe('shop.events');
    // The last failure stays readable.
    expect(h[HEADER.errorMessage]).toBe('carrier 503');
  });
  it('writes the routing key from the dead-letter record when warren did not park it', () => {
    const m = parked({ 'x-death': [{ queue: 'billing', reason: 'delivery_limit', count: 1, exchange: 'shop.events', 'routing-keys': ['order.created'] }] });
    expect(replayHeaders(m, new Date())[HEADER.routingKey]).toBe('order.created');
  });
});

describe('copyProperties', () => {
  it('keeps the message id and content properties, drops user id and expiration', () => {
    const m = parked({});
    const p = copyProperties(m.properties, { a: 1 });
    expect(p).toEqual({ headers: { a: 1 }, persistent: true, messageId: 'id-1', contentType: 'application/json', timestamp: 1_767_000_000 });
  });
  it('keeps the reply address of a request', () => {
    const m = parked({});
    const p = copyProperties({ ...m.properties, replyTo: 'amq.rabbitmq.reply-to', userId: 'alice', expiration: '60000' } as typeof m.properties, {});
    expect(p['replyTo']).toBe('amq.rabbitmq.reply-to');
    expect(p['userId']).toBeUndefined();
    expect(p['expiration']).toBeUndefined();
  });
});

describe('attemptHistory', () => {
  it('tells the story oldest first', () => {
    const events = attemptHistory(parked({ ...warrenParked, [HEADER.replays]: 1, [HEADER.replayedAt]: '2026-02-28T00:00:00Z' }));
    expect(events.map((e) => e.event)).toEqual(['first-failure', 'retry-wait', 'retry-wait', 'last-failure', 'parked', 'replayed']);
    expect(events[1]?.detail).toMatch(/billing\.retry\.5s once \(last at 2026-03-01T10:00:05\.000Z\)/);
    expect(events[2]?.detail).toMatch(/billing\.retry\.1m 4 times/);
    expect(events[3]?.detail).toBe('attempt 6 failed: HttpError: carrier 503');
    expect(events[4]?.detail).toBe('parked: max-attempts after 6 attempts');
  });
});

describe('plainValue', () => {
  it('turns typed AMQP values, buffers and big integers into plain JSON', () => {
    expect(plainValue({ time: { '!': 'timestamp', value: 1_772_359_205 }, n: 5n, b: Buffer.from('hi'), raw: Buffer.from([0xff]) })).toEqual({ time: '2026-03-01T10:00:05.000Z', n: 5, b: 'hi', raw: { base64: '/w==' } });
  });
});

describe('decodeBody', () => {
  it('tells JSON, text and binary apart', () => {
    expect(decodeBody(Buffer.from('{"a":1}'))).toEqual({ kind: 'json', value: { a: 1 } });
    expect(decodeBody(Buffer.from('plain words'))).toEqual({ kind: 'text', text: 'plain words' });
    expect(decodeBody(Buffer.from([0xff, 0x00, 0xfe]))).toEqual({ kind: 'binary', base64: '/wD+', bytes: 3 });
  });
});

describe('groupParked', () => {
  it('counts by fingerprint, biggest first, with first and last seen', () => {
    const at = (t: string, msg: string, id: string) => parked({ ...warrenParked, [HEADER.lastFailedAt]: t, [HEADER.errorMessage]: msg }, { messageId: id });
    const groups = groupParked([
      at('2026-03-01T10:00:00Z', 'customer 7 missing', 'a'),
      at('2026-03-01T09:00:00Z', 'carrier 503', 'b'),
      at('2026-03-01T11:00:00Z', 'carrier 502', 'c'),
      at('2026-03-01T10:30:00Z', 'carrier 504', 'd'),
      at('2026-03-01T10:31:00Z', 'carrier 500', 'e'),
    ]);
    expect(groups).toHaveLength(2);
    expect(groups[0]).toMatchObject({ fingerprint: 'HttpError: carrier <n> @ send (carrier.js)', count: 4, firstSeen: '2026-03-01T09:00:00.000Z', lastSeen: '2026-03-01T11:00:00.000Z', sampleIds: ['b', 'c', 'd'], sampleMessage: 'carrier 503' });
    expect(groups[1]).toMatchObject({ count: 1, sampleIds: ['a'] });
  });
});

describe('exportRecord', () => {
  it('is one JSON-friendly record with the body decoded', () => {
    const r = exportRecord(parked(warrenParked));
    expect(r).toMatchObject({ messageId: 'id-1', routingKey: 'order.created', body: { orderId: 42 }, bodyEncoding: 'json', failure: { errorClass: 'HttpError', attempts: 6 } });
    expect(r.properties).toMatchObject({ messageId: 'id-1', contentType: 'application/json' });
    expect(JSON.parse(JSON.stringify(r))).toEqual(r);
    const bin = exportRecord(parked({}, { content: Buffer.from([0xff, 0xfe]) }));
    expect(bin).toMatchObject({ body: null, bodyEncoding: 'base64', bodyBase64: '//4=' });
  });
});
