/**
 * The retry table in one minute: the carrier goes down, 30 shipments fail and wait in
 * the table (paused by the carrier's health check, so nothing hammers it), an operator
 * holds one tenant, the carrier comes back and the rest drain at 20 per second, then
 * the held tenant is released. Run with `npm start` (after the first tour) or
 * `npx tsx examples/retry-table.ts`.
 */
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Warren, type Outcome } from '../src/index.js';
import { sqliteStore } from '../src/store/sqlite/index.js';
import { topology } from './topology.js';

const url = process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
const filename = join(tmpdir(), 'warren-demo.db');
for (const f of [filename, `${filename}-wal`, `${filename}-shm`]) rmSync(f, { force: true });

interface Shipment {
  orderId: number;
  tenant: 'acme' | 'globex' | 'initech';
}

class CarrierDownError extends Error {
  override name = 'CarrierDownError';
}

const started = Date.now();
const t = () => `${String(Date.now() - started).padStart(5)} ms`;
const carrier = { up: false, calls: 0 };

const store = sqliteStore({ filename });
const warren = await Warren.connect({ url, topology });
const table = store.retryTable;

const consumer = await warren.consume<Shipment>(
  'warren.demo.shipping',
  async () => {
    carrier.calls++;
    if (!carrier.up) throw new CarrierDownError('carrier rate API answered 503');
  },
  {
    // Failures the carrier causes wait in the table instead of climbing the ladder.
    retryTable: { table, rules: [{ when: CarrierDownError, dependency: 'carrier', tenant: (s) => s.tenant }], delayMs: 10_000 },
  },
);
let labels = 0;
consumer.on('outcome', (o: Outcome) => {
  if (o.kind === 'acked') labels++;
});

const scheduler = table.scheduler({
  publisher: warren.publisher,
  exchange: topology.exchange,
  ratePerSecond: 20,
  checks: { carrier: () => carrier.up },
  health: { intervalMs: 200, failuresToPause: 3 },
});
scheduler.health?.on('pause', (e: { rows: number }) => console.log(`${t()}  health check failed 3 times: carrier rows paused (${e.rows} so far; later ones are paused as they arrive)`));
scheduler.health?.on('resume', (e: { rows: number }) => console.log(`${t()}  health check passes: ${e.rows} carrier rows resumed, due now`));
await scheduler.start();

const tenants = ['acme', 'globex', 'initech'] as const;
for (let i = 1; i <= 30; i++) await warren.publish('shipment.requested', { orderId: i, tenant: tenants[i % 3] as Shipment['tenant'] } satisfies Shipment);
console.log(`${t()}  published 30 shipments; the carrier is down`);

const until = async (check: () => Promise<boolean> | boolean, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
};

await until(async () => (await table.count({ paused: true })) === 30);
const callsWhileDown = carrier.calls;
console.log(`${t()}  30 rows in the table, all paused; the carrier was called ${callsWhileDown} times`);
console.log(`${t()}  an operator holds tenant acme: ${await table.pause({ tenant: 'acme' }, { actor: 'alice' })} rows`);

await new Promise((r) => setTimeout(r, 1000));
console.log(`${t()}  a second later the carrier was called ${carrier.calls - callsWhileDown} more times`);

carrier.up = true;
console.log(`${t()}  the carrier is back`);
await until(() => labels === 20);
const drained = Date.now();
console.log(`${t()}  20 labels printed (globex, initech); acme's ${await table.count({ tenant: 'acme' })} rows still held`);
console.log(`${t()}  alice releases acme, due now: ${await table.resume({ tenant: 'acme' }, { actor: 'alice', dueNow: true })} rows`);
await until(() => labels === 30);
console.log(`${t()}  all 30 labels printed (acme's 10 in ${Date.now() - drained} ms: the scheduler sends 20 per second)`);

console.log('\nWhat happened to the table (newest first):');
for (const e of await table.history()) console.log(`  ${e.at.toISOString()}  ${e.actor.padEnd(22)} ${e.action.padEnd(7)} ${JSON.stringify(e.filter)} → ${e.rows} rows`);
console.log('\nThe same from the command line:');
console.log(`  npm run warren -- retry history --db sqlite:${filename}`);
console.log(`  npm run warren -- retry signals --db sqlite:${filename}`);

await scheduler.stop();
await warren.close();
await store.close();
