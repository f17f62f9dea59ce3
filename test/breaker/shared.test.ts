/**
 * The breaker's state shared through the store (`breaker: { share: store.breakers }`):
 * two processes of one consumer (here two connections, each with its own store instance
 * on the same tables). When one opens, the other stops taking messages too; when a probe
 * succeeds, both consume again. Nothing is parked and every message is handled once.
 */
import { describe, expect, it } from 'vitest';
import { BACKENDS, harness } from '../../src/store/testing/harness.js';
import type { Overview } from '../../src/console/index.js';
import { get, testConsole } from '../../src/console/testing/harness.js';
import { connectWarren, depth, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

describe.each(BACKENDS)('shared breaker: %s', (backend) => {
  it("one process's opening stops the other; one good probe starts both again", async () => {
    const h = await harness(backend);
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('ship')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 20 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const one = await connectWarren(topology);
    const two = await connectWarren(topology);
    let down = true;
    const handled = new Map<number, number>();
    const handler = async ({ i }: { i: number }) => {
      await sleep(2);
      if (down) throw new Error('carrier unreachable');
      handled.set(i, (handled.get(i) ?? 0) + 1);
    };
    // The first opens after 3 failures in a row; the second would need 10,000: only the share can stop it.
    const a = await one.consume<{ i: number }>(c.name, handler, { concurrency: 2, prefetch: 4, breaker: { consecutiveFailures: 3, probeMs: 200, maxProbeMs: 400, share: h.store().breakers, shareIntervalMs: 100 } });
    const b = await two.consume<{ i: number }>(c.name, handler, { concurrency: 2, prefetch: 4, breaker: { consecutiveFailures: 10_000, probeMs: 200, maxProbeMs: 400, share: h.store().breakers, shareIntervalMs: 100 } });
    const bPaused: unknown[] = [];
    b.on('paused', (p) => bPaused.push(p));

    for (let i = 0; i < 200; i++) await one.publish('x', { i });
    await waitFor(() => !a.intake.consuming && !b.intake.consuming, () => `both to stop taking messages (a: ${a.intake.breaker}, b: ${b.intake.breaker})`, 20_000);
    expect(a.intake.open?.by).toMatch(/^(failures|shared)$/);
    expect(b.intake.open).toMatchObject({ by: 'shared', reason: expect.stringMatching(/^the breaker of .+:\d+ opened: 3 transient failures in a row$/) as unknown as string });
    expect(bPaused).toContainEqual(expect.objectContaining({ by: 'shared' }));
    const reader = h.store();
    expect((await reader.breakers.read(c.name))[0]).toMatchObject({ open: true, reason: '3 transient failures in a row' });
    // Seen from outside the processes: the console's overview (given the store) says so.
    const ops = testConsole(topology, { store: reader });
    const overview = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    expect(overview.consumers[0]?.breaker).toMatchObject({ reason: '3 transient failures in a row' });
    expect(overview.problems).toContainEqual(expect.objectContaining({ consumer: c.name, kind: 'breaker-open', message: expect.stringMatching(/^breaker open since .* \(shared through the database; opened by .+\): 3 transient failures in a row; \d+ messages? wait in /) as unknown as string }));
    expect((await get(ops, '/')).text).toContain('data-field="breaker"');

    // While both are open the messages wait in the queue; only probes (each process's own) run.
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) > 150, 'most of the messages to wait in the work queue');

    down = false;
    await waitFor(() => a.intake.consuming && b.intake.consuming, () => `both to consume again (a: ${a.intake.breaker}, b: ${b.intake.breaker})`, 20_000);
    await waitFor(() => handled.size === 200, () => `all 200 handled (${handled.size})`, 30_000);
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
    expect(a.stats.parked + b.stats.parked).toBe(0);
    expect((await reader.breakers.read(c.name))[0]).toMatchObject({ open: false, closedBy: expect.stringMatching(/:\d+$/) as unknown as string });
  });

  it('a consumer that starts while the shared breaker is open takes nothing until a probe succeeds', async () => {
    const h = await harness(backend);
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('mail')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 5 } } } }));
    const c = [...topology.consumers.values()][0]!;
    await h.store().breakers.open(c.name, 'the mail provider answers 503', 'elsewhere:1', new Date());
    const warren = await connectWarren(topology);
    for (let i = 0; i < 10; i++) await warren.publish('x', { i });
    let runs = 0;
    const consumer = await warren.consume(c.name, () => void runs++, { breaker: { probeMs: 300, share: h.store().breakers, shareIntervalMs: 100 } });
    expect(consumer.intake).toMatchObject({ consuming: false, breaker: 'open', open: { by: 'shared', openedBy: 'elsewhere:1' } });
    // Its own probe (one message) succeeds, closes the shared state, and it consumes the rest.
    await waitFor(() => runs === 10, () => `the 10 messages handled after a good probe (${runs})`);
    expect(consumer.intake.probes.success).toBe(1);
    expect((await h.store().breakers.read(c.name))[0]).toMatchObject({ open: false });
  });
});
