/**
 * A guarded PostgreSQL handler that times out while a query it sent with a callback, or
 * as a submittable (pg.Query, a cursor, a stream), still runs: that query was not
 * cancelled, because only calls that returned a promise counted as in flight. Its backend
 * kept running it, with the transaction's locks, the idempotency marker's advisory lock
 * among them: the message's next copy was held as busy until the query ended by itself.
 */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import type { TopologyOptions } from '../../src/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { connectWarren, onTeardown, PG_URL, testTopology, waitFor } from '../helpers.js';

describe.each(['callback', 'submittable'] as const)('PostgreSQL guard: a timed-out handler with a %s query running', (style) => {
  it('has that query cancelled, so the next copy of the message runs at once', async () => {
    const h = await harness('postgres');
    const store = h.store();
    await store.migrate();
    const tag = `untracked_${(h.spec as { schema: string }).schema}`;
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    onTeardown(() => admin.end());
    const running = async () => Number((await admin.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE $1 AND state = 'active' AND pid <> pg_backend_pid()`, [`%${tag}%`])).rows[0].n);
    let consumer!: string;
    const topology = testTopology(({ exchange, name }): TopologyOptions => {
      consumer = name('billing');
      return { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 3 } } } };
    });
    const warren = await connectWarren(topology);
    let runs = 0;
    const c = await warren.consume(
      consumer,
      async (_p: unknown, ctx) => {
        runs++;
        if (runs > 1) return;
        const tx = ctx.tx as unknown as { query(q: unknown, values?: unknown[], cb?: () => void): unknown };
        const sql = `SELECT pg_sleep(20) /* ${tag} */`;
        if (style === 'callback') tx.query(sql, [], () => undefined);
        else tx.query(new pg.Query(sql).on('error', () => undefined));
        await new Promise(() => undefined); // ignores its signal
      },
      { idempotency: store.idempotency(), timeoutMs: 1000, storeOutageHoldMs: 60_000 },
    );
    const started = Date.now();
    await warren.publish('order.created', {});
    await waitFor(() => c.stats.acked === 1, 'the retried copy to be handled', 10_000);
    expect(runs).toBe(2);
    expect(Date.now() - started).toBeLessThan(5000);
    await waitFor(async () => (await running()) === 0, 'the timed-out query to be cancelled', 3000);
  });
});
