/**
 * The idempotency guard inside a real consumer, over every backend, against a real
 * broker: duplicates, handler failures, database outages, two processes at once, and a
 * process killed between commit and ack.
 */
import { describe, expect, it } from 'vitest';
import type { TopologyOptions } from '../index.js';
import { AMQP_URL, connectWarren, depth, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from './testing/harness.js';
import { bumpEffect, createEffects, readEffects, type AnyStore, type StoreSpec } from './testing/spec.js';
import { spawnChild } from './testing/spawn.js';
import { sleep } from './options.js';

/** A topology with one consumer on `order.*` and a 50 ms retry tier; its options too, for child processes. */
function setup(): { options: TopologyOptions; topology: ReturnType<typeof testTopology>; consumer: string } {
  let options!: TopologyOptions;
  let consumer!: string;
  const topology = testTopology(({ exchange, name }) => {
    consumer = name('billing');
    options = { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 5 } } } };
    return options;
  });
  return { options, topology, consumer };
}

async function allOnce(spec: StoreSpec, store: AnyStore, ids: readonly string[]): Promise<void> {
  const effects = await readEffects(spec, store);
  expect([...effects.keys()].sort()).toEqual([...ids].sort());
  expect([...effects.values()].every((n) => n === 1)).toBe(true);
}

describe.each(BACKENDS)('idempotent consumer: %s', (backend) => {
  it('acks a message delivered twice without running the handler again, and counts the duplicate', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const guard = store.idempotency();
    const consumer = await warren.consume(name, async (_p: unknown, ctx) => void (await bumpEffect(h.spec, ctx.tx, ctx.messageId as string)), { idempotency: guard });
    await warren.publish('order.created', { n: 1 }, { messageId: 'dup-1' });
    await warren.publish('order.created', { n: 1 }, { messageId: 'dup-1' });
    await waitFor(() => consumer.stats.acked + consumer.stats.duplicate === 2, 'both deliveries settled');
    expect(consumer.stats).toMatchObject({ acked: 1, duplicate: 1, retried: 0, parked: 0 });
    expect(guard.stats).toMatchObject({ done: 1, duplicate: 1 });
    await allOnce(h.spec, store, ['dup-1']);
    expect(await depth(await rawConnection(), topology.consumer(name).queue)).toBe(0);
  });

  it('rolls the marker back when the handler fails after writing; the retry runs it again and the effect happens once', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const runs: number[] = [];
    const consumer = await warren.consume(
      name,
      async (_p: unknown, ctx) => {
        runs.push(ctx.attempt);
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        if (ctx.attempt === 1) throw new Error('the payment provider timed out');
      },
      { idempotency: store.idempotency() },
    );
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.acked === 1, 'the retry succeeded');
    expect(runs).toEqual([1, 2]);
    expect(consumer.stats).toMatchObject({ retried: 1, duplicate: 0, parked: 0 });
    await allOnce(h.spec, store, [messageId]);
  });

  it('holds a message unacked while the database is down, then handles it once it is back; nothing lost, no attempt counted', async () => {
    const h = await harness(backend);
    const { store, down, up } = await h.outage();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const guard = store.idempotency();
    const consumer = await warren.consume(name, async (_p: unknown, ctx) => void (await bumpEffect(h.spec, ctx.tx, ctx.messageId as string)), { idempotency: guard });
    await down();
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => guard.stats.unavailable >= 2, 'the guard to be refused twice');
    expect(consumer.stats).toMatchObject({ acked: 0, retried: 0, parked: 0, inFlight: 1 });
    await up();
    await waitFor(() => consumer.stats.acked === 1, 'the held message to be handled', 15_000);
    expect(consumer.stats).toMatchObject({ retried: 0, parked: 0, duplicate: 0 });
    await allOnce(h.spec, store, [messageId]);
  });

  it('survives the database going away in the middle of a run: every message handled exactly once', async () => {
    const h = await harness(backend);
    const { store, down, up } = await h.outage();
    await createEffects(h.spec, store);
    const { topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const guard = store.idempotency();
    const consumer = await warren.consume(
      name,
      async (_p: unknown, ctx) => {
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        await sleep(1);
      },
      { idempotency: guard, prefetch: 20, concurrency: 10 },
    );
    const ids: string[] = [];
    const publish = async (n: number) => {
      for (let i = 0; i < n; i++) ids.push((await warren.publish('order.created', { i })).messageId);
    };
    await publish(100);
    await waitFor(() => consumer.stats.acked >= 40, 'some messages handled');
    await down();
    // Messages keep arriving while the database is away.
    await publish(100);
    await sleep(200);
    await up();
    await waitFor(() => consumer.stats.acked + consumer.stats.duplicate === 200, 'every message settled', 20_000);
    expect(consumer.stats).toMatchObject({ retried: 0, parked: 0 });
    // The outage was felt: some runs were refused (and held), none lost or doubled.
    expect(guard.stats.unavailable).toBeGreaterThan(0);
    await allOnce(h.spec, store, ids);
  });

  it('runs the side effect once when two consumer processes get the same message at the same moment', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    await store.migrate();
    const { options, topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const env = {
      WARREN_STORE: JSON.stringify({ spec: h.spec }),
      WARREN_CHILD_ROLE: 'consume',
      WARREN_AMQP_URL: AMQP_URL,
      WARREN_TOPOLOGY: JSON.stringify(options),
      WARREN_CONSUMER: name,
      WARREN_HANDLER_MS: '100',
    };
    const children = [spawnChild(env), spawnChild(env)];
    await Promise.all(children.map((c) => c.line('ready')));
    // Each id twice in a row: with prefetch 1, one copy goes to each process at once.
    const ids = Array.from({ length: 8 }, (_, i) => `same-${i}`);
    for (const id of ids) {
      await warren.publish('order.created', {}, { messageId: id });
      await warren.publish('order.created', {}, { messageId: id });
    }
    const outcomes = () => children.flatMap((c) => c.lines.filter((l) => l.startsWith('outcome ')));
    await waitFor(() => outcomes().length === 16, 'all 16 deliveries settled', 20_000);
    expect(outcomes().filter((l) => l.startsWith('outcome acked')).length).toBe(8);
    expect(outcomes().filter((l) => l.startsWith('outcome duplicate')).length).toBe(8);
    // Both processes took part.
    expect(children.every((c) => c.lines.some((l) => l.startsWith('outcome ')))).toBe(true);
    await allOnce(h.spec, store, ids);
  });

  it('skips and acks the redelivery of a message whose process was killed between commit and ack', async () => {
    const h = await harness(backend);
    const store = h.store();
    await createEffects(h.spec, store);
    const { options, topology, consumer: name } = setup();
    const warren = await connectWarren(topology);
    const child = spawnChild({
      WARREN_STORE: JSON.stringify({ spec: h.spec }),
      WARREN_CHILD_ROLE: 'consume',
      WARREN_AMQP_URL: AMQP_URL,
      WARREN_TOPOLOGY: JSON.stringify(options),
      WARREN_CONSUMER: name,
      WARREN_CRASH: 'after-commit',
    });
    await child.line('ready');
    const { messageId } = await warren.publish('order.created', {});
    await child.line(`committed ${messageId}`);
    expect(await child.exited).toBe('SIGKILL');
    await allOnce(h.spec, store, [messageId]);
    // A fresh consumer gets the redelivery: the marker is there, so it acks without running the handler.
    let ran = 0;
    const consumer = await warren.consume(name, async () => void ran++, { idempotency: store.idempotency() });
    await waitFor(() => consumer.stats.duplicate === 1, 'the redelivery to be acked as a duplicate');
    expect(ran).toBe(0);
    expect(consumer.stats).toMatchObject({ acked: 0, retried: 0, parked: 0 });
    await allOnce(h.spec, store, [messageId]);
    expect(await depth(await rawConnection(), topology.consumer(name).queue)).toBe(0);
  });
});
