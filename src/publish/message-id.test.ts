import { describe, expect, it } from 'vitest';
import { uuidv7 } from './message-id.js';

describe('uuidv7', () => {
  it('has the version and variant bits of a UUIDv7', () => {
    expect(uuidv7()).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
  it('sorts by creation, within one millisecond too', () => {
    const ids = Array.from({ length: 5000 }, () => uuidv7());
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
  });
  it('starts with the timestamp', () => {
    const id = uuidv7(Date.UTC(2026, 0, 1) + 7);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBeGreaterThanOrEqual(Date.UTC(2026, 0, 1));
  });
  it('carries exactly the milliseconds it is made for, when later than any before', () => {
    const ms = Date.now() + 1234;
    const id = uuidv7(ms);
    expect(parseInt(id.replace(/-/g, '').slice(0, 12), 16)).toBe(ms);
    // Then the counter, from there on within that millisecond.
    const next = uuidv7(ms);
    expect(next.slice(0, 13)).toBe(id.slice(0, 13));
    expect(parseInt(next.slice(15, 18), 16)).toBe((parseInt(id.slice(15, 18), 16) + 1) & 0xfff);
  });
  it('refuses a time that is not whole milliseconds since 1970, and keeps the ids after it increasing', () => {
    const before = uuidv7();
    for (const bad of [Number.NaN, new Date('not a date').getTime(), -1, 1.5, Infinity, 2 ** 48]) {
      expect(() => uuidv7(bad)).toThrow(/uuidv7: .* is not a time in whole milliseconds since 1970/);
    }
    expect(uuidv7() > before).toBe(true);
  });
});
