/**
 * Two replays of the same rows at once, against the real broker and both databases: a
 * row's claim must hold for as long as its replay may still send it, so the other replay
 * never sends it too (each message handled once, without an idempotency guard to hide a
 * second copy).
 */
import { describe, expect, it, vi } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../../test/helpers.js';
import { PermanentError } from '../errors.js';
import type { MessageContext } from '../consume/types.js';
import { declared } from '../park/testing/fixtures.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { Archive } from './archive.js';

vi.setConfig({ testTimeout: 120_000 });

describe.each(BACKENDS)('archive replays at once: %s', (backend) => {
  it('two replays of the same group started together: every row sent by one of them, once', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 1 }, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology, { archive: { store, batchSize: 50, maxBatchDelayMs: 5 } });
    const failing = { on: true };
    const handled = new Map<string, number>();
    await warren.consume('billing', async (_p: { n: number }, ctx: MessageContext<unknown>) => {
      if (failing.on) throw new PermanentError('carrier down');
      const id = ctx.messageId as string;
      handled.set(id, (handled.get(id) ?? 0) + 1);
    }, { concurrency: 10 });
    const conn = await declared(topology);
    const archive = new Archive(store);
    const rows = 300;
    await Promise.all(Array.from({ length: rows }, (_, n) => warren.publish('order.created', { n })));
    await waitFor(async () => (await archive.count({ consumer: 'billing' })) === rows, 'the failures are archived', 30_000);
    failing.on = false;
    const target = topology.consumer('billing');
    const [a, b] = await Promise.all(['alice', 'bob'].map((actor) => archive.replay(conn, target, { filter: { consumer: 'billing' }, actor, batchSize: 20 })));
    await waitFor(() => handled.size === rows, 'every message handled', 30_000);
    await new Promise((r) => setTimeout(r, 500));
    expect({ replayed: (a?.replayed ?? 0) + (b?.replayed ?? 0), handledTwice: [...handled.values()].filter((n) => n > 1).length }).toEqual({ replayed: rows, handledTwice: 0 });
    expect(await archive.count({ consumer: 'billing', states: ['replayed'] })).toBe(rows);
  });

  it.each([
    { rows: 30, rate: 10 },
    { rows: 3, rate: 0.5 },
  ])('a replay paced slower than its claim lasts ($rows rows at $rate a second, 1 s claims): the other replay sends none of its rows again', async ({ rows, rate }) => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 1 }, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology, { archive: { store, batchSize: 20, maxBatchDelayMs: 5 } });
    const failing = { on: true };
    const handled = new Map<string, number>();
    await warren.consume('billing', async (_p: { n: number }, ctx: MessageContext<unknown>) => {
      if (failing.on) throw new PermanentError('carrier down');
      const id = ctx.messageId as string;
      handled.set(id, (handled.get(id) ?? 0) + 1);
    });
    const conn = await declared(topology);
    const archive = new Archive(store);
    const receipts = await Promise.all(Array.from({ length: rows }, (_, n) => warren.publish('order.created', { n })));
    await waitFor(async () => (await archive.count({ consumer: 'billing' })) === rows, 'the failures are archived', 20_000);
    failing.on = false;
    const target = topology.consumer('billing');
    // Paced, the first replay takes several seconds over rows it claims for 1 s at a time.
    const first = archive.replay(conn, target, { filter: { consumer: 'billing' }, actor: 'alice', ratePerSecond: rate, leaseMs: 1000 });
    await new Promise((r) => setTimeout(r, 1500));
    const second = await archive.replay(conn, target, { filter: { consumer: 'billing' }, actor: 'bob', leaseMs: 1000 });
    const one = await first;
    await waitFor(() => handled.size === rows, 'every message handled', 20_000);
    await new Promise((r) => setTimeout(r, 500));
    const twice = [...handled.values()].filter((n) => n > 1).length;
    expect({ replayed: one.replayed + second.replayed, handledTwice: twice }).toEqual({ replayed: rows, handledTwice: 0 });
    expect(new Set(handled.keys())).toEqual(new Set(receipts.map((r) => r.messageId)));
  });
});
