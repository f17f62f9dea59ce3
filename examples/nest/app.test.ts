/**
 * The example shop, tested as a Nest user tests an application: the real AppModule,
 * `Test.createTestingModule`, `overrideProvider` for the configuration, `app.init()` and
 * `app.close()`, against the real broker and PostgreSQL; the payment provider is a real
 * HTTP server the test scripts.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { HEADER, Warren, type Outcome } from '../../src/index.js';
import { TcpProxy } from '../../src/store/testing/tcp-proxy.js';
import { AMQP_URL, deleteTopology, depth, drain, onTeardown, PG_URL, rawConnection, uniqueName, waitFor } from '../../test/helpers.js';
import { AppModule } from './app.module.js';
import { ShopConfig, type ShopSettings } from './config.js';
import { WarrenHealthIndicator } from '../../src/nest/terminus.js';
import { OrdersService } from './orders.js';
import { PaymentsApi } from './testing/payments-api.js';
import { shopTopology } from './topology.js';

interface Shop {
  readonly settings: ShopSettings;
  readonly payments: PaymentsApi;
  readonly pool: pg.Pool;
  readonly billingQueue: string;
  readonly receiptsQueue: string;
  readonly parkedQueue: string;
}

/** A payments API, a PostgreSQL schema and queue names of the test's own, all removed after it. */
async function shop(overrides: ShopSettings = {}): Promise<Shop> {
  const payments = await PaymentsApi.start();
  onTeardown(() => payments.close());
  const schema = `wt_nest_${randomBytes(4).toString('hex')}`;
  const pool = new pg.Pool({ connectionString: PG_URL });
  pool.on('error', () => undefined);
  await pool.query(`CREATE SCHEMA "${schema}"`);
  onTeardown(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });
  const prefix = uniqueName('nest');
  const topology = shopTopology(prefix);
  onTeardown(() => deleteTopology(topology));
  const settings: ShopSettings = { amqpUrl: AMQP_URL, prefix, paymentsUrl: payments.url, databaseUrl: PG_URL, schema, reconnectMs: 50, ...overrides };
  return {
    settings,
    payments,
    pool,
    billingQueue: topology.consumer('billing').queue,
    receiptsQueue: topology.consumer('receipts').queue,
    parkedQueue: topology.consumer('billing').parkedQueue,
  };
}

/** The AppModule with the test's configuration, initialised; closed after the test (if the test did not). */
async function startApp(s: Shop): Promise<INestApplication> {
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
    .overrideProvider(ShopConfig)
    .useValue(new ShopConfig(s.settings))
    .compile();
  const app = moduleRef.createNestApplication({ logger: ['error'] });
  onTeardown(() => app.close());
  await app.init();
  return app;
}

/** Every outcome of the app's consumers from now on, by consumer name. */
function outcomes(app: INestApplication): Map<string, Outcome[]> {
  const seen = new Map<string, Outcome[]>();
  for (const c of app.get(Warren).listConsumers()) {
    seen.set(c.name, []);
    c.on('outcome', (o: Outcome) => seen.get(c.name)?.push(o));
  }
  return seen;
}

async function receipts(s: Shop): Promise<Array<{ order_id: string; charge_id: string; message_id: string }>> {
  const { rows } = await s.pool.query(`SELECT order_id, charge_id, message_id FROM "${s.settings.schema}".receipts ORDER BY order_id`);
  return rows as Array<{ order_id: string; charge_id: string; message_id: string }>;
}

// Each test starts a Nest application or two; on a loaded machine that alone takes seconds.
describe('the example Nest shop', { timeout: 120_000 }, () => {
  it('handles a placed order: charged once, acked, its receipt written in the guard transaction', async () => {
    const s = await shop();
    const app = await startApp(s);
    const seen = outcomes(app);

    const messageId = await app.get(OrdersService).place({ orderId: 'o-1', amount: 1200 });

    await waitFor(async () => (await receipts(s)).length === 1, 'the receipt of o-1', 30_000);
    expect(await receipts(s)).toEqual([{ order_id: 'o-1', charge_id: `ch_${messageId}`, message_id: `${messageId}.paid` }]);
    expect(s.payments.calls).toEqual([{ orderId: 'o-1', idempotencyKey: messageId, status: 201 }]);
    await waitFor(() => seen.get('receipts')?.length === 1 && seen.get('billing')?.length === 1, 'both messages acked', 30_000);
    expect(seen.get('billing')).toMatchObject([{ kind: 'acked', messageId }]);
    expect(seen.get('receipts')).toMatchObject([{ kind: 'acked', messageId: `${messageId}.paid` }]);
    // The guard's marker rows, written in the same transactions as the handlers' work.
    const { rows } = await s.pool.query(`SELECT consumer FROM "${s.settings.schema}".warren_processed ORDER BY consumer`);
    expect(rows).toEqual([{ consumer: 'billing' }, { consumer: 'receipts' }]);
    const conn = await rawConnection();
    expect(await depth(conn, s.billingQueue)).toBe(0);
    expect(await depth(conn, s.parkedQueue)).toBe(0);
  });

  it('retries a payment provider that fails for a while, then succeeds: one receipt, the same idempotency key each time', async () => {
    const s = await shop();
    s.payments.answer('o-2', 503, 503);
    const app = await startApp(s);
    const seen = outcomes(app);

    const messageId = await app.get(OrdersService).place({ orderId: 'o-2', amount: 990 });

    await waitFor(async () => (await receipts(s)).length === 1, 'the receipt of o-2 after two failures', 30_000);
    await waitFor(() => seen.get('billing')?.length === 3, 'billing to ack o-2', 30_000);
    expect(s.payments.callsFor('o-2').map((c) => [c.status, c.idempotencyKey])).toEqual([
      [503, messageId],
      [503, messageId],
      [201, messageId],
    ]);
    expect(seen.get('billing')?.map((o) => o.kind)).toEqual(['retried', 'retried', 'acked']);
    expect(await depth(await rawConnection(), s.parkedQueue)).toBe(0);
  });

  it('parks an order whose card is declined, with the error attached, after one call', async () => {
    const s = await shop();
    s.payments.answer('o-3', 402);
    const app = await startApp(s);
    const seen = outcomes(app);

    const messageId = await app.get(OrdersService).place({ orderId: 'o-3', amount: 5000 });

    await waitFor(() => seen.get('billing')?.length === 1, 'billing to decide about o-3', 30_000);
    expect(seen.get('billing')).toMatchObject([{ kind: 'parked', messageId, attempts: 1 }]);
    const conn = await rawConnection();
    const parked = await drain(conn, s.parkedQueue);
    expect(parked).toHaveLength(1);
    const headers = parked[0]?.properties.headers ?? {};
    expect(parked[0]?.properties.messageId).toBe(messageId);
    expect(headers[HEADER.errorClass]).toBe('PaymentDeclinedError');
    expect(String(headers[HEADER.errorMessage])).toContain('payment declined for order o-3');
    expect(s.payments.callsFor('o-3')).toHaveLength(1);
    expect(await receipts(s)).toEqual([]);
  });

  it('app.close() with handlers in flight: they finish and are acked, the orders not started go back, nothing is lost or charged twice', async () => {
    const s = await shop();
    const app = await startApp(s);
    const seen = outcomes(app);
    s.payments.hold();
    const orders = app.get(OrdersService);
    const ids = new Map<string, string>();
    for (let i = 1; i <= 6; i++) ids.set(`o-${i}`, await orders.place({ orderId: `o-${i}`, amount: 100 * i }));

    // billing runs two at a time (its decorator's concurrency): two charges are in flight.
    await waitFor(() => s.payments.waiting === 2, 'two charges in flight', 30_000);
    let closed = false;
    const closing = app.close().then(() => (closed = true));
    const conn = await rawConnection();
    // The four never started are put back in the queue while the two still run.
    await waitFor(async () => (await depth(conn, s.billingQueue)) === 4, 'the four orders not started back in the queue', 30_000);
    expect(closed).toBe(false);
    s.payments.release();
    await closing;

    const billing = seen.get('billing') ?? [];
    expect(billing.filter((o) => o.kind === 'acked')).toHaveLength(2);
    expect(billing.filter((o) => o.kind === 'requeued')).toHaveLength(4);
    expect(billing.filter((o) => o.kind !== 'acked' && o.kind !== 'requeued')).toEqual([]);
    expect(s.payments.calls).toHaveLength(2);
    // Acked, not put back: the queue holds exactly the four not started.
    expect(await depth(conn, s.billingQueue)).toBe(4);
    // The two finished handlers published order.paid before the publisher closed.
    expect((await depth(conn, s.receiptsQueue)) + (await receipts(s)).length).toBe(2);

    // The next instance of the application handles the rest: every order charged once.
    const again = await startApp(s);
    await waitFor(async () => (await receipts(s)).length === 6, 'all six receipts', 30_000);
    expect(new Set(s.payments.calls.map((c) => c.orderId)).size).toBe(6);
    expect(s.payments.calls).toHaveLength(6);
    expect((await receipts(s)).map((r) => r.charge_id).sort()).toEqual([...ids.values()].map((id) => `ch_${id}`).sort());
    await again.close();
  });

  it('a second copy of a paid message (same id) is acked as a duplicate without writing twice', async () => {
    const s = await shop();
    const app = await startApp(s);
    const seen = outcomes(app);
    const warren = app.get(Warren);
    const paid = { orderId: 'o-7', amount: 700, chargeId: 'ch_x' };

    await warren.publish('order.paid', paid, { messageId: 'm-7.paid' });
    await warren.publish('order.paid', paid, { messageId: 'm-7.paid' });

    await waitFor(() => seen.get('receipts')?.length === 2, 'both copies handled', 30_000);
    expect(seen.get('receipts')?.map((o) => o.kind)).toEqual(['acked', 'duplicate']);
    expect(await receipts(s)).toHaveLength(1);
  });

  it('the terminus health check reports rabbitmq up, down while the connection is cut, up again once reconnected', async () => {
    const { port, hostname } = new URL(AMQP_URL);
    const proxy = await TcpProxy.start(Number(port || 5672), hostname);
    onTeardown(() => proxy.close());
    const url = new URL(AMQP_URL);
    url.port = String(proxy.port);
    const s = await shop({ amqpUrl: url.toString() });
    const app = await startApp(s);
    await app.listen(0, '127.0.0.1');
    const health = async () => {
      const res = await fetch(`${await app.getUrl()}/health`);
      return { status: res.status, body: (await res.json()) as { status: string; details: Record<string, { status: string; reasons?: Array<{ component: string }> }> } };
    };

    const up = await health();
    expect(up.status).toBe(200);
    expect(up.body.details['rabbitmq']).toEqual({ status: 'up', ready: true, live: true, reasons: [] });

    await proxy.cut();
    let down = await health();
    await waitFor(async () => (down = await health()).status === 503, 'the health check to fail while the broker is cut off', 30_000);
    expect(down.body.status).toBe('error');
    expect(down.body.details['rabbitmq']?.status).toBe('down');
    expect(down.body.details['rabbitmq']?.reasons?.map((r) => r.component)).toEqual(expect.arrayContaining(['connection', 'publish connection']));
    // Liveness stays up: restarting the process would not bring the broker back.
    expect(await app.get(WarrenHealthIndicator).isHealthy('rabbitmq', { probe: 'live' })).toMatchObject({ rabbitmq: { status: 'up', ready: false, live: true } });

    await proxy.restore();
    await waitFor(async () => (await health()).status === 200, 'the health check to pass once reconnected', 30_000);
  });

  it('SIGTERM with enableShutdownHooks drains like app.close(): the order in flight is charged and acked, the others wait in the queue', async () => {
    const s = await shop();
    s.payments.hold();
    const main = fileURLToPath(new URL('./main.ts', import.meta.url));
    const root = fileURLToPath(new URL('../..', import.meta.url));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: '0',
      SHOP_AMQP_URL: s.settings.amqpUrl,
      SHOP_PREFIX: s.settings.prefix,
      SHOP_PAYMENTS_URL: s.payments.url,
      SHOP_DATABASE_URL: s.settings.databaseUrl,
      SHOP_DB_SCHEMA: s.settings.schema,
    };
    const child = spawn(process.execPath, ['--import', 'tsx', main], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<string | number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)));
    onTeardown(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    // Generous: under load, loading Nest and compiling the sources with tsx takes tens of seconds.
    await waitFor(
      () => {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the shop exited before listening:\n${out}`);
        return /shop listening on (\S+)/.test(out);
      },
      'the shop to listen',
      90_000,
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}\nits output:\n${out}`);
    });
    const base = /shop listening on (\S+)/.exec(out)?.[1] ?? '';

    for (const orderId of ['s-1', 's-2', 's-3']) {
      const res = await fetch(`${base}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ orderId, amount: 100 }) });
      expect(res.status).toBe(202);
    }
    await waitFor(() => s.payments.waiting === 2, 'two charges in flight in the child', 30_000);
    child.kill('SIGTERM');
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, s.billingQueue)) === 1, 'the order not started back in the queue', 30_000);
    expect(child.exitCode).toBeNull();
    s.payments.release();

    expect(await exited).toBe('SIGTERM'); // Nest re-raises the signal once its hooks have run
    expect(s.payments.calls.map((c) => c.status)).toEqual([201, 201]);
    expect(await depth(conn, s.billingQueue)).toBe(1);
    expect((await depth(conn, s.receiptsQueue)) + (await receipts(s)).length).toBe(2);
    expect(out).not.toMatch(/ERROR/);
  }, 180_000);
});
