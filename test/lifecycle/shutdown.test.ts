import { describe, expect, it } from 'vitest';
import { ClosedError } from '../../src/index.js';
import { connectWarren, depth, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

describe('graceful shutdown with work in flight', () => {
  it('close() lets running handlers finish, requeues the rest, and a later consumer handles exactly what is left', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('slow')]: { bindings: ['work'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const raw = await rawConnection();
    const first = await connectWarren(topology);
    const N = 20;
    const published: string[] = [];
    for (let i = 0; i < N; i++) published.push((await first.publish('work', { i })).messageId);

    const started: string[] = [];
    const finished: string[] = [];
    const handledBy = new Map<string, string[]>();
    const handler = (who: string) => async (_p: unknown, ctx: { messageId: string | undefined }) => {
      const id = ctx.messageId!;
      started.push(id);
      await sleep(100);
      finished.push(id);
      handledBy.set(id, [...(handledBy.get(id) ?? []), who]);
    };
    const consumer = await first.consume(c.name, handler('first'), { prefetch: 10, concurrency: 2 });
    await waitFor(() => started.length >= 3, 'a few handlers to start');
    // Two run, eight more wait in the prefetch buffer: close now.
    await first.close();
    const ranFirst = [...started];

    // Every handler that started finished before close() returned, and was acked.
    expect(finished).toEqual(ranFirst);
    expect(consumer.stats.inFlight).toBe(0);
    expect(consumer.stats.acked).toBe(ranFirst.length);
    expect(ranFirst.length).toBeLessThan(N);
    // The rest went back to the queue, ready (the channel is closed, nothing unacked).
    expect(await depth(raw, c.queue)).toBe(N - ranFirst.length);
    expect(consumer.stats.requeued).toBeGreaterThan(0);

    const second = await connectWarren(topology);
    const later = await second.consume(c.name, handler('second'), { prefetch: 10, concurrency: 5 });
    await waitFor(() => handledBy.size === N, `every message to be handled (${handledBy.size}/${N})`);
    await waitFor(() => later.stats.inFlight === 0 && later.stats.acked === N - ranFirst.length, 'the second consumer to be idle');
    await sleep(50);

    // The union of both is the published set, and no message ran twice.
    expect([...handledBy.keys()].sort()).toEqual([...published].sort());
    const twice = [...handledBy].filter(([, who]) => who.length > 1);
    expect(twice).toEqual([]);
    expect(started).toHaveLength(N);
    expect(ranFirst.every((id) => handledBy.get(id)?.[0] === 'first')).toBe(true);
    expect(later.stats.parked).toBe(0);
    await second.close();
    expect(await depth(raw, c.queue)).toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
  });

  it('past shutdownTimeoutMs, close() aborts the running handlers\' signals and their messages go back to the queue', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('stuck')]: { bindings: ['work'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const raw = await rawConnection();
    const a = await warren.publish('work', { who: 'reads the signal first' });
    const b = await warren.publish('work', { who: 'reads the signal late' });
    const aborted = new Map<string, unknown>();
    const release: Array<() => void> = [];
    const consumer = await warren.consume(c.name, async (_p, ctx) => {
      const id = ctx.messageId!;
      if (id === a.messageId) {
        // Listens from the start, as a handler passing the signal to fetch() would.
        await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
        aborted.set(id, ctx.signal.reason);
      } else {
        // First looks at the signal only after close() has given up on it.
        await new Promise<void>((resolve) => release.push(resolve));
        if (ctx.signal.aborted) aborted.set(id, ctx.signal.reason);
      }
    }, { prefetch: 2, concurrency: 2, shutdownTimeoutMs: 50 });
    await waitFor(() => consumer.stats.inFlight === 2 && release.length === 1, 'both handlers to start');

    const started = Date.now();
    await warren.close();
    expect(Date.now() - started).toBeLessThan(2000);
    for (const r of release) r();
    await waitFor(() => aborted.size === 2, 'both handlers to see the abort');
    expect(aborted.get(a.messageId)).toBeInstanceOf(ClosedError);
    expect(aborted.get(b.messageId)).toBeInstanceOf(ClosedError);
    // Neither was acked: the closed channel returned both to the queue.
    expect(consumer.stats.acked).toBe(0);
    await waitFor(async () => (await depth(raw, c.queue)) === 2, 'both messages to be back in the queue');
  });
});
