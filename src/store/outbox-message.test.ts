import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { outboxRecord, outgoingMessage } from './outbox-message.js';
import { Mutex } from './transaction.js';
import { isUnavailable as pgUnavailable, mapError as pgMap } from './postgres/errors.js';
import { isUnavailable as sqliteUnavailable, mapError as sqliteMap } from './sqlite/errors.js';
import { StoreUnavailableError } from '../errors.js';

describe('outbox records', () => {
  it('stamps a row as Publisher.publish stamps a message', () => {
    const occurredAt = new Date('2024-01-02T03:04:05.678Z');
    const r = outboxRecord('order.paid', { id: 7 }, { occurredAt, correlationId: 'c', type: 'OrderPaid', headers: { tenant: 't1' } });
    expect(r.messageId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(r).toMatchObject({ exchange: null, routingKey: 'order.paid', content: '{"id":7}' });
    const m = outgoingMessage(r, 'shop.events');
    expect(m.exchange).toBe('shop.events');
    expect(m.routingKey).toBe('order.paid');
    expect(m.content.toString()).toBe('{"id":7}');
    expect(m.properties).toEqual({
      messageId: r.messageId,
      contentType: 'application/json',
      persistent: true,
      timestamp: Math.floor(occurredAt.getTime() / 1000),
      correlationId: 'c',
      type: 'OrderPaid',
      headers: { tenant: 't1', [HEADER.occurredAt]: occurredAt.toISOString() },
    });
  });

  it('refuses a message id or routing key over the 255 bytes AMQP holds, counted in UTF-8 (the relay could never send it)', () => {
    expect(() => outboxRecord('k', {}, { messageId: '\u00e9'.repeat(200) })).toThrow(/`messageId`: .* is not a message id of 1 to 255 bytes in UTF-8/);
    expect(() => outboxRecord('\u00e9'.repeat(200), {})).toThrow(/`routingKey`: .* is not a routing key of 1 to 255 bytes in UTF-8/);
    expect(outboxRecord('\u00e9'.repeat(127), {}, { messageId: '\u00e9'.repeat(127) }).messageId).toBe('\u00e9'.repeat(127));
  });

  it('keeps a given message id and exchange', () => {
    const r = outboxRecord('a.b', null, { messageId: 'fixed', exchange: 'other' });
    expect(r.messageId).toBe('fixed');
    expect(outgoingMessage(r, 'default').exchange).toBe('other');
  });

  it('refuses a bad routing key, a payload that is not JSON, headers that cannot be stored', () => {
    expect(() => outboxRecord('', {})).toThrow(/routingKey/);
    expect(() => outboxRecord('x'.repeat(256), {})).toThrow(/routingKey/);
    expect(() => outboxRecord('a.b', undefined)).toThrow(/payload/);
    expect(() => outboxRecord('a.b', 1n)).toThrow(/payload/);
    expect(() => outboxRecord('a.b', {}, { headers: { n: 1n } })).toThrow(/headers/);
    expect(() => outboxRecord('a.b', {}, { messageId: '' })).toThrow(/messageId/);
    expect(() => outboxRecord('a.b', {}, { occurredAt: new Date('nope') })).toThrow(/occurredAt/);
  });
});

describe('outage classification', () => {
  it('treats PostgreSQL connection failures as unavailable and statement errors as the handler\'s', () => {
    for (const code of ['ECONNREFUSED', 'ECONNRESET', '57P01', '57P02', '57P03', '08006', '08001', '53300']) {
      expect(pgUnavailable(Object.assign(new Error('x'), { code }))).toBe(true);
    }
    expect(pgUnavailable(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(pgUnavailable(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(pgUnavailable(new AggregateError([Object.assign(new Error(''), { code: 'ECONNREFUSED' })]))).toBe(true);
    for (const code of ['23505', '42P01', '40001', '22P02']) expect(pgUnavailable(Object.assign(new Error('x'), { code }))).toBe(false);
    expect(pgUnavailable(new Error('payment declined'))).toBe(false);
    const unique = Object.assign(new Error('dup'), { code: '23505' });
    expect(pgMap(unique, 'x')).toBe(unique);
    const mapped = pgMap(Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }), 'insert the marker');
    expect(mapped).toBeInstanceOf(StoreUnavailableError);
    expect((mapped as Error).message).toMatch(/could not insert the marker \(57P01/);
  });

  it('treats SQLite lock, open and I/O failures as unavailable and statement errors as the handler\'s', () => {
    for (const code of ['SQLITE_BUSY', 'SQLITE_BUSY_SNAPSHOT', 'SQLITE_LOCKED', 'SQLITE_CANTOPEN', 'SQLITE_IOERR_WRITE', 'SQLITE_FULL']) {
      expect(sqliteUnavailable(Object.assign(new Error('x'), { code }))).toBe(true);
    }
    for (const code of ['SQLITE_CONSTRAINT_PRIMARYKEY', 'SQLITE_ERROR', 'SQLITE_MISMATCH']) expect(sqliteUnavailable(Object.assign(new Error('x'), { code }))).toBe(false);
    expect(sqliteMap(Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' }), 'begin', 'a.db')).toBeInstanceOf(StoreUnavailableError);
  });
});

describe('Mutex', () => {
  it('hands the lock out first come, first served, one holder at a time', async () => {
    const mutex = new Mutex();
    const order: string[] = [];
    let holders = 0;
    await Promise.all(
      ['a', 'b', 'c', 'd'].map(async (name, i) => {
        const release = await mutex.lock();
        holders++;
        expect(holders).toBe(1);
        order.push(name);
        await new Promise((r) => setTimeout(r, 5 - i));
        holders--;
        release();
      }),
    );
    expect(order).toEqual(['a', 'b', 'c', 'd']);
    expect(mutex.busy).toBe(false);
  });
});
