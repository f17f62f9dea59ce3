// Bare amqplib as a performance-minded user writes it: a ConfirmChannel publish with a
// callback per message, `crypto.randomUUID()`, `JSON.stringify`, persistent, mandatory,
// content type and timestamp, no header; `channel.consume` with one ack per message.
// The baseline the comparison's goals are judged against (see harness.mjs).
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
    publishCb(i, cb) {
      ch.publish(exchange, routingKey, Buffer.from(JSON.stringify(message(i))), {
        persistent: true,
        mandatory: true,
        contentType: 'application/json',
        timestamp: Math.floor(Date.now() / 1000),
        messageId: randomUUID(),
      }, cb);
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
