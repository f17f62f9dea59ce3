import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { archiveFilter, describeArchiveFilter } from './filter.js';

describe('archive filter', () => {
  it('reads every field, bounded', () => {
    const now = new Date('2026-03-10T00:00:00Z');
    const f = archiveFilter({ consumer: 'billing', states: ['all'], error: 'tenant t4', since: '2d', headers: ['tenant=t4', 'x=a=b'], body: 'order 12, please', ids: ['7,8'], messageIds: ['m1'] }, now);
    expect(f.states).toEqual(['open', 'replayed', 'resolved']);
    expect(f.error).toEqual({ contains: 'tenant t4' });
    expect(f.since).toEqual(new Date('2026-03-08T00:00:00Z'));
    expect(f.headers).toEqual([{ name: 'tenant', value: 't4' }, { name: 'x', value: 'a=b' }]);
    expect(f.body).toBe('order 12 please');
    expect(f.ids).toEqual(['7', '8']);
    expect(describeArchiveFilter(f)).toContain('header tenant=t4');
  });

  it('refuses what it cannot bound, naming the option', () => {
    const bad: Array<[Parameters<typeof archiveFilter>[0], RegExp]> = [
      [{ consumer: 'b', states: ['gone'] }, /states/],
      [{ consumer: 'b', ids: ['abc'] }, /not a row id/],
      [{ consumer: 'b', error: 'x'.repeat(1001) }, /more than 1000/],
      [{ consumer: 'b', headers: ['tenant'] }, /NAME=VALUE/],
      [{ consumer: 'b', headers: Array.from({ length: 9 }, (_, i) => `h${i}=v`) }, /more than 8/],
      [{ consumer: 'b', body: '!!!' }, /no word/],
      [{ consumer: 'b', since: '1d', until: '2d' }, /not before/],
      [{ consumer: 'b', ids: Array.from({ length: 10_001 }, (_, i) => String(i + 1)) }, /more than 10000/],
    ];
    for (const [input, message] of bad) expect(() => archiveFilter(input)).toThrow(message);
  });

  it('runs patterns of the linear-time subset, the same for both engines', () => {
    const f = archiveFilter({ consumer: 'b', error: '/carrier (502|503) .*down/i' });
    const p = f.error !== undefined && 'pattern' in f.error ? f.error.pattern : undefined;
    expect(p?.test('Carrier 503 is down')).toBe(true);
    expect(p?.test('carrier 504 down')).toBe(false);
    expect(p?.postgres.caseInsensitive).toBe(false);
    expect(p?.source).toBe('/carrier (502|503) .*down/i');
    expect(() => archiveFilter({ consumer: 'b', error: '/(x)\\1/' })).toThrow(InvalidOptionError);
    expect(() => archiveFilter({ consumer: 'b', error: '/a/g' })).toThrow(/flag g/);
  });
});
