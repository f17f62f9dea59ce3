/**
 * Several exchanges and a producer that is not warren, in one short run: an exchange the
 * payments team owns is bound to without being declared (and its absence is a clear
 * error); one consumer listens on a topic, a direct and a fanout exchange, another on a
 * headers exchange; a legacy producer sends plain-text refunds with its id in a header,
 * deduplicated by the idempotency guard, and one that fails is parked and replayed to its
 * consumer only. Run with `npx tsx examples/exchanges.ts`; docs/exchanges.md shows it.
 */
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as amqp from 'amqplib';
import { defineTopology, ExchangeNotFoundError, replayParked, topologySpec, Warren, type Outcome } from '../src/index.js';
import { sqliteStore } from '../src/store/sqlite/index.js';

const url = process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
// Names of this run's own, so it can run beside anything else on the broker.
const run = `warren.tour.${process.pid}`;
const filename = join(tmpdir(), `${run}.db`);

// --- docs/exchanges.md, "Declaring several exchanges" -------------------------------
const topology = defineTopology({
  exchange: `${run}.events`, // the default exchange: topic, as before
  exchanges: {
    [`${run}.commands`]: { type: 'direct' },
    [`${run}.broadcast`]: { type: 'fanout' },
    [`${run}.documents`]: { type: 'headers' },
    [`${run}.payments`]: { passive: true }, // owned by the payments team: checked, never declared
  },
  retry: { delays: ['100ms'], maxAttempts: 2 },
  consumers: {
    [`${run}.billing`]: {
      bindings: [
        'order.created', // a string: a routing key on the default exchange
        { exchange: `${run}.commands`, keys: ['invoice.send'] },
        { exchange: `${run}.broadcast` },
      ],
    },
    [`${run}.archive`]: { bindings: [{ exchange: `${run}.documents`, headers: { format: 'pdf', region: 'eu' }, match: 'all' }] },
    [`${run}.audit`]: { bindings: [{ exchange: `${run}.broadcast` }] },
    [`${run}.refunds`]: { bindings: [{ exchange: `${run}.payments`, keys: ['refund.requested'] }] },
  },
});
// ------------------------------------------------------------------------------------

const short = (name: string) => name.slice(run.length + 1);
const raw = await amqp.connect(url);
const admin = await raw.createChannel();

// 1. The payments team has not declared its exchange yet.
try {
  await Warren.connect({ url, topology, connectTimeoutMs: 5000 });
} catch (error) {
  if (!(error instanceof ExchangeNotFoundError)) throw error;
  console.log(`connect refused: ${error.message.replace(new RegExp(`${run.replace(/\./g, '\\.')}\\.`, 'g'), '')}`);
}

// 2. Now it has: warren binds to it and leaves it as it is.
await admin.assertExchange(`${run}.payments`, 'topic', { durable: true });
const warren = await Warren.connect({ url, topology });
const store = sqliteStore({ filename });

const got: string[] = [];
const note = (who: string) => (payload: unknown, ctx: { raw: amqp.Message }) => void got.push(`${short(who)} <- ${short(ctx.raw.fields.exchange)}: ${JSON.stringify(payload)}`);
for (const c of ['billing', 'archive', 'audit']) await warren.consume(`${run}.${c}`, note(`${run}.${c}`));

// --- docs/exchanges.md, "Publishing" --------------------------------------------------
await warren.publish('order.created', { orderId: 1 }); // the default exchange
await warren.publish('invoice.send', { orderId: 1 }, { exchange: `${run}.commands` });
await warren.publish('', { notice: 'prices change on Monday' }, { exchange: `${run}.broadcast` });
await warren.publish('', { orderId: 1, file: 'invoice-1.pdf' }, { exchange: `${run}.documents`, headers: { format: 'pdf', region: 'eu' } });
// ------------------------------------------------------------------------------------
while (got.length < 5) await new Promise((r) => setTimeout(r, 20));
for (const line of got.sort()) console.log(line);

// 3. A legacy producer: plain text, no message id property, its id in a header.
let refundServiceUp = false;
const refundsSeen: string[] = [];
// --- docs/exchanges.md, "Producers that are not warren" -------------------------------
const refunds = await warren.consume(
  `${run}.refunds`,
  async (text: string, ctx) => {
    refundsSeen.push(`${ctx.messageId}: ${text}`);
    if (text.includes('order=43') && !refundServiceUp) throw new Error('refund service answered 503');
  },
  {
    decoder: 'text', // the body is a string, in the charset the content type names
    messageIdFrom: { header: 'x-request-id' }, // the producer's own id
    idempotency: store.idempotency(), // so a second copy does its work once
  },
);
// ------------------------------------------------------------------------------------
const outcomes: string[] = [];
refunds.on('outcome', (o: Outcome) => outcomes.push(`${o.kind}${o.kind === 'parked' ? ` (${o.reason})` : ''}`));

const legacy = await raw.createConfirmChannel();
const refund = (id: string, text: string) => legacy.publish(`${run}.payments`, 'refund.requested', Buffer.from(text, 'latin1'), { contentType: 'text/plain; charset=iso-8859-1', headers: { 'x-request-id': id } });
refund('req-1', 'refund order=42 café');
refund('req-1', 'refund order=42 café'); // the producer sent it twice
refund('req-2', 'refund order=43');
await legacy.waitForConfirms();
while (refunds.stats.acked + refunds.stats.duplicate + refunds.stats.parked < 3) await new Promise((r) => setTimeout(r, 20));
console.log(`refunds: ${refunds.stats.acked} handled, ${refunds.stats.duplicate} duplicate, ${refunds.stats.retried} retried, ${refunds.stats.parked} parked`);

// 4. The refund service is back: replay the parked refund. It goes to the refunds queue alone.
refundServiceUp = true;
const replay = await replayParked(await warren.connection.waitReady(5000), topology.consumer(`${run}.refunds`));
while (refunds.stats.acked < 2) await new Promise((r) => setTimeout(r, 20));
console.log(`replayed ${replay.replayed}; refunds handled ${refunds.stats.acked}; runs: ${refundsSeen.sort().join(' | ')}`);
console.log(`the other consumers saw ${got.length} messages, as before the replay`);

await warren.close();
await store.close();
// Tidy up this run's queues and exchanges (warren itself never deletes anything).
for (const q of topologySpec(topology).queues) await admin.deleteQueue(q.name);
for (const ex of topology.exchanges.keys()) await admin.deleteExchange(ex);
await raw.close();
for (const f of [filename, `${filename}-wal`, `${filename}-shm`]) rmSync(f, { force: true });
