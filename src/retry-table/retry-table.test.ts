/**
 * The retry table inside real consumers and schedulers, against a real broker, over
 * every backend: a dependency outage from first failure to drained recovery, pauses by
 * tenant, rows that wait for an operator, two schedulers at once, a scheduler killed
 * mid-drain, the database away while a handler asks for the table, and the cap.
 */
import { describe, expect, it } from 'vitest';
import type { TopologyOptions } from '../index.js';
import { HEADER } from '../headers.js';
import { PermanentError } from '../errors.js';
import { AMQP_URL, connectWarren, onTeardown, depth, drain, rawConnection, sleep, testTopology, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { bumpEffect, createEffects, readEffects, type AnyStore, type StoreSpec } from '../store/testing/spec.js';
import { spawnChild } from '../store/testing/spawn.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import { WaitForConditionError } from './index.js';
import { retryRowFixture } from './testing/rows.js';

class CarrierDownError extends Error {
  override name = 'CarrierDownError';
}

function setup(): { options: TopologyOptions; topology: ReturnType<typeof testTopology>; consumer: string } {
  let options!: TopologyOptions;
  let consumer!: string;
  const topology = testTopology(({ exchange, name }) => {
    consumer = name('shipping');
    options = { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 3 } } } };
    return options;
  });
  return { options, topology, consumer };
}

async function allOnce(spec: StoreSpec, store: AnyStore, ids: readonly string[]): Promise<void> {
  const effects = await readEffects(spec, store);
  expect(effects.size).toBe(ids.length);
  expect([...effects.keys()].sort()).toEqual([...ids].sort());
  expect([...effects.values()].filter((n) => n !== 1)).toEqual([]);
}

/** The most rows moved in any window of `windowMs`, from `[time, rows]` records. */
function peak(moves: ReadonlyArray<readonly [number, number]>, windowMs: number): number {
  let best = 0;
  let start = 0;
  let sum = 0;
  for (let end = 0; end < moves.length; end++) {
    sum += (moves[end] as readonly [number, number])[1];
    while ((moves[end] as readonly [number, number])[0] - (moves[start] as readonly [number, number])[0] > windowMs) sum -= (moves[start++] as readonly [number, number])[1];
    best = Math.max(best, sum);
  }
  return best;
}

describe.each(BACKENDS)('retry table with a broker: %s', (backend) => {
  it('carrier outage: 1,400 failures wait paused while the check fails, nothing reaches the carrier, then drain at the set rate with each effect once', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const carrier = { up: false, calls: 0 };
    const consumer = await warren.consume(
      name,
      async (_p: unknown, ctx) => {
        carrier.calls++;
        if (!carrier.up) throw new CarrierDownError('carrier answered 503');
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
      },
      { idempotency: store.idempotency(), prefetch: 50, concurrency: 10, retryTable: { table: store.retryTable, rules: [{ when: CarrierDownError, dependency: 'carrier' }], delayMs: 100 } },
    );
    const RATE = 350;
    const scheduler = store.retryTable.scheduler({
      publisher: warren.publisher,
      exchange: topology.exchange,
      ratePerSecond: RATE,
      pollMs: 20,
      relay: { pollMs: 20 },
      checks: { carrier: () => carrier.up },
      health: { intervalMs: 20, failuresToPause: 3 },
    });
    const moves: Array<[number, number]> = [];
    scheduler.on('drained', (e: { rows: number }) => moves.push([performance.now(), e.rows]));
    await scheduler.start();
    const health = scheduler.health;
    if (!health) throw new Error('the scheduler runs the checks');
    const ids: string[] = [];
    for (let i = 0; i < 1400; i++) ids.push((await warren.publish('order.created', { i })).messageId);
    const table = store.retryTable;
    await waitFor(async () => (await table.count({ paused: true })) === 1400, 'all 1,400 rows stored and paused', 30_000);
    expect(health.stats.paused).toBe(1);
    expect(consumer.stats.acked).toBe(0);
    // While paused, nothing reaches the carrier.
    const callsWhilePaused = carrier.calls;
    await sleep(400);
    expect(carrier.calls).toBe(callsWhilePaused);
    expect((await table.signals()).byDependency['carrier']).toMatchObject({ rows: 1400, paused: 1400, due: 0 });
    // The carrier is back: the check resumes the rows, the scheduler drains them at its rate.
    carrier.up = true;
    await waitFor(() => consumer.stats.acked === 1400, 'all 1,400 handled after the carrier came back', 60_000);
    expect(health.stats.resumed).toBe(1);
    expect(await table.count()).toBe(0);
    await allOnce(h.spec, store, ids);
    // A steady stream, never a burst (the backlog is four seconds' worth): no second of the
    // drain moves more than the rate and one batch, give or take what a slow transaction
    // shifts from one second into the next (times are when each pass finished). Arrival
    // rates at the consumer are measured by the benchmark.
    expect(peak(moves, 1000)).toBeLessThanOrEqual(RATE * 1.1 + scheduler.batchSize);
    const history = await table.history();
    expect(history.filter((e) => e.actor === 'health-check:carrier').map((e) => e.action)).toEqual(['resume', 'pause']);
    await scheduler.stop();
  }, 120_000);

  it('a pause by tenant leaves other tenants draining; a row with no next attempt waits until an operator sets one', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const table = store.retryTable;
    await warren.consume(
      name,
      async (p: { tenant: string; none?: boolean }, ctx) => {
        if (ctx.headers[HEADER.waits] === undefined) throw new WaitForConditionError('ledger', { tenant: p.tenant, ...(p.none ? { retryAt: null } : { delayMs: 0 }) });
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
      },
      { idempotency: store.idempotency(), retryTable: { table } },
    );
    expect(await table.pause({ tenant: 'acme' }, { actor: 'alice' })).toBe(0);
    const scheduler = table.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    const acme: string[] = [];
    const globex: string[] = [];
    for (let i = 0; i < 5; i++) acme.push((await warren.publish('order.created', { tenant: 'acme' })).messageId);
    for (let i = 0; i < 5; i++) globex.push((await warren.publish('order.created', { tenant: 'globex' })).messageId);
    const none = (await warren.publish('order.created', { tenant: 'globex', none: true })).messageId;
    await waitFor(async () => (await readEffects(h.spec, store)).size === 5, "globex's five rows drained");
    await sleep(300);
    expect([...(await readEffects(h.spec, store)).keys()].sort()).toEqual([...globex].sort());
    expect(await table.count({ tenant: 'acme', paused: true })).toBe(5);
    const [waiting] = await table.list({ tenant: 'globex' });
    expect(waiting).toMatchObject({ messageId: none, nextAttemptAt: null, paused: false });
    expect((await table.signals()).waiting).toBe(1);
    // An operator sets its next attempt, then lifts the tenant's pause.
    expect(await table.schedule({ ids: [waiting?.id as string] }, 'now', { actor: 'bob' })).toBe(1);
    await waitFor(async () => (await readEffects(h.spec, store)).has(none), 'the scheduled row handled');
    expect(await table.resume({ tenant: 'acme' }, { actor: 'alice' })).toBe(5);
    await waitFor(async () => (await readEffects(h.spec, store)).size === 11, 'every row handled');
    await allOnce(h.spec, store, [...acme, ...globex, none]);
    expect((await table.history()).map((e) => `${e.actor} ${e.action} ${e.rows}`)).toEqual(['alice resume 5', 'bob schedule 1', 'alice pause 0']);
    await scheduler.stop();
  });

  it('two schedulers at once publish no row twice; a scheduler killed mid-drain loses nothing', async () => {
    const h = await harness(backend);
    const storeA = h.store();
    const storeB = h.store();
    await storeA.migrate();
    const { options, topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const c = topology.consumer(name);
    const deliveries = new Map<string, number>();
    await warren.consume(name, (_p: unknown, ctx) => void deliveries.set(ctx.messageId as string, (deliveries.get(ctx.messageId as string) ?? 0) + 1), { prefetch: 100, concurrency: 20 });
    const rowFor = (id: string) => retryRowFixture({ messageId: id, consumer: name, queue: c.queue, parkedQueue: c.parkedQueue, exchange: topology.exchange });
    const first = Array.from({ length: 600 }, (_, i) => `two-${i}`);
    for (const id of first) await storeA.retryTable.insert(rowFor(id));
    const schedulers = [storeA, storeB].map((s) => s.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, batchSize: 25, pollMs: 20, relay: { pollMs: 20 } }));
    await Promise.all(schedulers.map((s) => s.start()));
    await waitFor(() => deliveries.size === 600, 'all 600 rows delivered', 30_000);
    await sleep(300);
    expect([...deliveries.values()].filter((n) => n !== 1)).toEqual([]);
    // Both took part.
    expect(schedulers.every((s) => s.stats.moved > 0)).toBe(true);
    expect(schedulers[0]!.stats.moved + schedulers[1]!.stats.moved).toBe(600);
    await Promise.all(schedulers.map((s) => s.stop()));

    // A scheduler in another process, killed while it drains.
    deliveries.clear();
    const second = Array.from({ length: 300 }, (_, i) => `kill-${i}`);
    for (const id of second) await storeA.retryTable.insert(rowFor(id));
    const child = spawnChild({
      WARREN_STORE: JSON.stringify({ spec: h.spec }),
      WARREN_CHILD_ROLE: 'scheduler',
      WARREN_AMQP_URL: AMQP_URL,
      WARREN_TOPOLOGY: JSON.stringify(options),
      WARREN_RATE: '100',
      WARREN_LEASE_MS: '500',
    });
    await child.line('ready');
    await waitFor(() => child.lines.some((l) => l.startsWith('drained ') && Number(l.split(' ')[1]) >= 60), 'the child to drain some rows', 20_000);
    child.process.kill('SIGKILL');
    expect(await child.exited).toBe('SIGKILL');
    const left = await storeA.retryTable.count();
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThan(300);
    const survivor = storeB.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: Infinity, pollMs: 20, relay: { pollMs: 20, leaseMs: 500 } });
    await survivor.start();
    await waitFor(() => second.every((id) => deliveries.has(id)), 'every row delivered after the kill', 30_000);
    expect(await storeA.retryTable.count()).toBe(0);
    // Rows the killed process published but never marked sent go out again (a duplicate, never a loss).
    await waitFor(async () => (await storeA.outbox.lag()).pending === 0, 'the outbox to empty', 30_000);
    await survivor.stop();
  }, 90_000);

  it('a broker outage leaves the rows in the table (the outbox takes only its bound), and the drain goes on when it is back', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, consumer: name } = setup();
    const broker = new URL(AMQP_URL);
    const proxy = await TcpProxy.start(Number(broker.port || 5672));
    onTeardown(() => proxy.close());
    broker.port = String(proxy.port);
    const warren = await connectWarren(topology, { url: broker.toString(), reconnect: { initialDelayMs: 50, maxDelayMs: 300 } });
    const seen = new Set<string>();
    const direct = await connectWarren(topology);
    await direct.consume(name, (_p: unknown, ctx) => void seen.add(ctx.messageId as string));
    const c = topology.consumer(name);
    for (let i = 0; i < 200; i++) {
      await store.retryTable.insert(retryRowFixture({ messageId: `out-${i}`, consumer: name, queue: c.queue, parkedQueue: c.parkedQueue, exchange: topology.exchange, nextAttemptAt: new Date() }));
    }
    await proxy.cut();
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, maxPending: 20, pollMs: 20, relay: { pollMs: 20, retry: { maxDelayMs: 200 } } });
    await scheduler.start();
    await waitFor(async () => (await store.outbox.lag()).pending === 20, 'the scheduler to fill the outbox to its bound', 10_000);
    await sleep(300);
    expect(seen.size).toBe(0);
    expect((await store.outbox.lag()).pending).toBe(20);
    expect(await store.retryTable.count()).toBe(180);
    await proxy.restore();
    await waitFor(() => seen.size === 200, 'all 200 rows delivered after the broker came back', 30_000);
    expect(await store.retryTable.count()).toBe(0);
    await scheduler.stop();
  });

  it('holds the message unacked while the database is away when the handler asks for the table, then stores it once it is back', async () => {
    const h = await harness(backend);
    const { store, down, up } = await h.outage();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, () => Promise.reject(new WaitForConditionError('carrier', { retryAt: null })), { retryTable: { table: store.retryTable } });
    await down();
    const { messageId } = await warren.publish('order.created', {});
    await sleep(600);
    // Not acked, not moved: held while the insert is tried again.
    expect(consumer.stats).toMatchObject({ waiting: 0, acked: 0, retried: 0, parked: 0, inFlight: 1 });
    await up();
    await waitFor(() => consumer.stats.waiting === 1, 'the row stored once the database is back', 15_000);
    const rows = await store.retryTable.list();
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ messageId, dependency: 'carrier', nextAttemptAt: null });
    expect(await depth(await rawConnection(), topology.consumer(name).queue)).toBe(0);
  });

  it('past the hold time the message goes round the first retry tier (no attempt counted) and asks again; nothing lost', async () => {
    const h = await harness(backend);
    const { store, down, up } = await h.outage();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, () => Promise.reject(new WaitForConditionError('carrier', { retryAt: null })), { retryTable: { table: store.retryTable }, storeOutageHoldMs: 150 });
    await down();
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.retried >= 1, 'the message sent round the first tier', 15_000);
    await up();
    await waitFor(() => consumer.stats.waiting === 1, 'the row stored once the database is back', 15_000);
    const rows = await store.retryTable.list();
    expect(rows.map((r) => r.messageId)).toEqual([messageId]);
    expect(rows[0]?.headers[HEADER.attempts]).toBe(0);
    expect(consumer.stats.parked).toBe(0);
  });

  it('parks a message that reached the retry table cap, with its failure', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(
      name,
      () => Promise.reject(new WaitForConditionError('carrier', { delayMs: 0, tenant: 't1', cause: new CarrierDownError('carrier answered 503') })),
      { retryTable: { table: store.retryTable, maxAttempts: 2 } },
    );
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.parked === 1, 'the message parked at the cap');
    expect(consumer.stats.waiting).toBe(2);
    const [parked] = await drain(await rawConnection(), topology.consumer(name).parkedQueue);
    expect(parked?.properties.messageId).toBe(messageId);
    expect(parked?.properties.headers).toMatchObject({
      [HEADER.parkedReason]: 'max-attempts',
      [HEADER.errorClass]: 'CarrierDownError',
      [HEADER.errorMessage]: 'carrier answered 503',
      [HEADER.waits]: 2,
      [HEADER.dependency]: 'carrier',
      [HEADER.tenant]: 't1',
    });
    expect(await store.retryTable.count()).toBe(0);
    await scheduler.stop();
  });

  it('stores a failure whose text the database would refuse (NUL, a lone surrogate), replacing those characters', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, () => Promise.reject(new WaitForConditionError('carrier', { retryAt: null, cause: new Error('bad body: \u0000 and \ud800') })), {
      retryTable: { table: store.retryTable },
    });
    await warren.publish('order.created', {}, { headers: { note: 'a\u0000b' } });
    await waitFor(() => consumer.stats.waiting === 1, 'the row stored');
    const [stored] = await store.retryTable.list();
    expect(stored?.lastError).toBe('bad body: \ufffd and \ufffd');
    expect(stored?.headers['note']).toBe('a\ufffdb');
  });

  it('when the table cannot take the row (not an outage), the ladder takes the message, counting attempts, and parks it at the cap', async () => {
    const h = await harness(backend);
    // A store whose tables were never created, and that may not create them.
    const store = h.store({ migrate: false });
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, () => Promise.reject(new WaitForConditionError('carrier')), { retryTable: { table: store.retryTable } });
    await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.parked === 1, 'the message parked at the ladder cap', 15_000);
    expect(consumer.stats).toMatchObject({ retried: 2, waiting: 0 });
  });

  it('a permanent failure parks at once even when a broad rule would send it to the table', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, () => Promise.reject(new PermanentError('order 7 has no customer')), {
      retryTable: { table: store.retryTable, rules: [{ when: Error, dependency: 'anything' }] },
    });
    await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.parked === 1, 'the message parked');
    expect(consumer.stats.waiting).toBe(0);
    expect(await store.retryTable.count()).toBe(0);
  });

  it('operator park sends rows to the parked queue through the outbox, with the reason', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    await warren.consume(name, () => Promise.reject(new WaitForConditionError('tax', { retryAt: null, cause: new Error('tax API contract lapsed') })), { retryTable: { table: store.retryTable } });
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    const { messageId } = await warren.publish('order.created', { total: 12 }, { correlationId: 'corr-1' });
    await waitFor(async () => (await store.retryTable.count()) === 1, 'the row stored');
    expect(await store.retryTable.park({ dependency: 'tax' }, { actor: 'dana' })).toBe(1);
    const parkedQueue = topology.consumer(name).parkedQueue;
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, parkedQueue)) === 1, 'the row published to the parked queue');
    const [parked] = await drain(conn, parkedQueue);
    expect(parked?.properties).toMatchObject({ messageId, correlationId: 'corr-1' });
    expect(JSON.parse(parked?.content.toString() ?? '')).toEqual({ total: 12 });
    expect(parked?.properties.headers).toMatchObject({ [HEADER.parkedReason]: 'operator', [HEADER.errorMessage]: 'tax API contract lapsed', [HEADER.routingKey]: 'order.created' });
    await scheduler.stop();
  });
});
