import { describe, expect, it } from 'vitest';
import { PermanentError } from '../errors.js';
import { HEADER } from '../headers.js';
import type { MessageContext } from '../consume/types.js';
import { connectWarren, testTopology, waitFor } from '../../test/helpers.js';
import { QueueNotFoundError } from './errors.js';
import { listParked, replayParked } from './operations.js';
import { declared, failures, fastConnection, parkedTopology, peekIds, publishParked, takeAll } from './testing/fixtures.js';
import { walkParked, type Verdict } from './reader.js';
import type { ParkedMessage } from './message.js';

describe.each(['classic', 'quorum'] as const)('replay with real consumers (%s queues)', (queueType) => {
  it('sends a parked message back to its own consumer only, same id, attempts reset', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      queueType,
      retry: { delays: [20, 40], maxAttempts: 3 },
      consumers: {
        billing: { queue: name('billing'), bindings: ['order.created'] },
        email: { queue: name('email'), bindings: ['order.created'] },
      },
    }));
    const warren = await connectWarren(topology);
    let billingBroken = true;
    const billingSeen: Array<{ id: string | undefined; attempt: number; routingKey: string; headers: Record<string, unknown> }> = [];
    const emailSeen: Array<string | undefined> = [];
    await warren.consume('billing', async (_p: unknown, ctx: MessageContext) => {
      billingSeen.push({ id: ctx.messageId, attempt: ctx.attempt, routingKey: ctx.routingKey, headers: ctx.headers });
      if (billingBroken) throw new Error(`carrier ${billingSeen.length} down`);
    });
    await warren.consume('email', async (_p: unknown, ctx: MessageContext) => {
      emailSeen.push(ctx.messageId);
    });
    const { messageId } = await warren.publish('order.created', { orderId: 42 });
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    // Three attempts, through both retry tiers, then parked.
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 1, 'the message is parked');
    expect(billingSeen.map((s) => s.attempt)).toEqual([1, 2, 3]);
    expect(emailSeen).toEqual([messageId]);

    billingBroken = false;
    const result = await replayParked(conn, billing);
    expect(result).toMatchObject({ matched: 1, replayed: 1, failed: [], targetQueue: billing.queue });
    await waitFor(() => billingSeen.length === 4, 'the replayed message reaches billing');
    const replayed = billingSeen[3];
    expect(replayed?.id).toBe(messageId);
    // The attempt count starts again: the consumer counts this as attempt 1.
    expect(replayed?.attempt).toBe(1);
    expect(replayed?.routingKey).toBe('order.created');
    expect(replayed?.headers[HEADER.replays]).toBe(1);
    expect(typeof replayed?.headers[HEADER.replayedAt]).toBe('string');
    expect(replayed?.headers[HEADER.attempts]).toBeUndefined();
    // Give a wrongly routed copy time to arrive: email must not see the message again.
    await new Promise((r) => setTimeout(r, 200));
    expect(emailSeen).toEqual([messageId]);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
  });

  it('a replayed message that fails again gets the full ladder again, and is parked with the replay count', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      queueType,
      retry: { delays: [20], maxAttempts: 2 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
    }));
    const warren = await connectWarren(topology);
    const attempts: number[] = [];
    await warren.consume('billing', async (_p: unknown, ctx: MessageContext) => {
      attempts.push(ctx.attempt);
      throw new Error('still broken');
    });
    await warren.publish('order.created', { orderId: 1 });
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 1, 'parked once');
    await replayParked(conn, billing);
    await waitFor(async () => {
      const parked = (await listParked(conn, billing)).messages;
      return parked.length === 1 && parked[0]?.replays === 1;
    }, 'parked again after the replay');
    expect(attempts).toEqual([1, 2, 1, 2]);
  });
});

describe('replay options', () => {
  function topology() {
    return testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 2 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } },
    }));
  }

  it('a dry run changes nothing and reports what would be replayed', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(6, (i) => ({ errorClass: i < 4 ? 'HttpError' : 'TypeError' })));
    const seen: string[] = [];
    const result = await replayParked(conn, billing, { dryRun: true, filter: { errorClass: 'HttpError' }, onMatch: (m) => void seen.push(m.messageId ?? '') });
    expect(result).toMatchObject({ dryRun: true, matched: 4, replayed: 0 });
    expect(seen).toEqual(ids.slice(0, 4));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
    expect(await peekIds(conn, billing.queue)).toEqual([]);
  });

  it('replays at most --limit messages, from the head, and reports progress', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(10));
    const progress: number[] = [];
    const result = await replayParked(conn, billing, { limit: 3, onProgress: (p) => void progress.push(p.matched) });
    expect(result).toMatchObject({ replayed: 3, limitReached: true, notExamined: 7, stopReason: 'stopped' });
    expect(progress).toEqual([1, 2, 3]);
    expect((await takeAll(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 3));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(3));
  });

  it('paces publishes to --rate', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    await publishParked(conn, t, billing, failures(21));
    const started = Date.now();
    const result = await replayParked(conn, billing, { ratePerSecond: 50 });
    const elapsed = Date.now() - started;
    expect(result.replayed).toBe(21);
    // 21 publishes at 50/s: the last one leaves 400 ms after the first, never sooner. How
    // much later depends on the machine's load (a late publish is not made up by a burst),
    // so the upper bounds only catch a pacing that is wildly slow.
    expect(elapsed).toBeGreaterThanOrEqual(390);
    expect(elapsed).toBeLessThan(5000);
    expect(result.ratePerSecond).toBeGreaterThan(20);
    expect(result.ratePerSecond).toBeLessThan(52);
  });

  it('stops when the signal is aborted, keeping what it did not replay', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(50));
    const controller = new AbortController();
    const result = await replayParked(conn, billing, {
      ratePerSecond: 200,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.published === 5) controller.abort();
      },
    });
    expect(result.stopReason).toBe('aborted');
    expect(result.replayed).toBe(5);
    expect((await takeAll(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 5));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(5));
  });

  it('refuses to replay to a work queue that does not exist, leaving the parked queue as it was', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(3));
    const ch = await conn.createChannel();
    await ch.deleteQueue(billing.queue);
    await ch.close();
    await expect(replayParked(conn, billing)).rejects.toThrow(QueueNotFoundError);
    await expect(replayParked(conn, billing)).rejects.toThrow(new RegExp(`Queue '${billing.queue.replace(/\./g, '\\.')}' does not exist`));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });

  it('keeps messages whose replay came back unroutable, each parked once', async () => {
    const t = topology();
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(5));
    // Delete the work queue after the first replay, as if someone removed it mid-way
    // (the pace leaves time for the deletion before the next publish).
    let deleted: Promise<void> | undefined;
    const result = await replayParked(conn, billing, {
      onProgress: (p) => {
        if (p.published === 1) {
          deleted = (async () => {
            const ch = await conn.createChannel();
            await ch.deleteQueue(billing.queue);
            await ch.close();
          })();
        }
      },
      ratePerSecond: 20,
    });
    await deleted;
    expect(result.replayed + result.failed.length + result.kept + result.notExamined).toBe(5);
    expect(result.failed.length).toBeGreaterThanOrEqual(1);
    expect(result.stopReason).toBe('unroutable');
    // A returned copy's original is parked again at the back: each message is still parked once.
    const left = await peekIds(conn, billing.parkedQueue);
    expect([...left].sort()).toEqual(ids.slice(result.replayed));
  });
});

describe('replay of a message parked with a PermanentError', () => {
  it('parks on the first attempt, replays, and succeeds once fixed', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 5 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
    }));
    const warren = await connectWarren(topology);
    let fixed = false;
    const done: unknown[] = [];
    await warren.consume('billing', async (payload: { orderId: number }) => {
      if (!fixed) throw new PermanentError(`customer for order ${payload.orderId} does not exist`);
      done.push(payload);
    });
    await warren.publish('order.created', { orderId: 7 });
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 1, 'parked');
    const [m] = (await listParked(conn, billing)).messages;
    expect(m).toMatchObject({ errorClass: 'PermanentError', errorMessage: 'customer for order 7 does not exist', attempts: 1, reason: 'permanent-error' });
    fixed = true;
    await replayParked(conn, billing);
    await waitFor(() => done.length === 1, 'handled after the replay');
    expect(done).toEqual([{ orderId: 7 }]);
  });
});

describe.each(['classic', 'quorum'] as const)('a move the broker returns (%s queue)', (queueType) => {
  // Every message moves; the fifth to a queue that does not exist. The walk learns of the
  // return at its commit, while it examines what comes next: what it decided since is
  // not applied, and those messages stay parked, not examined.
  it.each([1, 10])('stops at the first returned move: nothing after its commit is moved (maxInFlight %i)', async (maxInFlight) => {
    const t = parkedTopology(queueType);
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(40));
    const to = (m: ParkedMessage, queue: string): Verdict => ({ action: 'move', to: { exchange: '', routingKey: queue, content: m.content, properties: { messageId: m.messageId ?? '' } } });
    const result = await walkParked(conn, billing.parkedQueue, (m) => to(m, m.position === 5 ? `${billing.queue}.missing` : billing.queue), { queueType, maxInFlight });
    expect(result.stopReason).toBe('unroutable');
    expect(result.failed.map((f) => f.messageId)).toEqual([ids[4]]);
    expect(result.moved + result.failed.length + result.kept + result.notExamined).toBe(40);
    expect(result.scanned).toBe(result.moved + result.failed.length + result.kept);
    const moved = await peekIds(conn, billing.queue);
    // Only messages committed before or with the returned move reached the work queue.
    expect(moved).toEqual([...ids.slice(0, 4), ...ids.slice(5, 5 + result.moved - 4)]);
    if (maxInFlight === 1) expect(result.moved).toBe(4);
    expect(result.moved).toBeLessThan(maxInFlight + 4);
    const left = await peekIds(conn, billing.parkedQueue);
    const rest = ids.slice(5 + result.moved - 4);
    expect(left).toEqual(queueType === 'classic' ? [...rest, ids[4]] : [ids[4], ...rest]);
  });

  // One change per commit, and ten: the returned move then shares its commit with kept
  // messages before and after it.
  it.each([1, 10])('parks the original again where its error says (maxInFlight %i)', async (maxInFlight) => {
    const t = parkedTopology(queueType);
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(40));
    // The fifth message goes to a queue that does not exist; the others are kept.
    const result = await walkParked(
      conn,
      billing.parkedQueue,
      (m): Verdict => (m.position === 5 ? { action: 'move', to: { exchange: '', routingKey: `${billing.queue}.missing`, content: m.content, properties: { messageId: m.messageId ?? '' } } } : { action: 'keep' }),
      { queueType, maxInFlight },
    );
    expect(result.stopReason).toBe('unroutable');
    expect(result.failed.map((f) => f.messageId)).toEqual([ids[4]]);
    const left = await peekIds(conn, billing.parkedQueue);
    if (queueType === 'classic') {
      // Kept and unexamined messages go back in place; the returned one is published at the back.
      expect(result.failed[0]?.error).toMatch(/it is parked again, at the back of the queue$/);
      expect(left).toEqual([...ids.slice(0, 4), ...ids.slice(5), ids[4]]);
    } else {
      // Kept messages are copied to the back in order, the returned one in its place
      // among them, then the rest the walk did not reach: the order is as before.
      expect(result.failed[0]?.error).toMatch(/it is parked again in its place, the queue in its order$/);
      expect(left).toEqual(ids);
    }
  });
});
