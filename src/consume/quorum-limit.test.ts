import { describe, expect, it } from 'vitest';
import { declareTopology } from '../index.js';
import { depth, drain, rawConnection, testTopology, waitFor } from '../../test/helpers.js';

describe('quorum delivery limit', () => {
  it('dead-letters a message past the limit to the parked queue, never dropping it', async () => {
    // Whatever consumes the queue (here a bare client that dies on every delivery),
    // the broker's own limit must lead to the parked queue.
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', crashLimit: 2, consumers: { [name('lim')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const conn = await rawConnection();
    await declareTopology(conn, topology);
    const pub = await conn.createConfirmChannel();
    pub.publish(topology.exchange, 'x', Buffer.from('{"poison":true}'), { messageId: 'poison-1', persistent: true });
    await pub.waitForConfirms();

    let deliveries = 0;
    for (let i = 0; i < 10 && (await depth(conn, c.parkedQueue)) === 0; i++) {
      const ch = await conn.createChannel();
      // No fixed window: a quorum queue takes a closed channel's message back some time
      // after the close-ok, and a delivery that came after a 300 ms window was counted by
      // the broker but not here. Each round ends with a delivery, or with the message parked.
      let delivered = false;
      const got = await new Promise<boolean>((resolve) => {
        void ch.consume(c.queue, (m) => {
          if (m) {
            delivered = true;
            resolve(true);
          }
        });
        void waitFor(async () => delivered || (await depth(conn, c.parkedQueue)) === 1, 'a delivery or the message parked', 10_000).then(
          () => resolve(delivered),
          () => resolve(delivered),
        );
      });
      if (got) deliveries++;
      await ch.close(); // dies without an outcome: the broker counts a delivery
      await new Promise((r) => setTimeout(r, 50));
    }
    await waitFor(async () => (await depth(conn, c.parkedQueue)) === 1, 'the message to reach the parked queue');
    const [m] = await drain(conn, c.parkedQueue);
    expect(m?.properties.messageId).toBe('poison-1');
    const deaths = m?.properties.headers?.['x-death'] as Array<{ reason: string; queue: string }>;
    expect(deaths.some((d) => d.reason === 'delivery_limit' && d.queue === c.queue)).toBe(true);
    expect(deliveries).toBeGreaterThanOrEqual(c.crashLimit + 2);
    expect(await depth(conn, c.queue)).toBe(0);
  });
});
