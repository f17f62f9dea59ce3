import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { archiveFilter, compilePattern, describeArchiveFilter } from './filter.js';

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

  it('compiles the linear-time pattern subset for both engines, and refuses the rest', () => {
    const p = compilePattern('carrier (502|503)\\b.*down', 'i', 'error');
    expect(p.test('Carrier 503 is down')).toBe(true);
    expect(p.test('carrier 5030 down')).toBe(false);
    expect(p.postgres).toEqual({ source: '(?p)carrier (502|503)\\y.*down', caseInsensitive: true });
    for (const refused of ['(a+)+$', '(a|b)*c', '(x)\\1', '(?=a)', 'a*b*c*', 'a{1,300}', '[a', 'a)', 'a+?', '\\p{L}']) {
      expect(() => compilePattern(refused, '', 'error'), refused).toThrow(InvalidOptionError);
    }
    expect(() => compilePattern('a', 'g', 'error')).toThrow(/only i/);
  });
});
