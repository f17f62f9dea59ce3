import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HEADER, InvalidOptionError, PermanentError, type IdempotencyGuard } from '../index.js';
import { connectWarren, depth, drain, rawConnection, testTopology, waitFor } from '../../test/helpers.js';

const fast = { delays: [20, 40], maxAttempts: 4 };

describe('consumer contract', () => {
  it('fails twice, then succeeds: handled three times, every queue empty', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.created'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const attempts: number[] = [];
    const consumer = await warren.consume(c.name, (_payload, ctx) => {
      attempts.push(ctx.attempt);
      if (attempts.length < 3) throw new Error(`flaky ${attempts.length}`);
    });
    const { messageId } = await warren.publish('order.created', { orderId: 1 });
    await waitFor(() => consumer.stats.acked === 1, 'the third attempt to succeed');
    expect(attempts).toEqual([1, 2, 3]);
    expect(consumer.stats).toMatchObject({ retried: 2, parked: 0, acked: 1 });
    const raw = await rawConnection();
    for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) expect(await depth(raw, q), q).toBe(0);
    expect(messageId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('parks a permanent error on the first attempt with the failure attached', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('ship')]: { bindings: ['order.*'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => {
      runs++;
      throw new PermanentError('customer 42 does not exist');
    });
    const { messageId } = await warren.publish('order.paid', { orderId: 2 });
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked');
    expect(runs).toBe(1);
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(parked?.properties.messageId).toBe(messageId);
    const h = parked!.properties.headers!;
    expect(h[HEADER.parkedReason]).toBe('permanent-error');
    expect(h[HEADER.errorClass]).toBe('PermanentError');
    expect(h[HEADER.errorMessage]).toBe('customer 42 does not exist');
    expect(String(h[HEADER.errorStack])).toMatch(/^at /);
    expect(h[HEADER.attempts]).toBe(1);
    expect(h[HEADER.consumer]).toBe(c.name);
    expect(h[HEADER.exchange]).toBe(topology.exchange);
    expect(h[HEADER.routingKey]).toBe('order.paid');
    expect(Date.parse(String(h[HEADER.firstFailedAt]))).toBeGreaterThan(0);
    expect(Date.parse(String(h[HEADER.lastFailedAt]))).toBeGreaterThan(0);
    expect(JSON.parse(parked!.content.toString())).toEqual({ orderId: 2 });
  });

  it('parks after exactly maxAttempts runs when the handler always fails', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('always')]: { bindings: ['x'], retry: { delays: [10, 20, 30], maxAttempts: 5 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => {
      runs++;
      throw new Error('carrier down');
    });
    await warren.publish('x', {});
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked');
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(runs).toBe(5);
    expect(parked?.properties.headers?.[HEADER.attempts]).toBe(5);
    expect(parked?.properties.headers?.[HEADER.parkedReason]).toBe('max-attempts');
    expect(parked?.properties.headers?.[HEADER.routingKey]).toBe('x');
    expect(consumer.stats.retried).toBe(4);
  });

  it('sends a retry back to the failing consumer only', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      consumers: { [name('fails')]: { bindings: ['order.created'], retry: fast }, [name('works')]: { bindings: ['order.created'], retry: fast } },
    }));
    const [failing, working] = [...topology.consumers.values()];
    const warren = await connectWarren(topology);
    const seen: string[] = [];
    let failures = 0;
    const f = await warren.consume(failing!.name, () => {
      failures++;
      if (failures < 3) throw new Error('not yet');
    });
    await warren.consume(working!.name, (_p, ctx) => {
      seen.push(ctx.messageId!);
    });
    const { messageId } = await warren.publish('order.created', { orderId: 3 });
    await waitFor(() => f.stats.acked === 1, 'the failing consumer to succeed on its third run');
    await new Promise((r) => setTimeout(r, 100));
    expect(seen).toEqual([messageId]);
  });

  it('does not hold a message in a short tier behind one in a long tier', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('tiers')]: { bindings: ['#'], retry: { delays: [20, 1500], maxAttempts: 6 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const log: Array<{ key: string; attempt: number; at: number }> = [];
    await warren.consume(c.name, (p: { key: string }, ctx) => {
      log.push({ key: p.key, attempt: ctx.attempt, at: Date.now() });
      if (p.key === 'slow' && ctx.attempt < 3) throw new Error('slow fails twice');
      if (p.key === 'fast' && ctx.attempt < 2) throw new Error('fast fails once');
    });
    await warren.publish('a', { key: 'slow' });
    // The slow message is now in (or on its way to) the 1500 ms tier.
    await waitFor(() => log.filter((l) => l.key === 'slow').length === 2, 'slow to fail twice');
    await warren.publish('a', { key: 'fast' });
    await waitFor(() => log.some((l) => l.key === 'slow' && l.attempt === 3), 'slow to come back from the long tier', 10_000);
    // What is asserted is the order: fast's second run (20 ms tier) came before slow's third (1500 ms tier).
    const fastBack = log.findIndex((l) => l.key === 'fast' && l.attempt === 2);
    const slowBack = log.findIndex((l) => l.key === 'slow' && l.attempt === 3);
    expect(fastBack).toBeGreaterThanOrEqual(0);
    expect(fastBack).toBeLessThan(slowBack);
  });

  it('retries a handler that times out, with the timeout as the failure', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('slow')]: { bindings: ['x'], retry: { delays: [20], maxAttempts: 2 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let aborted = 0;
    const consumer = await warren.consume(
      c.name,
      (_p, ctx) =>
        new Promise<void>((resolve) => {
          ctx.signal.addEventListener('abort', () => {
            aborted++;
            resolve();
          });
        }),
      { timeoutMs: 50 },
    );
    await warren.publish('x', {});
    await waitFor(() => consumer.stats.parked === 1, 'the hung message to be parked after two timeouts');
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(parked?.properties.headers?.[HEADER.errorClass]).toBe('HandlerTimeoutError');
    expect(aborted).toBe(2);
  });

  it('lets a classifier mark errors permanent', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('cls')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    class ValidationFailed extends Error {}
    const consumer = await warren.consume(
      c.name,
      () => {
        throw new ValidationFailed('bad postcode');
      },
      { classify: (e) => (e instanceof ValidationFailed ? 'permanent' : undefined) },
    );
    await warren.publish('x', {});
    await waitFor(() => consumer.stats.parked === 1, 'parked');
    expect(consumer.stats.retried).toBe(0);
  });
});

describe('bad input', () => {
  async function setup(options: Parameters<Awaited<ReturnType<typeof connectWarren>>['consume']>[2] = {}) {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('bad')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const runs: unknown[] = [];
    const consumer = await warren.consume(
      c.name,
      (p) => {
        runs.push(p);
      },
      options,
    );
    const raw = await rawConnection();
    const ch = await raw.createConfirmChannel();
    const send = async (content: string, props: Record<string, unknown> = {}) => {
      ch.publish(topology.exchange, 'x', Buffer.from(content), { messageId: 'm-1', ...props });
      await ch.waitForConfirms();
    };
    return { c, consumer, runs, raw, send };
  }

  it('parks a body that is not JSON on the first attempt', async () => {
    const { c, consumer, runs, raw, send } = await setup();
    await send('{"unclosed": ');
    await waitFor(() => consumer.stats.parked === 1, 'parked');
    const [m] = await drain(raw, c.parkedQueue);
    expect(m?.properties.headers?.[HEADER.parkedReason]).toBe('invalid-json');
    expect(String(m?.properties.headers?.[HEADER.errorMessage])).toMatch(/not valid JSON/);
    expect(m?.content.toString()).toBe('{"unclosed": ');
    expect(runs).toEqual([]);
  });

  it('parks a payload that fails the schema, naming the field', async () => {
    const schema = z.object({ orderId: z.number() });
    const { c, consumer, runs, raw, send } = await setup({ schema } as never);
    await send(JSON.stringify({ orderId: 'seven' }));
    await send(JSON.stringify({ orderId: 7 }), { messageId: 'm-2' });
    await waitFor(() => consumer.stats.parked === 1 && consumer.stats.acked === 1, 'one parked, one handled');
    const [m] = await drain(raw, c.parkedQueue);
    expect(m?.properties.headers?.[HEADER.parkedReason]).toBe('invalid-payload');
    expect(String(m?.properties.headers?.[HEADER.errorMessage])).toMatch(/orderId/);
    expect(runs).toEqual([{ orderId: 7 }]);
  });

  it('parks a message without id when an idempotency guard is set, and handles it otherwise', async () => {
    const guard: IdempotencyGuard<undefined> = { run: async (_id, _c, work) => (await work(undefined), 'done') };
    const guarded = await setup({ idempotency: guard } as never);
    await guarded.send('{}', { messageId: undefined });
    await waitFor(() => guarded.consumer.stats.parked === 1, 'parked');
    const [m] = await drain(guarded.raw, guarded.c.parkedQueue);
    expect(m?.properties.headers?.[HEADER.parkedReason]).toBe('missing-message-id');

    const plain = await setup();
    await plain.send('{"a":1}', { messageId: undefined });
    await waitFor(() => plain.consumer.stats.acked === 1, 'handled');
    expect(plain.runs).toEqual([{ a: 1 }]);
  });

  it('reads an unusable attempt header as a first attempt, and a huge one as at the cap', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('hdr')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const attemptsSeen = new Map<string, number[]>();
    const consumer = await warren.consume(c.name, (_p, ctx) => {
      attemptsSeen.set(ctx.messageId!, [...(attemptsSeen.get(ctx.messageId!) ?? []), ctx.attempt]);
      throw new Error('always');
    });
    const raw = await rawConnection();
    const ch = await raw.createConfirmChannel();
    const cases: Array<[string, unknown]> = [['banana', 'banana'], ['negative', -3], ['huge', 1_000_000_000], ['xdeath', undefined]];
    for (const [id, value] of cases) {
      const headers: Record<string, unknown> = value === undefined ? { 'x-death': 'not a list' } : { [HEADER.attempts]: value };
      ch.publish(topology.exchange, 'x', Buffer.from('{}'), { messageId: id, headers });
    }
    await ch.waitForConfirms();
    await waitFor(() => consumer.stats.parked === 4, 'all four parked');
    expect(attemptsSeen.get('banana')).toEqual([1, 2, 3, 4]);
    expect(attemptsSeen.get('negative')).toEqual([1, 2, 3, 4]);
    expect(attemptsSeen.get('xdeath')).toEqual([1, 2, 3, 4]);
    expect(attemptsSeen.get('huge')).toHaveLength(1);
  });

  it('cuts a megabyte of failure text to a bounded header', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('big')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(c.name, () => {
      throw new PermanentError('y'.repeat(1_000_000));
    });
    await warren.publish('x', { n: 1 });
    await waitFor(() => consumer.stats.parked === 1, 'parked');
    const [m] = await drain(await rawConnection(), c.parkedQueue);
    const text = String(m?.properties.headers?.[HEADER.errorMessage]);
    expect(text.length).toBeLessThanOrEqual(2000);
    expect(text).toMatch(/more characters cut/);
  });

  it('rejects invalid consumer options, naming the option', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('opt')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    await expect(warren.consume(c.name, () => undefined, { prefetch: 0 })).rejects.toThrow(InvalidOptionError);
    await expect(warren.consume(c.name, () => undefined, { prefetch: 5, concurrency: 6 })).rejects.toThrow(/`concurrency`.*from 1 to 5/);
    await expect(warren.consume(c.name, () => undefined, { timeoutMs: -1 })).rejects.toThrow(/`timeoutMs`/);
    await expect(warren.consume(c.name, () => undefined, { schema: {} as never })).rejects.toThrow(/`schema`/);
    await expect(warren.consume('nope', () => undefined)).rejects.toThrow(/Unknown consumer 'nope'/);
  });
});

describe('quorum queues', () => {
  it('climbs the ladder and parks at the cap, dead-lettering at least once', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('q')]: { bindings: ['x'], retry: { delays: [20, 40], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const runs: Array<{ id: string; attempt: number }> = [];
    const consumer = await warren.consume(c.name, (p: { ok: boolean }, ctx) => {
      runs.push({ id: ctx.messageId!, attempt: ctx.attempt });
      if (!p.ok || ctx.attempt < 2) throw new Error('no');
    });
    const good = await warren.publish('x', { ok: true });
    const bad = await warren.publish('x', { ok: false });
    await waitFor(() => consumer.stats.parked === 1 && consumer.stats.acked === 1, 'one parked, one acked');
    expect(runs.filter((r) => r.id === good.messageId).map((r) => r.attempt)).toEqual([1, 2]);
    expect(runs.filter((r) => r.id === bad.messageId).map((r) => r.attempt)).toEqual([1, 2, 3]);
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(parked?.properties.messageId).toBe(bad.messageId);
    expect(parked?.properties.headers?.[HEADER.attempts]).toBe(3);
  });
});

describe('outcome reporting', () => {
  it('reports the outcomes of messages that were waiting before consume() returned', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('early')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const raw = await rawConnection();
    const ch = await raw.createConfirmChannel();
    for (let i = 0; i < 50; i++) ch.sendToQueue(c.queue, Buffer.from('{}'), { messageId: `early-${i}` });
    await ch.waitForConfirms();
    const seen: string[] = [];
    const consumer = await warren.consume(c.name, () => undefined, { onOutcome: (o) => seen.push(o.messageId ?? '') });
    await waitFor(() => consumer.stats.acked === 50, 'all 50 acked');
    expect(seen).toHaveLength(50);
    expect(new Set(seen).size).toBe(50);
  });
});

describe('settling is not undone', () => {
  it('acks once when an outcome listener throws', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('lst')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => void runs++, {
      onOutcome: () => {
        throw new Error('listener bug');
      },
    });
    await warren.publish('x', { a: 1 });
    await warren.publish('x', { a: 2 });
    await waitFor(() => consumer.stats.acked === 2, 'both acked');
    await new Promise((r) => setTimeout(r, 150));
    expect(runs).toBe(2);
    expect(consumer.stats.retried).toBe(0);
    expect(consumer.attached).toBe(true);
    const raw = await rawConnection();
    for (const q of [c.queue, ...c.retryQueues]) expect(await depth(raw, q)).toBe(0);
  });

  it('starts the handler timeout when the handler starts, not while the guard waits for the database', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('wait')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    // A guard whose transaction takes 300 ms to begin, as behind a busy database.
    const slowGuard: IdempotencyGuard<undefined> = {
      run: async (_id, _c, work) => {
        await new Promise((r) => setTimeout(r, 300));
        await work(undefined);
        return 'done';
      },
    };
    const consumer = await warren.consume(c.name, () => undefined, { idempotency: slowGuard, timeoutMs: 100 });
    await warren.publish('x', {});
    await waitFor(() => consumer.stats.acked === 1, 'acked');
    expect(consumer.stats.retried).toBe(0);
  });

  it('puts never-started messages back at shutdown without marking them redelivered', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('back')]: { bindings: ['x'], retry: fast } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const started: string[] = [];
    const consumer = await warren.consume(
      c.name,
      async (_p, ctx) => {
        started.push(ctx.messageId!);
        await new Promise((r) => setTimeout(r, 200));
      },
      { prefetch: 10, concurrency: 1 },
    );
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push((await warren.publish('x', { i })).messageId);
    await waitFor(() => started.length === 1 && consumer.stats.inFlight === 1, 'the first handler to start');
    await consumer.close();
    expect(consumer.stats.acked).toBe(1);
    expect(consumer.stats.requeued).toBe(5);
    const back = await drain(await rawConnection(), c.queue);
    expect(back.map((m) => m.properties.messageId).sort()).toEqual(ids.filter((id) => id !== started[0]).sort());
    for (const m of back) {
      expect(m.fields.redelivered).toBe(false);
      expect(m.properties.headers?.[HEADER.redeliveries]).toBeUndefined();
    }
  });
});
