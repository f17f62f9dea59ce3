/**
 * Hand pauses kept in the store (`store.control`), followed by a running consumer: an
 * operator's store (another process, `warren consumer pause`, the console) writes the row,
 * the consumer reads it at its interval and stops taking messages; they wait in the work
 * queue until the row is resumed. Neither the breaker nor `consumer.resume()` lifts it.
 */
import { describe, expect, it } from 'vitest';
import { BACKENDS, harness } from '../../src/store/testing/harness.js';
import { connectWarren, depth, onTeardown, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

describe.each(BACKENDS)('consumer control through the store: %s', (backend) => {
  it('a pause written by another store instance stops the intake; its resume starts it again', async () => {
    const h = await harness(backend);
    const mine = h.store();
    const operator = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('ship')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const runs: number[] = [];
    const consumer = await warren.consume<{ i: number }>(c.name, ({ i }) => void runs.push(i), { control: { source: mine.control, intervalMs: 100 }, breaker: { probeMs: 50 } });
    const events: unknown[] = [];
    consumer.on('paused', (p) => events.push(['paused', p]));
    consumer.on('resumed', (p) => events.push(['resumed', p]));

    await warren.publish('x', { i: 0 });
    await waitFor(() => runs.length === 1, 'the first message handled before the pause');

    expect(await operator.control.pause(c.name, 'carrier maintenance', 'alice')).toBe(true);
    await waitFor(() => !consumer.intake.consuming, 'the consumer to follow the pause in the store');
    expect(consumer.intake.hand).toMatchObject({ by: 'hand', reason: 'carrier maintenance', actor: 'alice', from: 'store' });
    expect(events).toContainEqual(['paused', expect.objectContaining({ consumer: c.name, by: 'hand', actor: 'alice', from: 'store' })]);

    for (let i = 1; i <= 30; i++) await warren.publish('x', { i });
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) === 30, 'the 30 messages to wait in the work queue');
    // Past many reads of the row and many probe intervals: nothing lifts the pause here.
    expect(await consumer.resume({ actor: 'bob' })).toBe(false);
    await sleep(500);
    expect(runs).toEqual([0]);
    expect(consumer.intake.consuming).toBe(false);
    const h1 = await warren.health();
    expect(h1.ready).toBe(true);
    expect(h1.reasons.map((r) => r.message).join('\n')).toMatch(/paused by hand by alice .*carrier maintenance/);

    expect(await operator.control.resume(c.name, 'carol')).toBe(true);
    await waitFor(() => runs.length === 31, () => `the 30 waiting messages handled after the resume (${runs.length - 1})`);
    expect(new Set(runs).size).toBe(31);
    expect(consumer.intake).toMatchObject({ consuming: true, hand: undefined });
    expect(events).toContainEqual(['resumed', expect.objectContaining({ consumer: c.name, by: 'hand' })]);
    expect(consumer.stats.parked).toBe(0);
  });

  it('a consumer that starts while its row says paused takes nothing until it is resumed', async () => {
    const h = await harness(backend);
    const operator = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('mail')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    await operator.control.pause(c.name, 'provider migration', 'alice');
    const warren = await connectWarren(topology);
    for (let i = 0; i < 10; i++) await warren.publish('x', { i });
    let runs = 0;
    const consumer = await warren.consume(c.name, () => void runs++, { control: { source: h.store().control, intervalMs: 100 } });
    expect(consumer.intake).toMatchObject({ consuming: false, hand: { reason: 'provider migration', from: 'store' } });
    await sleep(400);
    expect(runs).toBe(0);
    const raw = await rawConnection();
    expect(await depth(raw, c.queue)).toBe(10);
    await operator.control.resume(c.name, 'alice');
    await waitFor(() => runs === 10, () => `the 10 messages handled after the resume (${runs})`);
  });

  it('a store that cannot be read changes nothing: the consumer goes on as it was, and follows again once it can', async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    const operator = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('bill')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => void runs++, { control: { source: outage.store.control, intervalMs: 100 } });
    onTeardown(() => outage.up());
    await outage.down();
    for (let i = 0; i < 5; i++) await warren.publish('x', { i });
    await waitFor(() => runs === 5, () => `the 5 messages handled while the store is down (${runs})`);
    expect(consumer.intake.consuming).toBe(true);
    await operator.control.pause(c.name, 'after the outage', 'alice').catch(() => undefined);
    await outage.up();
    await waitFor(async () => {
      // SQLite's write lock may have refused the operator's pause: write it again once the lock is gone.
      if ((await operator.control.read(c.name))[0]?.paused !== true) await operator.control.pause(c.name, 'after the outage', 'alice');
      return !consumer.intake.consuming;
    }, 'the consumer to follow the pause once its store answers again', 20_000);
  });
});
