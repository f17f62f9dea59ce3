/**
 * A guarded handler that outlives its timeout, over every backend, against a real broker:
 * its transaction is rolled back and its connection given back even if it never settles,
 * the stuck handler cannot use its `tx` afterwards, and a copy delivered while its twin
 * still runs is held and tried again without waiting on a lock.
 */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import type { TopologyOptions } from '../index.js';
import { connectWarren, depth, onTeardown, PG_URL, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness, type Harness } from './testing/harness.js';
import { bumpEffect, createEffects, readEffects } from './testing/spec.js';

function setup(): { topology: ReturnType<typeof testTopology>; consumer: string } {
  let consumer!: string;
  const topology = testTopology(({ exchange, name }): TopologyOptions => {
    consumer = name('billing');
    return { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 2 } } } };
  });
  return { topology, consumer };
}

/** Resolves within `ms`, or reports that `promise` did not. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** Backends of this test's PostgreSQL schema in a state, seen by the statements they last ran. */
async function backends(h: Harness, where: string): Promise<number> {
  if (h.spec.backend !== 'postgres') return 0;
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>(`SELECT count(*) AS n FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND query LIKE $1 AND ${where}`, [`%${h.spec.schema}%`]);
    return Number(rows[0]?.n ?? 0);
  } finally {
    await client.end();
  }
}

describe.each(BACKENDS)('guarded handler past its timeout: %s', (backend) => {
  it('rolls back a handler that never settles: other guarded messages, the relay and outbox.lag() go on; the stuck handler cannot use its tx', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20 });
    await relay.start();
    onTeardown(() => relay.stop());
    let stuck = 0;
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    let lateUse: unknown;
    const consumer = await warren.consume(
      name,
      async (payload: { stuck?: boolean }, ctx) => {
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        if (!payload.stuck) return;
        stuck++;
        if (stuck === 1) {
          // Ignores its signal; wakes up long after its timeout and tries its tx again.
          await later;
          try {
            await bumpEffect(h.spec, ctx.tx, 'late');
          } catch (error) {
            lateUse = error;
          }
        }
        await new Promise(() => undefined);
      },
      // Long enough for a handler's one statement on a busy machine; only the stuck one outlives it.
      { idempotency: store.idempotency(), timeoutMs: 1000, concurrency: 4 },
    );
    const { messageId: stuckId } = await warren.publish('order.created', { stuck: true });
    await waitFor(() => stuck === 1, 'the stuck handler to start');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await warren.publish('order.created', { i })).messageId);
    await waitFor(() => consumer.stats.acked === 5, () => `the other guarded messages to be handled (${JSON.stringify(consumer.stats)})`, 10_000);
    await within(
      store.transaction((tx) => store.outbox.add(tx, 'order.created', { fromOutbox: true })),
      5000,
      'an outbox transaction',
    );
    await waitFor(() => relay.stats.published === 1, 'the relay to publish the outbox row');
    await within(store.outbox.lag(), 5000, 'outbox.lag()');
    await waitFor(() => consumer.stats.parked === 1, 'the stuck message to be parked after its attempts');
    expect(consumer.stats).toMatchObject({ retried: 1, parked: 1 });
    release();
    await waitFor(() => lateUse !== undefined, 'the stuck handler to try its tx after the rollback');
    expect(String((lateUse as Error).message)).toMatch(/rolled back/);
    const effects = await readEffects(h.spec, store);
    expect(effects.has(stuckId)).toBe(false);
    expect(effects.has('late')).toBe(false);
    // The outbox row also reached the consumer's queue: acked like the others.
    await waitFor(() => consumer.stats.acked === 6, 'the relayed row to be handled');
    expect(await depth(await rawConnection(), topology.consumer(name).parkedQueue)).toBe(1);
  });

  it('gives back the connection of each timed-out handler: stuck messages do not exhaust the pool', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    // Twelve handlers that never settle, more than the pool's 10 connections.
    const consumer = await warren.consume(
      name,
      async (payload: { stuck?: boolean }, ctx) => {
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        if (payload.stuck) await new Promise(() => undefined);
      },
      // SQLite runs one transaction at a time, so its 24 timed-out runs follow each other.
      { idempotency: store.idempotency(), timeoutMs: backend === 'sqlite' ? 250 : 1000, concurrency: 12, prefetch: 12 },
    );
    for (let i = 0; i < 12; i++) await warren.publish('order.created', { stuck: true });
    await waitFor(() => consumer.stats.parked === 12, 'every stuck message to be parked after its attempts', 20_000);
    await waitFor(async () => (await backends(h, `state LIKE 'idle in transaction%'`)) === 0, 'no connection left idle in a transaction');
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.acked === 1, () => `a new message to be handled (${JSON.stringify(consumer.stats)})`);
    expect((await readEffects(h.spec, store)).get(messageId)).toBe(1);
  });

  it('holds a copy delivered while its twin runs, without waiting on a lock, then acks it as a duplicate', async () => {
    const h = await harness(backend);
    const store = h.store({ busyTimeoutMs: 100 });
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let runs = 0;
    const guard = store.idempotency();
    const consumer = await warren.consume(
      name,
      async (_p: unknown, ctx) => {
        runs++;
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        await gate;
      },
      { idempotency: guard, timeoutMs: 10_000, concurrency: 2 },
    );
    onTeardown(async () => release());
    await warren.publish('order.created', {}, { messageId: 'twin' });
    await waitFor(() => runs === 1, 'the first copy to run');
    await warren.publish('order.created', {}, { messageId: 'twin' });
    const waiting = () => backends(h, `wait_event_type = 'Lock'`);
    await waitFor(async () => guard.stats.busy >= 2 || (await waiting()) > 0, 'the second copy to be held');
    expect(await waiting()).toBe(0);
    expect(guard.stats.busy).toBeGreaterThanOrEqual(2);
    release();
    await waitFor(() => consumer.stats.acked + consumer.stats.duplicate === 2, 'both copies settled');
    expect(consumer.stats).toMatchObject({ acked: 1, duplicate: 1, retried: 0, parked: 0 });
    expect(runs).toBe(1);
    expect((await readEffects(h.spec, store)).get('twin')).toBe(1);
  });

  it.runIf(backend === 'postgres')('cancels the query a timed-out handler is stuck in, so its locks go at once', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    let started = 0;
    const consumer = await warren.consume(
      name,
      async (_p: unknown, ctx) => {
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        started++;
        // The schema in a comment, so the test finds this backend in pg_stat_activity.
        await (ctx.tx as pg.PoolClient).query(`SELECT pg_sleep(3600) /* ${h.spec.backend === 'postgres' ? h.spec.schema : ''} */`);
      },
      { idempotency: store.idempotency(), timeoutMs: 1000 },
    );
    await warren.publish('order.created', {});
    await waitFor(() => started === 1, 'the handler to start its query');
    await waitFor(() => consumer.stats.retried === 1, 'the timeout to retry the message');
    await waitFor(async () => (await backends(h, `query LIKE '%pg_sleep%'`)) === 0, 'the stuck query to be cancelled and its connection gone', 5000);
    await waitFor(() => consumer.stats.parked === 1, 'the second attempt to time out too and park');
    expect(await readEffects(h.spec, store)).toEqual(new Map());
  });
});
