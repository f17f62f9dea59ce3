import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { BROKER, rawConnection, uniqueName, onTeardown, waitFor } from '../../test/helpers.js';

/**
 * What the crash-loop guard and the quorum delivery limit stand on, per broker: which
 * ways of giving a delivery back a quorum queue counts in `x-delivery-count`. RabbitMQ
 * 3.10 and 4.0 count every return; 4.3 counts a reject and a consumer that went away
 * (its channel closed with the delivery unsettled), not a nack, and counts every
 * delivery in `x-acquired-count`. So warren gives back with a reject what the guard
 * must count, and with a nack (or a confirmed copy) what it must not.
 */
describe('what a quorum queue counts, per broker', () => {
  async function quorumQueue(conn: amqp.ChannelModel): Promise<string> {
    const queue = uniqueName('count');
    const ch = await conn.createConfirmChannel();
    await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': 100 } });
    onTeardown(async () => {
      const c = await conn.createChannel();
      await c.deleteQueue(queue).catch(() => undefined);
      await c.close().catch(() => undefined);
    });
    ch.sendToQueue(queue, Buffer.from('{}'), { persistent: true, messageId: 'count-1' });
    await ch.waitForConfirms();
    await ch.close();
    return queue;
  }

  async function next(ch: amqp.Channel, queue: string): Promise<amqp.GetMessage> {
    let got: amqp.GetMessage | false = false;
    await waitFor(async () => (got = await ch.get(queue)) !== false, `a delivery from ${queue}`);
    return got as unknown as amqp.GetMessage;
  }

  const counts = (m: amqp.GetMessage) => ({ delivery: m.properties.headers?.['x-delivery-count'] as number | undefined, acquired: m.properties.headers?.['x-acquired-count'] as number | undefined });

  it('counts a reject and a dead consumer everywhere, a nack only before 4.3', async () => {
    const conn = await rawConnection();
    const queue = await quorumQueue(conn);
    let ch = await conn.createChannel();
    const first = await next(ch, queue);
    expect(first.fields.redelivered).toBe(false);

    ch.nack(first, false, true);
    const afterNack = await next(ch, queue);
    expect(afterNack.fields.redelivered).toBe(true);
    if (BROKER === '4.3') expect(counts(afterNack)).toEqual({ delivery: undefined, acquired: 1 });
    else expect(counts(afterNack).delivery).toBe(1);

    ch.reject(afterNack, true);
    const afterReject = await next(ch, queue);
    if (BROKER === '4.3') expect(counts(afterReject)).toEqual({ delivery: 1, acquired: 2 });
    else expect(counts(afterReject).delivery).toBe(2);

    // The consumer goes away with the delivery unsettled (a process that died on it).
    await ch.close();
    ch = await conn.createChannel();
    const afterDeath = await next(ch, queue);
    if (BROKER === '4.3') expect(counts(afterDeath)).toEqual({ delivery: 2, acquired: 3 });
    else expect(counts(afterDeath).delivery).toBe(3);
    ch.ack(afterDeath);
  });
});
