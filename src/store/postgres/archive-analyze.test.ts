/**
 * An outage archives its first rows within minutes, before autovacuum analyzes the
 * tables; planned on empty tables' statistics, a header filter ran as a nested loop over
 * every pair of rows (about 137 s a page at 100,000 rows). The ingesting process has
 * the archive's tables analyzed itself, in the background, as its rows come in.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { archiveRow } from '../../archive/row.js';
import { parkedRaw } from '../../archive/testing/messages.js';
import type { ArchiveStore } from '../archive.js';
import { harness } from '../testing/harness.js';
import { PG_URL } from '../../../test/helpers.js';

async function lastAnalyze(schema: string, table: string): Promise<Date | null> {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  try {
    const r = await c.query<{ last_analyze: Date | null }>('SELECT last_analyze FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2', [schema, table]);
    return r.rows[0]?.last_analyze ?? null;
  } finally {
    await c.end();
  }
}

describe('the PostgreSQL archive while it fills', () => {
  it('has its tables analyzed by the process that inserts, once it has added 5,000 rows, not before', async () => {
    const h = await harness('postgres');
    if (h.spec.backend !== 'postgres') throw new Error('expected postgres');
    const archive = h.store().archive as ArchiveStore & { analyzed(): Promise<void> };
    const now = new Date();
    const batch = (from: number) => Array.from({ length: 500 }, (_, i) => archiveRow('billing', parkedRaw({ id: `m-${from + i}`, at: now, headers: { tenant: `t${i % 10}` } }), now));
    for (let i = 0; i < 4_500; i += 500) await archive.insert(batch(i));
    await archive.analyzed();
    expect(await lastAnalyze(h.spec.schema, `${h.spec.tablePrefix}archive`), 'not analyzed at 4,500 rows').toBeNull();
    await archive.insert(batch(4_500));
    await archive.analyzed();
    expect(await lastAnalyze(h.spec.schema, `${h.spec.tablePrefix}archive`), 'analyzed at 5,000 rows').not.toBeNull();
    expect(await lastAnalyze(h.spec.schema, `${h.spec.tablePrefix}archive_headers`)).not.toBeNull();
  }, 60_000);
});
