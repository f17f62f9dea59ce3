// Rascal as its README shows it: a broker made from a configuration (the exchange and
// queue checked, not declared), a confirmed publication, and a subscription whose
// handler calls `ackOrNack()`.
import process from 'node:process';
import rascal from 'rascal';
import { message, runClient } from './harness.mjs';

await runClient(async ({ url, exchange, routingKey, queue, prefetch }) => {
  const config = rascal.withDefaultConfig({
    vhosts: {
      '/': {
        connection: { url },
        exchanges: { [exchange]: { assert: false, check: true } },
        queues: { [queue]: { assert: false, check: true } },
        publications: { bench: { exchange, routingKey, confirm: true, options: { persistent: true, mandatory: true, contentType: 'application/json' } } },
        subscriptions: { bench: { queue, prefetch } },
      },
    },
  });
  const broker = await rascal.BrokerAsPromised.create(config);
  broker.on('error', (err) => process.stderr.write(`rascal: ${err}\n`));
  let returned = 0;
  const publish = (i) => broker.publish('bench', message(i)).then((publication) => new Promise((resolve, reject) => {
    publication.on('success', () => resolve()).on('error', reject).on('return', () => returned++);
  }));
  return {
    publish,
    async consume(handled) {
      const subscription = await broker.subscribe('bench');
      subscription.on('message', (_message, _content, ackOrNack) => {
        ackOrNack();
        handled();
      }).on('error', (err) => process.stderr.write(`rascal subscription: ${err}\n`));
    },
    returned: () => returned,
    close: () => broker.shutdown(),
  };
});
