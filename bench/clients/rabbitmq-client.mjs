// rabbitmq-client as its README shows it: a confirming Publisher's `send()` with the
// payload object (it encodes JSON itself), and a Consumer that acks when its handler
// returns (one microtask after the handler's count here).
import { randomUUID } from 'node:crypto';
import process from 'node:process';
import { Connection } from 'rabbitmq-client';
import { message, runClient } from './harness.mjs';

await runClient(async ({ url, exchange, routingKey, queue, prefetch }) => {
  const rabbit = new Connection(url);
  let returned = 0;
  const pub = rabbit.createPublisher({ confirm: true, onReturn: () => returned++ });
  let sub;
  return {
    publish: (i) => pub.send({ exchange, routingKey, mandatory: true, durable: true, contentType: 'application/json', timestamp: Math.floor(Date.now() / 1000), messageId: randomUUID() }, message(i)),
    consume(handled) {
      sub = rabbit.createConsumer({ queue, queueOptions: { passive: true }, qos: { prefetchCount: prefetch } }, async () => {
        handled();
      });
      sub.on('error', (err) => process.stderr.write(`consumer error ${err}\n`));
    },
    returned: () => returned,
    async close() {
      await pub.close();
      await sub?.close();
      await rabbit.close();
    },
  };
});
