/**
 * The store figures (outbox lag, flagged rows, retry-table signals), the scheduler's
 * counters and the health checks' state, on real SQLite and PostgreSQL with a real broker.
 */
import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { WaitForConditionError } from '../retry-table/index.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { connectWarren, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { warrenMetrics } from './index.js';
import { parseScrape, valueOf } from './testing/scrape.js';

describe.each(BACKENDS)('store metrics: %s', (backend) => {
  it('outbox lag and flagged rows, retry-table rows due, paused and untimed by dependency, scheduler and health checks', async () => {
    const h = await harness(backend);
    const store = h.store();
    let name!: string;
    const topology = testTopology(({ exchange, name: n }) => {
      name = n('shipping');
      return { exchange, consumers: { [name]: { bindings: ['order.*'] } } };
    });
    const warren = await connectWarren(topology);
    const table = store.retryTable;
    await warren.consume(
      name,
      async (p: { dependency: string }, ctx) => {
        if (ctx.headers[HEADER.waits] !== undefined) return; // back from the table: done
        throw new WaitForConditionError(p.dependency, p.dependency === 'carrier' ? { retryAt: null } : { delayMs: 0 });
      },
      { retryTable: { table } },
    );
    const scheduler = table.scheduler({
      publisher: warren.publisher,
      exchange: topology.exchange,
      ratePerSecond: 1000,
      pollMs: 20,
      relay: { pollMs: 20 },
      checks: { carrier: () => false },
      health: { intervalMs: 20, failuresToPause: 1 },
    });
    onTeardown(() => scheduler.stop());
    const metrics = warrenMetrics({ warren, stores: [{ store, name: 'orders' }], schedulers: [{ scheduler, name: 'main' }], storeCacheMs: 0, broker: false });
    onTeardown(() => metrics.close());
    const scrape = async () => parseScrape(await metrics.registry.metrics());

    await warren.publish('order.created', { dependency: 'carrier' });
    await warren.publish('order.created', { dependency: 'ledger' });
    await store.transaction((tx) => store.outbox.add(tx, 'nobody.listens', { orderId: 1 }));
    await waitFor(async () => (await table.count()) === 2, 'both messages in the retry table');
    await new Promise((r) => setTimeout(r, 20)); // so the due row and the outbox row have an age

    // Before any scheduler runs: one row waits for a person, one is due.
    let s = await scrape();
    expect(valueOf(s, 'warren_store_up', { store: 'orders' })).toBe(1);
    expect(valueOf(s, 'warren_retry_table_rows', { store: 'orders', dependency: 'carrier' })).toBe(1);
    expect(valueOf(s, 'warren_retry_table_rows', { store: 'orders', dependency: 'ledger' })).toBe(1);
    expect(valueOf(s, 'warren_retry_table_due', { store: 'orders', dependency: 'ledger' })).toBe(1);
    expect(valueOf(s, 'warren_retry_table_due', { store: 'orders', dependency: 'carrier' })).toBe(0);
    expect(valueOf(s, 'warren_retry_table_paused', { store: 'orders', dependency: 'carrier' })).toBe(0);
    expect(valueOf(s, 'warren_retry_table_waiting_untimed', { store: 'orders' })).toBe(1);
    expect(valueOf(s, 'warren_retry_table_oldest_due_age_seconds', { store: 'orders' })).toBeGreaterThan(0);
    expect(valueOf(s, 'warren_outbox_pending', { store: 'orders' })).toBe(1);
    expect(valueOf(s, 'warren_outbox_oldest_pending_age_seconds', { store: 'orders' })).toBeGreaterThan(0);
    expect(valueOf(s, 'warren_outbox_flagged', { store: 'orders' })).toBe(0);
    expect(valueOf(s, 'warren_consumer_waits_total', { consumer: name, dependency: 'carrier' })).toBe(1);
    expect(valueOf(s, 'warren_consumer_deliveries_total', { consumer: name, outcome: 'waiting' })).toBe(2);
    expect(valueOf(s, 'warren_retry_scheduler_moved_total', { scheduler: 'main' })).toBe(0);
    expect(valueOf(s, 'warren_dependency_healthy', { dependency: 'carrier' })).toBeUndefined(); // not checked yet

    // The scheduler sends the due row back, its relay flags the unroutable outbox row,
    // and the failing check pauses the carrier's rows.
    await scheduler.start();
    await waitFor(
      async () => {
        s = await scrape();
        return (
          valueOf(s, 'warren_outbox_flagged', { store: 'orders' }) === 1 &&
          valueOf(s, 'warren_retry_table_paused', { store: 'orders', dependency: 'carrier' }) === 1 &&
          // The monitor's own state follows its pause's commit, which the table shows first.
          valueOf(s, 'warren_dependency_paused', { dependency: 'carrier' }) === 1 &&
          valueOf(s, 'warren_retry_table_rows', { store: 'orders', dependency: 'ledger' }) === undefined &&
          valueOf(s, 'warren_consumer_deliveries_total', { consumer: name, outcome: 'acked' }) === 1 &&
          // The relay marks a row sent once its confirm is back, which can come after it was handled.
          valueOf(s, 'warren_outbox_pending', { store: 'orders' }) === 0 &&
          valueOf(s, 'warren_publishes_total', { kind: 'retry-table', outcome: 'confirmed' }) === 1
        );
      },
      'the ledger row sent back and acked, the outbox row flagged, the carrier paused',
    );
    expect(valueOf(s, 'warren_retry_scheduler_moved_total', { scheduler: 'main' })).toBe(1);
    // Every publish by what it was: the application's two, the relay's outbox row
    // (returned: nothing is bound for it) and the row the scheduler sent back.
    expect(valueOf(s, 'warren_publishes_total', { kind: 'publish', outcome: 'confirmed' })).toBe(2);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'outbox', outcome: 'returned' })).toBe(1);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'outbox', outcome: 'confirmed' })).toBe(0);
    expect(valueOf(s, 'warren_publish_confirm_duration_seconds_count', { kind: 'retry-table' })).toBe(1);
    expect(valueOf(s, 'warren_retry_scheduler_failures_total', { scheduler: 'main' })).toBe(0);
    expect(valueOf(s, 'warren_dependency_healthy', { dependency: 'carrier' })).toBe(0);
    expect(valueOf(s, 'warren_dependency_paused', { dependency: 'carrier' })).toBe(1);
    expect(valueOf(s, 'warren_outbox_pending', { store: 'orders' })).toBe(0);
    expect(valueOf(s, 'warren_outbox_oldest_pending_age_seconds', { store: 'orders' })).toBe(0);
    expect(valueOf(s, 'warren_retry_table_oldest_due_age_seconds', { store: 'orders' })).toBe(0);
  });

});

// A SQLite file stays readable while another connection writes, so only a database
// server can be away: PostgreSQL, behind a TCP proxy the test cuts.
describe('store metrics: postgres away', () => {
  const backend = 'postgres';
  it('a store whose database does not answer reads as down, and the scrape still succeeds', async () => {
    const h = await harness(backend);
    const outage = await h.outage({ connectTimeoutMs: 300 });
    const metrics = warrenMetrics({ stores: [outage.store], storeCacheMs: 0 });
    onTeardown(() => metrics.close());
    expect(valueOf(parseScrape(await metrics.registry.metrics()), 'warren_store_up', { store: backend })).toBe(1);
    await outage.down();
    try {
      const s = parseScrape(await metrics.registry.metrics());
      expect(valueOf(s, 'warren_store_up', { store: backend })).toBe(0);
      expect(valueOf(s, 'warren_outbox_pending', { store: backend })).toBeUndefined();
    } finally {
      await outage.up();
    }
  });
});
