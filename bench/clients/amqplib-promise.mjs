// Bare amqplib in warren's caller pattern: each publish a promise of its confirm, the
// message shaped as warren shapes it (a UUID id, the `warren-occurred-at` header beside
// the timestamp). Kept beside the lean baseline (amqplib.mjs) to show what the caller
// pattern and the header cost by themselves.
import { randomUUID } from 'node:crypto';
import { Buffer } from 'node:buffer';
import * as amqp from 'amqplib';
import { message, runClient } from './harness.mjs';

await runClient(async ({ url, exchange, routingKey, queue, prefetch }) => {
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  let returned = 0;
  ch.on('return', () => returned++);
  return {
    publish(i) {
      return new Promise((resolve, reject) => {
        const now = new Date();
        ch.publish(exchange, routingKey, Buffer.from(JSON.stringify(message(i))), {
          persistent: true,
          mandatory: true,
          contentType: 'application/json',
          timestamp: Math.floor(now.getTime() / 1000),
          messageId: randomUUID(),
          headers: { 'warren-occurred-at': now.toISOString() },
        }, (err) => (err ? reject(err) : resolve()));
      });
    },
    async consume(handled) {
      await ch.prefetch(prefetch);
      await ch.consume(queue, (msg) => {
        JSON.parse(msg.content.toString());
        ch.ack(msg);
        handled();
      });
    },
    returned: () => returned,
    close: () => conn.close(),
  };
});
