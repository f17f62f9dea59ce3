import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { checkRetention, pruneArchive, retentionWarning, ArchiveRetentionSchedule } from './retention.js';
import { archiveRow } from './row.js';
import { parkedRaw } from './testing/messages.js';

const DAY = 86_400_000;

describe.each(BACKENDS)('archive retention: %s', (backend) => {
  it('warns about rows nobody looked at a run before deleting them, by age and by count', async () => {
    const h = await harness(backend);
    const store = h.store();
    const now = new Date();
    // 30 rows, one a day back from now, for two consumers.
    const rows = ['billing', 'email'].flatMap((consumer) => Array.from({ length: 30 }, (_, i) => archiveRow(consumer, parkedRaw({ id: `${consumer}-${i}`, consumer, at: new Date(now.getTime() - i * DAY - 1000) }), now)));
    await store.archive.insert(rows);
    const week = { maxAgeMs: 7 * DAY, intervalMs: DAY };
    const warned = await pruneArchive(store.archive, week, { warnOnly: true, now });
    // Nothing deleted yet; at the next run (a day on), rows from 6 days back and older go.
    expect(warned.map((r) => [r.consumer, r.deleted, r.upcoming, r.upcomingUnviewed]).sort()).toEqual([['billing', 0, 24, 24], ['email', 0, 24, 24]]);
    expect(retentionWarning(warned[0]!, week)).toMatch(/will delete 24 archived failures of (billing|email) that nobody has looked at/);
    const old = (await store.archive.page({ filter: { consumer: 'billing' }, order: 'oldest', limit: 4 })).rows;
    await store.archive.markViewed(old.map((r) => r.id), now);
    const ran = await pruneArchive(store.archive, week, { now, consumers: ['billing'] });
    expect(ran).toEqual([{ consumer: 'billing', deleted: 23, unviewedDeleted: 19, upcoming: 1, upcomingUnviewed: 1 }]);
    expect(await store.archive.count({ consumer: 'billing' })).toBe(7);
    const capped = await pruneArchive(store.archive, { maxRows: 10, batchSize: 3 }, { now, consumers: ['email'] });
    expect(capped[0]).toMatchObject({ deleted: 20, unviewedDeleted: 20, upcoming: 0 });
    expect((await store.archive.counts('email'))[0]?.open).toBe(10);
  });

  it('runs on a schedule whose first run only warns', async () => {
    const h = await harness(backend);
    const store = h.store();
    const now = new Date();
    await store.archive.insert(Array.from({ length: 5 }, (_, i) => archiveRow('billing', parkedRaw({ id: `m${i}`, at: new Date(now.getTime() - 10 * DAY) }), now)));
    const warnings: string[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: (m: string) => void warnings.push(m), error: () => undefined };
    const schedule = new ArchiveRetentionSchedule(store.archive, { maxAgeMs: DAY, intervalMs: 0 }, logger);
    expect((await schedule.run(true))[0]).toMatchObject({ deleted: 0, upcomingUnviewed: 5 });
    expect(warnings[0]).toMatch(/5 archived failures of billing/);
    expect((await schedule.run())[0]).toMatchObject({ deleted: 5, unviewedDeleted: 5 });
    await schedule.stop();
  });
});

describe('archive retention options', () => {
  it('refuses a retention that keeps nothing or everything', () => {
    expect(() => checkRetention({})).toThrow(/neither maxAgeMs nor maxRows/);
    expect(() => checkRetention({ maxRows: 0 })).toThrow(InvalidOptionError);
    expect(checkRetention({ maxRows: 5 })).toEqual({ maxAgeMs: undefined, maxRows: 5, intervalMs: 3_600_000, batchSize: 1000 });
  });
});
