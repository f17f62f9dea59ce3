import { describe, expect, it } from 'vitest';
import { describeFailure, failureFingerprint, failureHeaders, truncate } from './failure.js';
import { HEADER, MAX_ERROR_MESSAGE_CHARS } from '../headers.js';
import { PermanentError } from '../errors.js';

describe('describeFailure', () => {
  it('keeps class, message and a few frames', () => {
    const info = describeFailure(new PermanentError('customer 7 missing'));
    expect(info.errorClass).toBe('PermanentError');
    expect(info.message).toBe('customer 7 missing');
    expect(info.stack.split('\n').length).toBeLessThanOrEqual(5);
    expect(info.stack).toMatch(/^at /);
  });
  it('uses the class name of a plain subclass', () => {
    class CarrierDown extends Error {}
    expect(describeFailure(new CarrierDown('x')).errorClass).toBe('CarrierDown');
    expect(describeFailure(new TypeError('x')).errorClass).toBe('TypeError');
  });
  it('cuts a megabyte message to a bounded size and says so', () => {
    const info = describeFailure(new Error('x'.repeat(1_000_000)));
    expect(info.message.length).toBe(MAX_ERROR_MESSAGE_CHARS);
    expect(info.message).toMatch(/more characters cut\]$/);
  });
  it('describes thrown non-errors', () => {
    expect(describeFailure('boom')).toMatchObject({ errorClass: 'string', message: 'boom' });
    expect(describeFailure({ code: 3 })).toMatchObject({ errorClass: 'object', message: '{"code":3}' });
    expect(describeFailure(null)).toMatchObject({ errorClass: 'null' });
    expect(describeFailure(undefined)).toMatchObject({ errorClass: 'undefined' });
  });
});

describe('failureHeaders', () => {
  it('keeps the first failure time across retries', () => {
    const t1 = new Date('2026-01-01T00:00:00Z');
    const t2 = new Date('2026-01-01T00:05:00Z');
    const first = failureHeaders(describeFailure(new Error('a')), {}, t1);
    const second = failureHeaders(describeFailure(new Error('b')), first, t2);
    expect(second[HEADER.firstFailedAt]).toBe(t1.toISOString());
    expect(second[HEADER.lastFailedAt]).toBe(t2.toISOString());
    expect(second[HEADER.errorMessage]).toBe('b');
  });
});

describe('failureFingerprint', () => {
  it('groups messages that differ only in numbers and ids', () => {
    const a = failureFingerprint('HttpError', 'carrier 503 for order 0190a1b2-0000-7000-8000-000000000001', 'at send (/app/carrier.js:10:5)');
    const b = failureFingerprint('HttpError', 'carrier 503 for order 0190a1b2-0000-7000-8000-0000000000ff', 'at send (/app/carrier.js:10:5)');
    const c = failureFingerprint('HttpError', 'carrier refused "ACME"', 'at send (/app/carrier.js:10:5)');
    expect(a).toBe(b);
    expect(a).not.toBe(c);
    expect(a).toBe('HttpError: carrier <n> for order <id> @ send (carrier.js)');
    const moved = failureFingerprint('HttpError', 'carrier 503 for order 0190a1b2-0000-7000-8000-00000000abcd', 'at send (/srv/releases/42/app/carrier.js:12:7)');
    expect(moved).toBe(a);
    expect(failureFingerprint('E', 'm', 'at file:///app/x.mjs:1:2')).toBe('E: m @ x.mjs');
  });
  it('truncate leaves short text alone', () => {
    expect(truncate('abc', 10)).toBe('abc');
  });
});
