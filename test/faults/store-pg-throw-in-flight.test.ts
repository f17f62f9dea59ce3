/**
 * A guarded PostgreSQL handler that fails while a query of its still runs (say
 * `Promise.all([tx.query(…), callApi()])` where the call fails first): the guard sent
 * ROLLBACK, which node-postgres queues behind the running query, so the transaction, its
 * row locks and the message's advisory lock stayed for as long as that query ran — past
 * the handler's `timeoutMs`, which then only freed the consumer's slot. The message's
 * retried copy was held as busy all that time.
 */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import type { TopologyOptions } from '../../src/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { connectWarren, onTeardown, PG_URL, testTopology, waitFor } from '../helpers.js';

describe('PostgreSQL guard: a handler that fails with a query still running', () => {
  it('gives its transaction back at once: the query is cancelled and the retried copy runs', async () => {
    const h = await harness('postgres');
    const store = h.store();
    await store.migrate();
    const tag = `inflight_${(h.spec as { schema: string }).schema}`;
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
        const tx = ctx.tx as unknown as pg.PoolClient;
        const failingCall = new Promise((_, reject) => setTimeout(() => reject(new Error('the API call failed')), 50));
        await Promise.all([tx.query(`SELECT pg_sleep(20) /* ${tag} */`), failingCall]);
      },
      { idempotency: store.idempotency(), timeoutMs: 500, storeOutageHoldMs: 60_000 },
    );
    const started = Date.now();
    await warren.publish('order.created', {});
    await waitFor(() => c.stats.acked === 1, 'the retried copy to be handled', 10_000);
    expect(runs).toBe(2);
    expect(Date.now() - started).toBeLessThan(5000);
    await waitFor(async () => (await running()) === 0, 'the failed handler\'s query to be cancelled', 3000);
  });
});
