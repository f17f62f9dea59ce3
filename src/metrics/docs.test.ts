/** docs/metrics.md lists every metric of the catalog, with its type and labels, and no other. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ALL_METRICS } from './catalog.js';

const DOC = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8');

describe('docs/metrics.md', () => {
  it('has one table row per metric, with the type and labels the code registers', () => {
    const rows = new Map<string, { type: string; labels: string[] }>();
    for (const line of DOC.split('\n')) {
      const m = /^\| `(warren_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|/.exec(line);
      if (m) rows.set(m[1] as string, { type: m[2] as string, labels: [...(m[3] as string).matchAll(/`([a-z_]+)`/g)].map((l) => l[1] as string) });
    }
    expect([...rows.keys()].sort()).toEqual(ALL_METRICS.map((m) => m.name).sort());
    for (const m of ALL_METRICS) expect(rows.get(m.name), m.name).toEqual({ type: m.type, labels: [...m.labels] });
  });
});
