// @cloudamqp/amqp-client's low-level API: a channel in confirm mode whose `basicPublish`
// resolves at the confirm, and `basicConsume` with one `ack()` per message.
import { randomUUID } from 'node:crypto';
import { AMQPClient } from '@cloudamqp/amqp-client';
import { message, runClient } from './harness.mjs';

await runClient(async ({ url, exchange, routingKey, queue, prefetch }) => {
  const client = new AMQPClient(url);
  const conn = await client.connect();
  const ch = await conn.channel();
  await ch.confirmSelect();
  let returned = 0;
  ch.onReturn = () => returned++;
  return {
    publish: (i) => ch.basicPublish(exchange, routingKey, JSON.stringify(message(i)), { deliveryMode: 2, contentType: 'application/json', timestamp: new Date(), messageId: randomUUID() }, true),
    async consume(handled) {
      const sub = await conn.channel();
      await sub.basicQos(prefetch);
      await sub.basicConsume(queue, { noAck: false }, (msg) => {
        JSON.parse(msg.bodyString());
        void msg.ack();
        handled();
      });
    },
    returned: () => returned,
    close: () => conn.close(),
  };
});
