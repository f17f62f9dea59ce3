import { describe, expect, it } from 'vitest';
import { isoTime } from './stamp.js';

describe('isoTime', () => {
  it('is toISOString for times across seconds, before 1970 and past 9999', () => {
    const times = [0, 999, 1000, -1, -1001, 1_764_666_000_123, 1_764_666_000_999, 1_764_666_001_000, 253_402_300_799_999, 253_402_300_800_000, -62_167_219_200_001];
    for (let i = 0; i < 5000; i++) times.push(1_764_666_000_000 + i * 37);
    for (const ms of times) expect(isoTime(ms)).toBe(new Date(ms).toISOString());
  });
});
