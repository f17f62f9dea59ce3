import { describe, expect, it } from 'vitest';
import { PermanentError } from '../errors.js';
import type { MessageContext } from '../consume/types.js';
import { connectWarren, depth, testTopology, waitFor } from '../../test/helpers.js';
import { harness } from '../store/testing/harness.js';
import { canaryReplay, continueCanary, ladderMs } from './canary.js';
import { groupParked } from './message.js';
import { listParked } from './operations.js';
import { declared, failures, fastConnection, peekIds, publishParked } from './testing/fixtures.js';

describe('ladderMs', () => {
  it('adds the tier each failed attempt waits in, the last tier repeating', () => {
    expect(ladderMs([100, 200], 4)).toBe(100 + 200 + 200);
    expect(ladderMs([100, 200, 300], 2)).toBe(100);
    expect(ladderMs([], 5)).toBe(0);
  });
});

/**
 * Ten messages parked by a failing `billing`, while `email`, bound to the same key, took
 * each once. Returns what the two handlers saw, and a switch that fixes billing.
 */
async function parkedGroup(queueType: 'classic' | 'quorum', consumeOptions: object = {}) {
  const topology = testTopology(({ exchange, name }) => ({
    exchange,
    queueType,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: {
      billing: { queue: name('billing'), bindings: ['order.created'] },
      email: { queue: name('email'), bindings: ['order.created'] },
    },
  }));
  const warren = await connectWarren(topology);
  const state: { broken: boolean; onFail?: (() => void) | undefined } = { broken: true };
  const billingSeen: string[] = [];
  const billingDone: string[] = [];
  const emailSeen: string[] = [];
  await warren.consume(
    'billing',
    async (_p: unknown, ctx: MessageContext<unknown>) => {
      billingSeen.push(ctx.messageId ?? '');
      if (state.broken) {
        state.onFail?.();
        throw new PermanentError(`carrier ${billingSeen.length} rejected the order`);
      }
      billingDone.push(ctx.messageId ?? '');
    },
    consumeOptions as never,
  );
  await warren.consume('email', async (_p: unknown, ctx: MessageContext) => void emailSeen.push(ctx.messageId ?? ''));
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) ids.push((await warren.publish('order.created', { orderId: i })).messageId);
  const conn = await fastConnection();
  const billing = topology.consumer('billing');
  await waitFor(async () => (await listParked(conn, billing)).messages.length === 10, 'ten messages parked');
  await waitFor(() => emailSeen.length === 10, 'email took all ten');
  const groups = groupParked((await listParked(conn, billing)).messages);
  expect(groups).toHaveLength(1);
  // A listing's copies go back to a quorum queue asynchronously after its channel
  // closes; the canaries are the first matching messages only once all ten are back.
  await waitFor(async () => (await depth(conn, billing.parkedQueue)) === 10, 'all ten back in the parked queue');
  return { topology, conn, billing, state, ids, billingSeen, billingDone, emailSeen, fingerprint: (groups[0] as { fingerprint: string }).fingerprint };
}

describe.each(['classic', 'quorum'] as const)('canaryReplay (%s queues)', (queueType) => {
  it('canaries of a fixed handler succeed; continuing replays the rest to the failing consumer only', async () => {
    const g = await parkedGroup(queueType);
    g.state.broken = false;
    const outcomes: string[] = [];
    const canary = await canaryReplay(g.conn, g.billing, { filter: { fingerprint: g.fingerprint }, count: 3, windowMs: 1500, pollMs: 100, onOutcome: (c) => void outcomes.push(c.outcome) });
    expect(canary).toMatchObject({ verdict: 'succeeded', succeeded: 3, failed: 0, remaining: 7 });
    expect(canary.canaries.map((c) => c.messageId)).toEqual(g.ids.slice(0, 3));
    expect(canary.canaries.every((c) => c.evidence === 'window')).toBe(true);
    expect(outcomes).toEqual(['succeeded', 'succeeded', 'succeeded']);
    expect(g.billingDone.sort()).toEqual(g.ids.slice(0, 3).sort());
    expect(await peekIds(g.conn, g.billing.parkedQueue)).toEqual(g.ids.slice(3));
    // The peek's copies go back to a quorum queue asynchronously after its channel closes;
    // a walk that starts before they are back ends at the empty head and leaves them parked.
    await waitFor(async () => {
      const ch = await g.conn.createChannel();
      try {
        return (await ch.checkQueue(g.billing.parkedQueue)).messageCount === 7;
      } finally {
        await ch.close();
      }
    }, 'the seven back in the parked queue');

    const rest = await continueCanary(g.conn, g.billing, canary, { ratePerSecond: 200 });
    expect(rest).toMatchObject({ replayed: 7, failed: [] });
    await waitFor(() => g.billingDone.length === 10, 'billing handled all ten');
    expect(await peekIds(g.conn, g.billing.parkedQueue)).toEqual([]);
    expect([...g.billingDone].sort()).toEqual([...g.ids].sort());
    // Each id once in billing's successes, and email never got a replayed copy.
    expect(new Set(g.billingDone).size).toBe(10);
    await new Promise((r) => setTimeout(r, 200));
    expect(g.emailSeen.sort()).toEqual([...g.ids].sort());
  });

  it('canaries of a handler that still fails come back: verdict failed, the rest stay parked, nothing lost or duplicated', async () => {
    const g = await parkedGroup(queueType);
    const canary = await canaryReplay(g.conn, g.billing, { filter: { fingerprint: g.fingerprint }, count: 3, windowMs: 20_000, pollMs: 100 });
    expect(canary).toMatchObject({ verdict: 'failed', succeeded: 0, failed: 3, remaining: 7 });
    expect(canary.canaries.map((c) => c.evidence)).toEqual(['parked-again', 'parked-again', 'parked-again']);
    expect(canary.canaries[0]?.error).toMatch(/^PermanentError: carrier \d+ rejected the order$/);
    // Decided as soon as they came back, well before the window's end.
    expect(canary.elapsedMs).toBeLessThan(20_000);
    const parked = (await listParked(g.conn, g.billing)).messages;
    expect(parked.map((m) => m.messageId).sort()).toEqual([...g.ids].sort());
    expect(parked.filter((m) => m.replays === 1).map((m) => m.messageId).sort()).toEqual(g.ids.slice(0, 3).sort());
    expect(g.billingDone).toEqual([]);
    await new Promise((r) => setTimeout(r, 200));
    expect(g.emailSeen.sort()).toEqual([...g.ids].sort());

    // Continuing anyway replays the seven, not the canaries that failed.
    g.state.broken = false;
    const rest = await continueCanary(g.conn, g.billing, canary);
    expect(rest.replayed).toBe(7);
    await waitFor(() => g.billingDone.length === 7, 'billing handled the seven');
    expect(g.billingDone.sort()).toEqual(g.ids.slice(3).sort());
    expect((await peekIds(g.conn, g.billing.parkedQueue)).sort()).toEqual(g.ids.slice(0, 3).sort());
  });
});

describe('canaryReplay options', () => {
  it('an idempotency marker proves success before the window ends', async () => {
    const h = await harness('sqlite');
    const store = h.store();
    const g = await parkedGroup('classic', { idempotency: store.idempotency() });
    g.state.broken = false;
    const canary = await canaryReplay(g.conn, g.billing, { filter: { fingerprint: g.fingerprint }, count: 2, windowMs: 60_000, pollMs: 50, processed: store });
    expect(canary).toMatchObject({ verdict: 'succeeded', succeeded: 2, remaining: 8 });
    expect(canary.canaries.map((c) => c.evidence)).toEqual(['processed', 'processed']);
    expect(canary.elapsedMs).toBeLessThan(60_000);
  });

  it('nothing matching: an empty verdict, nothing replayed', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(4));
    const canary = await canaryReplay(conn, billing, { filter: { fingerprint: 'NoSuchError: nothing' }, windowMs: 100 });
    expect(canary).toMatchObject({ verdict: 'empty', canaries: [], remaining: 0 });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });

  it('refuses a bad count or window, naming the option', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const conn = await declared(t);
    await expect(canaryReplay(conn, t.consumer('billing'), { count: 0 })).rejects.toThrow(/count/);
    await expect(canaryReplay(conn, t.consumer('billing'), { windowMs: -1 })).rejects.toThrow(/windowMs/);
  });
});

describe('canaryReplay on a parked queue longer than maxHeld (classic)', () => {
  it('a canary that parks again past what the browse can hold is not called a success', async () => {
    const g = await parkedGroup('classic');
    // The handler still fails: the canary parks again at the tail, behind nine others.
    // With maxHeld 5 (10,000 by default: a parked queue that long is an ordinary
    // incident), the canary's browse never reaches the tail.
    const canary = await canaryReplay(g.conn, g.billing, { filter: { fingerprint: g.fingerprint }, count: 1, maxHeld: 5, windowMs: 2000, pollMs: 100 });
    const parked = (await listParked(g.conn, g.billing)).messages;
    expect(parked.filter((m) => m.replays === 1).map((m) => m.messageId)).toEqual([g.ids[0]]);
    expect(g.billingDone).toEqual([]);
    // It failed again; the window's end is no evidence of success when the browse was cut short.
    expect(canary).toMatchObject({ verdict: 'unknown', succeeded: 0 });
    expect(canary.canaries.map((c) => [c.outcome, c.evidence])).toEqual([['unknown', 'not-examined']]);
  });
});

describe('canaryReplay while another consumer holds parked messages (classic)', () => {
  it('a canary that parks again into another consumer\'s hands is not called a success', async () => {
    const g = await parkedGroup('classic');
    // The canary fails again, and as it does, another reader of the parked queue starts
    // and takes everything there, the canary too once it is parked again.
    const other = await g.conn.createChannel();
    let held = 0;
    g.state.onFail = () => {
      g.state.onFail = undefined;
      void other.consume(g.billing.parkedQueue, () => void (held += 1), { noAck: false });
    };
    const canary = await canaryReplay(g.conn, g.billing, { filter: { fingerprint: g.fingerprint }, count: 1, windowMs: 1500, pollMs: 100 });
    await waitFor(() => held === 10, 'the other reader to hold all ten');
    expect(canary).toMatchObject({ verdict: 'unknown', succeeded: 0 });
    expect(canary.canaries.map((c) => [c.outcome, c.evidence])).toEqual([['unknown', 'not-examined']]);
    await other.close();
    await waitFor(async () => (await depth(g.conn, g.billing.parkedQueue)) === 10, 'the other reader to give the ten back');
    expect(g.billingDone).toEqual([]);
  });
});

describe('a canary that parks again while the rest is being replayed', () => {
  it.each(['classic', 'quorum'] as const)('is not replayed a second time by continueCanary (%s)', async (queueType) => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const warren = await connectWarren(topology);
    const gate = { open: false, release: () => {} };
    const held = new Promise<void>((r) => (gate.release = r));
    const seen: string[] = [];
    let broken = true;
    let canaryParkedAgain = false;
    const onOutcome = (o: { kind: string; messageId?: string | undefined; attempts?: number }) => {
      if (o.kind === 'parked' && o.messageId === canaryId && !broken) canaryParkedAgain = true;
    };
    await warren.consume('billing', async (_p: unknown, ctx: MessageContext<unknown>) => {
      seen.push(ctx.messageId ?? '');
      if (broken) throw new PermanentError('carrier rejected the order');
      if ((ctx.headers['warren-replays'] ?? 0) !== 0 && ctx.messageId === canaryId) {
        // The canary's second run is held until the continuation has begun, then fails.
        await held;
        throw new PermanentError('still rejected');
      }
    }, { onOutcome } as never);
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push((await warren.publish('order.created', { orderId: i })).messageId);
    const canaryId = ids[0];
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 30, 'thirty parked');
    broken = false;
    // A short window: the canary is still running (held) when it ends, so it counts as succeeded.
    const canary = await canaryReplay(conn, billing, { count: 1, windowMs: 100, pollMs: 50 });
    expect(canary.canaries.map((c) => c.outcome)).toEqual(['succeeded']);
    let parkedAgainDuring = false;
    const rest = await continueCanary(conn, billing, canary, {
      ratePerSecond: 10,
      onProgress: (p) => {
        if (p.published === 1) gate.release();
        if (p.published === 25) parkedAgainDuring = canaryParkedAgain;
      },
    });
    // The canary was parked again while the continuation was still walking the queue.
    expect(parkedAgainDuring).toBe(true);
    await waitFor(() => seen.length >= 30 + 1 + 29, 'the rest handled');
    await waitFor(async () => (await peekIds(conn, billing.parkedQueue)).length === 1, 'the canary parked again');
    // The canary ran twice: its first failure and the canary run. Not a third time.
    expect(rest.replayed).toBe(29);
    await new Promise((r) => setTimeout(r, 300));
    expect(seen.filter((id) => id === canaryId)).toHaveLength(2);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([canaryId]);
  });
});
