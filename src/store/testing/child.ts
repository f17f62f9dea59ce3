/**
 * A store user in its own process, for tests that run two processes at once or kill one
 * at a chosen moment. Run with `node --import tsx src/store/testing/child.ts` and:
 *
 * - WARREN_STORE: the store as JSON ({@link StoreSpec}, plus extra options)
 * - WARREN_CHILD_ROLE: `migrate`, `consume` or `relay`
 * - WARREN_START_AT: (optional) epoch ms to wait for before starting the work, so two
 *   children start it at the same moment
 * - for `consume` and `relay`: WARREN_AMQP_URL, WARREN_TOPOLOGY (topology options as JSON)
 * - for `consume`: WARREN_CONSUMER, WARREN_HANDLER_MS (the handler's duration),
 *   WARREN_CRASH=after-commit (SIGKILL itself once the guard committed, before the ack)
 * - for `relay`: WARREN_CRASH=after-publish:<n> (SIGKILL itself after the n-th confirmed
 *   publish, before the rows are marked sent), WARREN_LEASE_MS
 * - `scheduler`: a retry-table scheduler with its relay at WARREN_RATE rows/s; writes
 *   `drained <total>` after each pass that moved rows (the test kills it mid-drain)
 *
 * It writes one line per event: `ready`, `migrated <json>`, `outcome <kind> <id>`,
 * `committed <id>`, `published <id>`, `drained <n>`. stdout is a pipe, written synchronously on Linux,
 * so a line is out before the process kills itself.
 */
import { defineTopology, Warren, type OutgoingMessage, type TopologyOptions } from '../../index.js';
import { sleep } from '../options.js';
import { bumpEffect, openStore, type ExtraOptions, type StoreSpec } from './spec.js';

function need(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === '') throw new Error(`${name} is not set`);
  return v;
}

const say = (line: string) => process.stdout.write(`${line}\n`);
const { spec, extra } = JSON.parse(need('WARREN_STORE')) as { spec: StoreSpec; extra?: ExtraOptions };
const store = openStore(spec, { pruneIntervalMs: 0, ...extra });
const role = need('WARREN_CHILD_ROLE');
const crash = process.env['WARREN_CRASH'] ?? '';
const startAt = Number(process.env['WARREN_START_AT'] ?? 0);

async function connect(): Promise<Warren> {
  const topology = defineTopology(JSON.parse(need('WARREN_TOPOLOGY')) as TopologyOptions);
  return Warren.connect({ url: need('WARREN_AMQP_URL'), topology, connectTimeoutMs: 5000, connectionName: `warren-store-child-${process.pid}` });
}

if (role === 'migrate') {
  if (startAt > Date.now()) await sleep(startAt - Date.now());
  say(`migrated ${JSON.stringify(await store.migrate())}`);
  await store.close();
} else if (role === 'consume') {
  const warren = await connect();
  const handlerMs = Number(process.env['WARREN_HANDLER_MS'] ?? 0);
  const inner = store.idempotency();
  const guard = {
    async run(messageId: string, consumer: string, work: (tx: unknown) => Promise<void>, signal?: AbortSignal) {
      const result = await inner.run(messageId, consumer, work, signal);
      if (result === 'done' && crash === 'after-commit') {
        say(`committed ${messageId}`);
        process.kill(process.pid, 'SIGKILL');
      }
      return result;
    },
  };
  await store.migrate();
  if (startAt > Date.now()) await sleep(startAt - Date.now());
  const consumer = await warren.consume(
    need('WARREN_CONSUMER'),
    async (_payload: unknown, ctx) => {
      await bumpEffect(spec, ctx.tx, ctx.messageId as string);
      if (handlerMs > 0) await sleep(handlerMs);
    },
    { idempotency: guard, prefetch: 1 },
  );
  consumer.on('outcome', (o: { kind: string; messageId: string | undefined }) => say(`outcome ${o.kind} ${o.messageId ?? '-'}`));
  say('ready');
} else if (role === 'relay') {
  const warren = await connect();
  const after = crash.startsWith('after-publish:') ? Number(crash.slice('after-publish:'.length)) : 0;
  let confirmed = 0;
  const publisher = {
    async send(message: OutgoingMessage) {
      await warren.publisher.send(message);
      confirmed++;
      say(`published ${String(message.properties.messageId)}`);
      if (after > 0 && confirmed >= after) process.kill(process.pid, 'SIGKILL');
    },
  };
  const relay = store.relay({ publisher, exchange: warren.topology.exchange, leaseMs: Number(process.env['WARREN_LEASE_MS'] ?? 30_000), pollMs: 20 });
  await relay.start();
  say('ready');
} else if (role === 'scheduler') {
  const warren = await connect();
  const scheduler = store.retryTable.scheduler({
    publisher: warren.publisher,
    exchange: warren.topology.exchange,
    ratePerSecond: Number(process.env['WARREN_RATE'] ?? 100),
    pollMs: 20,
    relay: { pollMs: 20, leaseMs: Number(process.env['WARREN_LEASE_MS'] ?? 30_000) },
  });
  scheduler.on('drained', () => say(`drained ${scheduler.stats.moved}`));
  await scheduler.start();
  say('ready');
} else {
  throw new Error(`unknown WARREN_CHILD_ROLE ${role}`);
}
