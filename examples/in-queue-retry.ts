/**
 * Retry inside the queue (RabbitMQ 4.3's delayed retry of quorum queues): a payment that
 * fails twice and then goes through waits 200 ms, then 400 ms, in its own queue; one that
 * always fails is parked by warren at the fifth run with its error. On a broker before
 * 4.3 connecting is refused, and the example prints why. Run with
 * `WARREN_AMQP_URL=amqp://guest:guest@127.0.0.1:5674 npx tsx examples/in-queue-retry.ts`.
 */
import { defineTopology, UnsupportedBrokerError, Warren, type Outcome } from '../src/index.js';

const url = process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5674';

const topology = defineTopology({
  exchange: 'warren.demo.payments',
  queueType: 'quorum',
  consumers: {
    // Failure n waits 200 ms × n, at most 500 ms: 200, 400, 500, 500; parked at the 5th run.
    'warren.demo.ledger': { bindings: ['payment.*'], retry: { inQueue: { min: '200ms', max: '500ms' }, maxAttempts: 5 } },
  },
});

let warren: Warren;
try {
  warren = await Warren.connect({ url, topology });
} catch (error) {
  if (!(error instanceof UnsupportedBrokerError)) throw error;
  console.log(`refused: ${error.message}`);
  process.exit(0);
}

const started = Date.now();
const t = () => `${String(Date.now() - started).padStart(5)} ms`;
const failedAt = new Map<string, number>();
let settled = 0;

const consumer = await warren.consume<{ payment: string }>('warren.demo.ledger', ({ payment }, ctx) => {
  const since = failedAt.get(payment);
  const count = ctx.headers['x-delivery-count'] ?? 0;
  console.log(`${t()}  ${payment} run ${ctx.attempt} (delivery count ${String(count)})${since === undefined ? '' : `, ${Date.now() - since} ms after its failure`}`);
  if (payment === 'p-2' || ctx.attempt <= 2) {
    failedAt.set(payment, Date.now());
    throw new Error(`the ledger timed out on ${payment}`);
  }
});
consumer.on('outcome', (o: Outcome) => {
  if (o.kind === 'acked') console.log(`${t()}  p-1 acked; ${consumer.stats.retried} retries so far over both payments, none of them a copy`);
  if (o.kind === 'parked') console.log(`${t()}  parked by warren: ${o.reason} after ${o.attempts} runs (${o.error instanceof Error ? o.error.message : String(o.error)})`);
  if (o.kind === 'acked' || o.kind === 'parked') settled++;
});

await warren.publish('payment.received', { payment: 'p-1' });
await warren.publish('payment.received', { payment: 'p-2' });
while (settled < 2) await new Promise((r) => setTimeout(r, 20));
console.log(`${t()}  done: ${consumer.stats.acked} acked, ${consumer.stats.parked} parked, ${consumer.stats.retried} retries inside the queue`);
await warren.close();
