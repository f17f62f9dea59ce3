import { describe, expect, it } from 'vitest';
import { drain, testTopology } from '../../test/helpers.js';
import { canaryReplay, continueCanary } from './canary.js';
import { replayParked } from './operations.js';
import { declared, failures, peekIds, publishParked } from './testing/fixtures.js';

describe.each(['classic', 'quorum'] as const)('two replays of one parked queue at once (%s)', (queueType) => {
  it('each parked message is replayed once, and the two results add up to all of them', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(200));
    const [a, b] = await Promise.all([replayParked(conn, billing, { maxHeld: 50 }), replayParked(conn, billing, { maxHeld: 50 })]);
    const replayed = (await drain(conn, billing.queue)).map((m) => m.properties.messageId as string);
    const left = await peekIds(conn, billing.parkedQueue);
    // Nothing lost, nothing doubled: every id is either replayed once or still parked.
    expect([...replayed, ...left].sort()).toEqual([...ids].sort());
    expect(new Set(replayed).size).toBe(replayed.length);
    expect(a.replayed + b.replayed).toBe(replayed.length);
  });

  it('two filtered replays with a limit, over kept messages, replay only matches, each once', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(200, (i) => ({ errorClass: i % 2 === 0 ? 'TimeoutError' : 'PermanentError' })));
    const timeouts = ids.filter((_, i) => i % 2 === 0);
    const [a, b] = await Promise.all([
      replayParked(conn, billing, { filter: { errorClass: 'TimeoutError' }, limit: 40, maxHeld: 30 }),
      replayParked(conn, billing, { filter: { errorClass: 'TimeoutError' }, limit: 40, maxHeld: 30 }),
    ]);
    const replayed = (await drain(conn, billing.queue)).map((m) => m.properties.messageId as string);
    const left = await peekIds(conn, billing.parkedQueue);
    expect([...replayed, ...left].sort()).toEqual([...ids].sort());
    expect(new Set(replayed).size).toBe(replayed.length);
    expect(replayed.every((id) => timeouts.includes(id))).toBe(true);
    expect(a.replayed + b.replayed).toBe(replayed.length);
    expect(replayed.length).toBeLessThanOrEqual(80);
  });

  it('a replay stopped mid-way: its count is what reached the queue, the rest stay parked', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(100));
    const stop = new AbortController();
    const result = await replayParked(conn, billing, {
      ratePerSecond: 200,
      signal: stop.signal,
      onProgress: (p) => {
        if (p.published >= 20) stop.abort();
      },
    });
    const replayed = (await drain(conn, billing.queue)).map((m) => m.properties.messageId as string);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(result.stopReason).toBe('aborted');
    expect(result.replayed).toBe(replayed.length);
    expect(replayed.length).toBeGreaterThanOrEqual(20);
    expect(replayed.length).toBeLessThan(100);
    expect([...replayed, ...left].sort()).toEqual([...ids].sort());
    expect(new Set(replayed).size).toBe(replayed.length);
  });

  it('a canary and its continuation replay each message once', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(30));
    const canary = await canaryReplay(conn, billing, { count: 3, windowMs: 0 });
    const rest = await continueCanary(conn, billing, canary);
    const replayed = (await drain(conn, billing.queue)).map((m) => m.properties.messageId as string);
    expect(replayed.sort()).toEqual([...ids].sort());
    expect(canary.replay.replayed + rest.replayed).toBe(30);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
  });
});
