/**
 * The breaker through a dependency's outage (DESIGN invariant 15): 5,000 messages, the
 * dependency down for WARREN_BREAKER_OUTAGE_MS (10 s by default here; 120000 for the full
 * two minutes). Nothing is parked for the dependency, a handful of messages move while it
 * trips, every message is handled once after it comes back, no attempt is burnt on the
 * pause, and a permanent error still parks at once. Then a hand pause, which the breaker
 * never lifts.
 */
import { describe, expect, it } from 'vitest';
import { dependencyChecks, HEADER, PermanentError, type Outcome } from '../../src/index.js';
import { warrenMetrics } from '../../src/metrics/index.js';
import { parseScrape, valueOf } from '../../src/metrics/testing/scrape.js';
import { BROKER, connectWarren, depth, drain, onTeardown, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

const OUTAGE_MS = Number(process.env['WARREN_BREAKER_OUTAGE_MS'] ?? 10_000);
const MESSAGES = 5000;

describe(`breaker (RabbitMQ ${BROKER})`, () => {
  it(`holds ${MESSAGES} messages through a ${OUTAGE_MS / 1000} s outage: none parked, a handful moved, each handled once`, async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      consumers: { [name('ship')]: { bindings: ['order.paid'], retry: { delays: ['50ms', '100ms', '200ms'], maxAttempts: 5 } } },
    }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let down = false;
    const checks = dependencyChecks({ carrier: () => !down }, { intervalMs: 250, failuresToPause: 2, timeoutMs: 1000 });
    await checks.start();
    onTeardown(() => checks.stop());

    const handled = new Map<string, number>();
    const attemptsSeen = new Map<string, number>();
    const outcomes: Outcome[] = [];
    let tripMoves = 0;

    let resumedAt = 0;
    let openedAt = 0;
    const consumer = await warren.consume<{ n: number; permanent?: boolean }>(
      c.name,
      async (payload, ctx) => {
        await sleep(1);
        if (payload.permanent) throw new PermanentError('no such customer');
        if (down) throw new Error('carrier unreachable');
        handled.set(ctx.messageId!, (handled.get(ctx.messageId!) ?? 0) + 1);
        attemptsSeen.set(ctx.messageId!, ctx.attempt);
      },
      {
        concurrency: 10,
        prefetch: 20,
        breaker: { health: checks, dependencies: ['carrier'], consecutiveFailures: 5, probeMs: 250, maxProbeMs: 2000 },
        onOutcome: (o) => {
          outcomes.push(o);
          if (o.kind === 'retried' && down) tripMoves++;
        },
      },
    );
    consumer.on('paused', () => (openedAt ||= Date.now()));
    consumer.on('resumed', () => (resumedAt = Date.now()));

    const ids: string[] = [];
    for (let i = 0; i < MESSAGES; i += 500) {
      const batch = await Promise.all(Array.from({ length: Math.min(500, MESSAGES - i) }, (_, j) => warren.publish('order.paid', { n: i + j })));
      ids.push(...batch.map((r) => r.messageId));
      if (i === 500) {
        const perm = await warren.publish('order.paid', { n: -1, permanent: true });
        ids.push(perm.messageId);
      }
    }
    // The outage starts with most of the stream still queued.
    await waitFor(() => handled.size >= 1000, 'a thousand handled before the outage', 60_000);
    down = true;
    const downAt = Date.now();
    await waitFor(() => !consumer.intake.consuming, 'the breaker to open', 30_000);
    const handledAtTrip = handled.size;
    const health = await warren.health();
    expect(health.ready).toBe(true);
    expect(health.reasons.find((r) => r.component === `consumer ${c.name}`)?.message).toMatch(/takes no messages \(breaker (open|half-open)/);
    await sleep(OUTAGE_MS - (Date.now() - downAt));
    // Nothing was handled while the dependency was down.
    expect(handled.size).toBe(handledAtTrip);
    const movedWhileDown = tripMoves;
    down = false;
    const upAt = Date.now();
    await waitFor(() => handled.size === MESSAGES, () => `every message handled (${handled.size} of ${MESSAGES})`, 120_000);
    const recoverMs = resumedAt - upAt;
    const drainMs = Date.now() - upAt;

    const parked = outcomes.filter((o) => o.kind === 'parked');
    const retried = outcomes.filter((o) => o.kind === 'retried');
    const burnt = [...attemptsSeen.values()].filter((a) => a > 1).length;
    const intake = consumer.intake;
    console.log(
      `[breaker ${BROKER}] outage ${OUTAGE_MS} ms: opened ${openedAt - downAt} ms after it began, moved while tripping/probing ${movedWhileDown}, ` +
        `retried in all ${retried.length}, probes ${JSON.stringify(intake.probes)}, closed ${recoverMs} ms after it ended, all ${MESSAGES} handled ${drainMs} ms after; ` +
        `handled at attempt > 1: ${burnt}; parked ${parked.length}`,
    );
    // Nothing parked for the dependency; the one permanent error parked at its first attempt.
    expect(parked.map((o) => o.kind === 'parked' && [o.reason, o.attempts])).toEqual([['permanent-error', 1]]);
    // Each message handled exactly once.
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
    expect(new Set(ids.filter((id) => handled.has(id))).size).toBe(MESSAGES);
    // A handful moved: those in flight at the trip and the failed probes.
    expect(movedWhileDown).toBeLessThanOrEqual(30);
    // No attempt burnt on the pause: only a moved message ran again.
    expect(burnt).toBeLessThanOrEqual(retried.length);
    expect(intake.consuming).toBe(true);
    expect(intake.breaker).toBe('closed');
    const raw = await rawConnection();
    for (const q of [c.queue, ...c.retryQueues]) expect(await depth(raw, q), q).toBe(0);
    const [perm] = await drain(raw, c.parkedQueue);
    expect(perm?.properties.headers?.[HEADER.parkedReason]).toBe('permanent-error');
  }, OUTAGE_MS + 180_000);

  it('a hand pause holds until resumed; the breaker never lifts it; seen in health and metrics', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('mail')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const metrics = warrenMetrics({ warren });
    onTeardown(() => metrics.close());
    let runs = 0;
    const consumer = await warren.consume(c.name, () => void runs++, { breaker: { probeMs: 50 } });
    const paused: unknown[] = [];
    consumer.on('paused', (p) => paused.push(p));
    expect(await consumer.pause('mail provider maintenance', { actor: 'alice' })).toBe(true);
    expect(await consumer.pause('again', { actor: 'alice' })).toBe(false);
    await expect(consumer.pause('')).rejects.toThrow(/reason/);
    for (let i = 0; i < 50; i++) await warren.publish('x', { i });
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) === 50, 'the 50 messages to wait in the queue');
    await sleep(500); // past many probe intervals: the breaker has nothing to lift
    expect(runs).toBe(0);
    expect(consumer.intake).toMatchObject({ consuming: false, breaker: 'closed', hand: { by: 'hand', reason: 'mail provider maintenance', actor: 'alice' } });
    const h = await warren.health();
    expect(h.ready).toBe(true);
    expect(h.reasons).toContainEqual({ component: `consumer ${c.name}`, fails: 'none', message: expect.stringMatching(/paused by hand by alice .*: mail provider maintenance\); they wait in queue/) as unknown as string });
    const s = parseScrape(await metrics.registry.metrics());
    expect(valueOf(s, 'warren_consumer_paused', { consumer: c.name, reason: 'hand' })).toBe(1);
    expect(paused).toEqual([{ consumer: c.name, by: 'hand', reason: 'mail provider maintenance', actor: 'alice', from: 'process' }]);
    expect(await consumer.resume({ actor: 'alice' })).toBe(true);
    await waitFor(() => runs === 50, () => `the 50 messages handled after the resume (${runs})`);
    expect(consumer.intake.consuming).toBe(true);
    expect(valueOf(parseScrape(await metrics.registry.metrics()), 'warren_consumer_paused', { consumer: c.name, reason: 'hand' })).toBeUndefined();
  });

  it('opens on transient failures in a row without health checks, gives back what never started, and closes on a good probe', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('flaky')]: { bindings: ['x'], retry: { delays: ['100ms'], maxAttempts: 5 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let failing = true;
    const good = new Set<number>();
    const consumer = await warren.consume<{ i: number }>(
      c.name,
      async ({ i }) => {
        await sleep(5);
        if (failing) throw new Error('database down');
        good.add(i);
      },
      { concurrency: 2, prefetch: 10, breaker: { consecutiveFailures: 3, probeMs: 100, maxProbeMs: 400 } },
    );
    for (let i = 0; i < 100; i++) await warren.publish('x', { i });
    await waitFor(() => !consumer.intake.consuming, 'the breaker to open');
    expect(consumer.intake.open).toMatchObject({ by: 'failures', reason: '3 transient failures in a row' });
    await waitFor(() => consumer.intake.probes.failure >= 2, 'two failed probes');
    failing = false;
    await waitFor(() => good.size === 100, () => `all 100 handled (${good.size})`, 20_000);
    expect(consumer.intake).toMatchObject({ consuming: true, breaker: 'closed' });
    expect(consumer.intake.probes.success).toBe(1);
    expect(consumer.stats.parked).toBe(0);
  });
});
