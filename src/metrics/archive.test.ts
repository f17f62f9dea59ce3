/**
 * The archive's signals on both backends with a real broker: once the parked queue drains
 * into the archive, its depth reads 0 and warren_archive_open_failures says what waits;
 * resolving and replaying close failures; the ingester says when it is behind; a scrape
 * reads the counts once (one query over the per-group counts), cached between scrapes.
 */
import { describe, expect, it, vi } from 'vitest';
import { connectWarren, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { PermanentError } from '../errors.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { warrenMetrics } from './index.js';
import { parseScrape, valueOf } from './testing/scrape.js';

vi.setConfig({ testTimeout: 60_000 });

describe.each(BACKENDS)('archive metrics: %s', (backend) => {
  it('open failures, rows and ages per consumer while the parked queue reads 0; resolving closes them', async () => {
    const h = await harness(backend);
    const store = h.store();
    let billing!: string;
    let shipping!: string;
    const topology = testTopology(({ exchange, name }) => {
      billing = name('billing');
      shipping = name('shipping');
      return { exchange, consumers: { [billing]: { bindings: ['order.*'] }, [shipping]: { bindings: ['parcel.*'] } } };
    });
    const warren = await connectWarren(topology, { archive: { store, batchSize: 10, maxBatchDelayMs: 5 } });
    await warren.consume(billing, async () => {
      throw new PermanentError('card declined');
    });
    const metrics = warrenMetrics({ warren, archive: { store }, storeCacheMs: 0, broker: { management: { url: MGMT_URL }, cacheMs: 0 } });
    onTeardown(() => metrics.close());
    const scrape = async () => parseScrape(await metrics.registry.metrics());

    for (let i = 0; i < 3; i++) await warren.publish('order.created', { n: i });
    await waitFor(async () => (await store.archive.counts(billing))[0]?.open === 3, 'three failures archived');
    await waitFor(async () => valueOf(await scrape(), 'warren_queue_messages_ready', { consumer: billing, role: 'parked', queue: topology.consumer(billing).parkedQueue }) === 0, 'the parked queue drained');

    let s = await scrape();
    expect(valueOf(s, 'warren_archive_up')).toBe(1);
    expect(valueOf(s, 'warren_archive_open_failures', { consumer: billing })).toBe(3);
    expect(valueOf(s, 'warren_archive_rows', { consumer: billing })).toBe(3);
    expect(valueOf(s, 'warren_archive_oldest_seconds', { consumer: billing })).toBeGreaterThanOrEqual(0);
    expect(valueOf(s, 'warren_archive_oldest_open_seconds', { consumer: billing })).toBeGreaterThanOrEqual(0);
    // A consumer without failures has a series at 0, so the alert's sum finds both sides.
    expect(valueOf(s, 'warren_archive_open_failures', { consumer: shipping })).toBe(0);
    expect(valueOf(s, 'warren_archive_rows', { consumer: shipping })).toBe(0);
    expect(valueOf(s, 'warren_archive_oldest_seconds', { consumer: shipping })).toBe(0);
    // The Warren's own ingester, without naming it.
    expect(valueOf(s, 'warren_archive_behind', { consumer: billing })).toBe(0);
    expect(valueOf(s, 'warren_archive_ingest_held', { consumer: billing })).toBe(0);

    // Resolving one closes it: still a row, no longer open.
    const one = (await store.archive.page({ filter: { consumer: billing }, limit: 1 })).rows[0];
    expect(await store.archive.resolve({ consumer: billing, ids: [one?.id as string] }, { actor: 'ops', reason: 'refunded by hand', at: new Date() }, 10)).toBe(1);
    s = await scrape();
    expect(valueOf(s, 'warren_archive_open_failures', { consumer: billing })).toBe(2);
    expect(valueOf(s, 'warren_archive_rows', { consumer: billing })).toBe(3);
    // Purging removes rows.
    expect(await store.archive.purge({ consumer: billing, states: ['open', 'resolved'] }, 10)).toBe(3);
    s = await scrape();
    expect(valueOf(s, 'warren_archive_open_failures', { consumer: billing })).toBe(0);
    expect(valueOf(s, 'warren_archive_rows', { consumer: billing })).toBe(0);
  });

  it('one reading of the counts per scrape, reused within storeCacheMs; up 0 and no figures when the database does not answer; behind from the ingester', async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    let consumer!: string;
    const topology = testTopology(({ exchange, name }) => {
      consumer = name('billing');
      return { exchange, consumers: { [consumer]: { bindings: ['order.*'] } } };
    });
    let reads = 0;
    const counting = {
      archive: {
        counts: (c?: string) => {
          reads++;
          return outage.store.archive.counts(c);
        },
      },
    };
    const now: { behind: Date | undefined } = { behind: undefined };
    const ingester = { state: () => [{ consumer, queue: 'q', status: now.behind ? ('behind' as const) : ('running' as const), archived: 0, duplicates: 0, batches: 0, held: 4, lastArchivedAt: undefined, behindSince: now.behind, lastError: undefined }] };
    const metrics = warrenMetrics({ topology, archive: { store: counting, ingester }, storeCacheMs: 60_000, broker: false });
    onTeardown(() => metrics.close());
    const scrape = async () => parseScrape(await metrics.registry.metrics());

    let s = await scrape();
    expect(reads).toBe(1); // six gauges, one query
    expect(valueOf(s, 'warren_archive_open_failures', { consumer })).toBe(0);
    expect(valueOf(s, 'warren_archive_behind', { consumer })).toBe(0);
    expect(valueOf(s, 'warren_archive_ingest_held', { consumer })).toBe(4);
    expect(valueOf(s, 'warren_archive_read_duration_seconds')).toBeGreaterThanOrEqual(0);
    await scrape();
    expect(reads).toBe(1); // cached

    // PostgreSQL: the connection is cut. SQLite's outage holds only the write lock (reads go on), so a closed store stands for a database that does not answer.
    const gone = backend === 'postgres' ? outage.store : h.store();
    const fresh = warrenMetrics({ topology, archive: { store: gone, ingester }, storeCacheMs: 0, broker: false });
    onTeardown(() => fresh.close());
    if (backend === 'postgres') await outage.down();
    else await gone.close();
    now.behind = new Date();
    s = parseScrape(await fresh.registry.metrics());
    expect(valueOf(s, 'warren_archive_up')).toBe(0);
    expect(valueOf(s, 'warren_archive_open_failures', { consumer })).toBeUndefined();
    expect(valueOf(s, 'warren_archive_behind', { consumer })).toBe(1);
    if (backend === 'postgres') {
      await outage.up();
      await waitFor(async () => valueOf(parseScrape(await fresh.registry.metrics()), 'warren_archive_up') === 1, 'the archive read again');
    }
  });

  it('names a wrong archive option', () => {
    expect(() => warrenMetrics({ archive: { store: {} as never }, broker: false })).toThrow(/archive\.store.*expected a store with archive tables/);
    expect(() => warrenMetrics({ archive: { store: { archive: { counts: async () => [] } }, ingester: {} as never }, broker: false })).toThrow(/archive\.ingester/);
  });
});
