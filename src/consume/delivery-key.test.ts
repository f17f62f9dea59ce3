import { describe, expect, it } from 'vitest';
import { hash53 } from './delivery.js';

describe('hash53 (the key a delivery is known by across redeliveries)', () => {
  it('is seeded per process: a pair of ids that clashed under a fixed seed does not clash here', () => {
    // These two ids gave the same key (2882208716604367) when the hash had a fixed seed:
    // a producer could choose them to have one message's blip counted as the other's death.
    expect(hash53('qJ0pcFuNDOA')).not.toBe(hash53('q28RnD-FecA'));
    expect(hash53('qJ0pcFuNDOA')).not.toBe(2882208716604367);
  });

  it('is a whole number of at most 53 bits, the same for the same id', () => {
    for (const id of ['', 'a', '01a22e32-74b7-76bf-acf1-cd9cbaf3f88b', 'x'.repeat(1000)]) {
      const h = hash53(id);
      expect(Number.isSafeInteger(h) && h >= 0).toBe(true);
      expect(hash53(id)).toBe(h);
    }
  });
});
