// warren as an application gets it: the compiled package (dist/), `warren.publish()` and
// a consumer with its defaults but the prefetch, an async handler that does nothing.
import { message, runClient } from './harness.mjs';

const { defineTopology, Warren } = await import('../../dist/index.js');

await runClient(async ({ url, routingKey, topology: options, consumer: name, prefetch, consumerOptions }) => {
  const topology = defineTopology(options);
  const warren = await Warren.connect({ url, topology, declare: false });
  let consumer;
  return {
    publish: (i) => warren.publish(routingKey, message(i)),
    async consume(handled) {
      consumer = await warren.consume(name, async () => handled(), { prefetch, ...consumerOptions });
    },
    acked: () => consumer.stats.acked,
    close: () => warren.close(),
  };
});
