/**
 * A two-minute tour: one message succeeds, one climbs the delay ladder and then
 * succeeds, one is parked with its error attached. Run with `npm start`.
 */
import * as amqp from 'amqplib';
import { HEADER, PermanentError, Warren, type Outcome } from '../src/index.js';
import { topology } from './topology.js';

const url = process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';

interface Order {
  orderId: number;
  behaviour: 'works' | 'flaky' | 'broken';
}

const runs = new Map<number, number>();
const started = Date.now();
const t = () => `${String(Date.now() - started).padStart(5)} ms`;

const warren = await Warren.connect({ url, topology });
const consumer = await warren.consume<Order>('warren.demo.billing', async (order, ctx) => {
  runs.set(order.orderId, (runs.get(order.orderId) ?? 0) + 1);
  console.log(`${t()}  handling order ${order.orderId} (${order.behaviour}), attempt ${ctx.attempt}`);
  if (order.behaviour === 'flaky' && ctx.attempt < 3) throw new Error(`payment gateway timed out (attempt ${ctx.attempt})`);
  if (order.behaviour === 'broken') throw new PermanentError(`order ${order.orderId} has no customer`);
});

const settled = new Set<string>();
consumer.on('outcome', (o: Outcome) => {
  if (o.kind === 'retried') console.log(`${t()}  ↻ ${o.messageId} waits in ${o.queue} (failed ${o.attempts}×)`);
  if (o.kind === 'acked') console.log(`${t()}  ✓ ${o.messageId} acked`);
  if (o.kind === 'parked') console.log(`${t()}  ⏸ ${o.messageId} parked: ${o.reason}`);
  if (o.kind === 'acked' || o.kind === 'parked') settled.add(o.messageId ?? '');
});

process.once('SIGTERM', () => {
  console.log('SIGTERM: finishing in-flight work, requeueing the rest');
  void warren.close().then(() => process.exit(0));
});

const ids = [];
for (const [orderId, behaviour] of [[1, 'works'], [2, 'flaky'], [3, 'broken']] as const) {
  const { messageId } = await warren.publish('order.created', { orderId, behaviour } satisfies Order);
  console.log(`${t()}  published order ${orderId} as ${messageId}`);
  ids.push(messageId);
}

const deadline = Date.now() + 20_000;
while (!ids.every((id) => settled.has(id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));

// Read the parked message back, as an operator would, and leave it parked.
const conn = await amqp.connect(url);
const ch = await conn.createChannel();
const parkedQueue = topology.consumer('warren.demo.billing').parkedQueue;
for (;;) {
  const m = await ch.get(parkedQueue, { noAck: false });
  if (m === false) break;
  if (m.properties.messageId === ids[2]) {
    const h = m.properties.headers ?? {};
    console.log(`\nParked in ${parkedQueue}:`);
    for (const key of [HEADER.parkedReason, HEADER.errorClass, HEADER.errorMessage, HEADER.attempts, HEADER.routingKey, HEADER.firstFailedAt]) {
      console.log(`  ${key.padEnd(24)} ${String(h[key])}`);
    }
    console.log(`  body                     ${m.content.toString()}`);
  }
}
await conn.close(); // unacked gets go back to the parked queue, in order

console.log(`\nruns per order: ${[...runs].map(([id, n]) => `#${id}: ${n}`).join(', ')}`);
console.log('See it from the command line:');
console.log('  npm run warren -- status -t examples/topology.ts');
console.log('  npm run warren -- parked list warren.demo.billing --group -t examples/topology.ts');
console.log('  npm run warren -- parked replay warren.demo.billing -t examples/topology.ts   # after a fix');
console.log('Or in a browser: npm start ends with the operator console, or run');
console.log('  npm run warren -- console -t examples/topology.ts');
await warren.close();
