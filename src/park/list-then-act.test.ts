import { describe, expect, it } from 'vitest';
import { testTopology } from '../../test/helpers.js';
import { listParked, replayParked } from './operations.js';
import { declared, failures, peekIds, publishParked } from './testing/fixtures.js';

/**
 * A listing of a classic parked queue holds every message it reads until it ends. What it
 * held must be back in the queue, in place, when it returns: an operation started at once
 * (an operator's replay right after a look) must find every message.
 */
describe('a classic parked queue right after a listing', () => {
  it('holds every message again, in order, the moment the listing returns', async () => {
    const t = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const billing = t.consumer('billing');
    const conn = await declared(t);
    const ids = await publishParked(conn, t, billing, failures(40));
    for (let round = 0; round < 5; round++) {
      expect((await listParked(conn, billing)).messages.map((m) => m.messageId)).toEqual(ids);
      const ch = await conn.createChannel();
      try {
        expect((await ch.checkQueue(billing.parkedQueue)).messageCount).toBe(40);
      } finally {
        await ch.close();
      }
    }
    // And a replay started at once takes all forty.
    await listParked(conn, billing);
    const replay = await replayParked(conn, billing);
    expect(replay).toMatchObject({ total: 40 });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
  });
});
