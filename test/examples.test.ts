/**
 * The tours `npm start` runs, and the walkthrough's service, run for real so they stay
 * true: their output is what the README, docs/retry-table.md and docs/walkthrough.md describe.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { hashPassword } from '../src/console/auth.js';
import { TcpProxy } from '../src/store/testing/tcp-proxy.js';
import { MailServer } from '../examples/orders/testing/mail-server.js';
import { ordersTopology } from '../examples/orders/topology.js';
import { AMQP_URL, BROKER, deleteTopology, depth, MGMT_URL, onTeardown, PG_URL, rawConnection, uniqueName, waitFor } from './helpers.js';

function run(file: string): Promise<{ code: number | null; out: string }> {
  const path = fileURLToPath(new URL(`../examples/${file}`, import.meta.url));
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path], { env: { ...process.env, WARREN_AMQP_URL: AMQP_URL }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

describe('examples', () => {
  it('the console stop of npm start: serves the demo topology on loopback, prints its URL, and ends cleanly on Ctrl-C', async () => {
    const path = fileURLToPath(new URL('../examples/console.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', path], { env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, WARREN_CONSOLE_PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 30_000;
      while (!/http:\/\/127\.0\.0\.1:\d+\//.test(out) && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 50));
      const url = /http:\/\/127\.0\.0\.1:\d+\//.exec(out)?.[0];
      expect(url, out).toBeDefined();
      const page = await fetch(url as string);
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain('data-consumer="warren.demo.billing"');
      expect(html).toContain('sqlite:');
    } finally {
      child.kill('SIGINT');
    }
    expect(await exited).toBe(0);
  }, 60_000);

  it('the retry-table tour: rows paused while the carrier is down, none of its calls while paused, all 30 labels in the end', async () => {
    const { code, out } = await run('retry-table.ts');
    expect(out).toMatch(/30 rows in the table, all paused/);
    expect(out).toMatch(/a second later the carrier was called 0 more times/);
    expect(out).toMatch(/acme's 10 rows still held/);
    expect(out).toMatch(/all 30 labels printed/);
    expect(out).toMatch(/alice\s+pause\s+\{"tenant":"acme"\} → 10 rows/);
    expect(code).toBe(0);
  }, 60_000);

  it('the retry-inside-the-queue tour: on 4.3 the linear waits and a park with the error; on an older broker the refusal', async () => {
    const { code, out } = await run('in-queue-retry.ts');
    if (BROKER === '3.10' || BROKER === '4.0') {
      expect(out).toMatch(/refused: `consumers\.warren\.demo\.ledger\.retry\.inQueue` needs RabbitMQ 4\.3 or later/);
    } else {
      expect(out).toMatch(/p-1 run 3 \(delivery count 2\)/);
      expect(out).toMatch(/parked by warren: max-attempts after 5 runs \(the ledger timed out on p-2\)/);
      expect(out).toMatch(/done: 1 acked, 1 parked, 6 retries inside the queue/);
    }
    expect(code).toBe(0);
  }, 60_000);

  it('the exchanges tour: a missing passive exchange refused, five messages over four exchanges, a legacy producer deduplicated, parked and replayed to its consumer only', async () => {
    const { code, out } = await run('exchanges.ts');
    expect(out).toMatch(/connect refused: Exchange 'payments' does not exist\. The topology declares it passive/);
    for (const line of ['archive <- documents', 'audit <- broadcast', 'billing <- broadcast', 'billing <- commands', 'billing <- events']) expect(out).toContain(line);
    expect(out).toMatch(/refunds: 1 handled, 1 duplicate, 1 retried, 1 parked/);
    expect(out).toMatch(/replayed 1; refunds handled 2; runs: req-1: refund order=42 café \| req-2: refund order=43 \| req-2: refund order=43 \| req-2: refund order=43/);
    expect(out).toMatch(/the other consumers saw 5 messages, as before the replay/);
    expect(code).toBe(0);
  }, 60_000);

  it('the walkthrough service: built with tsc, started with the broker down, orders taken meanwhile, everything delivered once when it comes; an outage retried, a parked message replayed after a fix', async () => {
    const root = fileURLToPath(new URL('..', import.meta.url));
    // Built as a service is built for production: tsc, then plain node (no tsx).
    const out = join(root, '.warren/examples/orders');
    mkdirSync(out, { recursive: true });
    writeFileSync(join(out, 'tsconfig.json'), JSON.stringify({ extends: join(root, 'tsconfig.json'), compilerOptions: { outDir: out, rootDir: root, declaration: false, sourceMap: false }, include: [], files: [join(root, 'examples/orders/main.ts')] }));
    const buildStarted = Date.now();
    await promisify(execFile)(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(out, 'tsconfig.json')], { cwd: root, maxBuffer: 16 * 1024 * 1024 });
    const buildMs = Date.now() - buildStarted;

    const mail = await MailServer.start();
    onTeardown(() => mail.close());
    const schema = `wt_orders_${randomBytes(4).toString('hex')}`;
    const pool = new pg.Pool({ connectionString: PG_URL });
    pool.on('error', () => undefined);
    await pool.query(`CREATE SCHEMA "${schema}"`);
    onTeardown(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    });
    const prefix = uniqueName('orders');
    const emailRetry = ['500ms', '2s', '5s'];
    const topology = ordersTopology(prefix, emailRetry);
    onTeardown(() => deleteTopology(topology));
    // The broker is down: a proxy of the test's own, refusing connections until restored.
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    await proxy.cut();
    const amqp = new URL(AMQP_URL);
    amqp.hostname = '127.0.0.1';
    amqp.port = String(proxy.port);

    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: '0',
      ORDERS_AMQP_URL: amqp.toString(),
      ORDERS_DATABASE_URL: PG_URL,
      ORDERS_DB_SCHEMA: schema,
      ORDERS_PREFIX: prefix,
      ORDERS_MAIL_URL: mail.url,
      ORDERS_CONSOLE_USERS: `alice:operator:${await hashPassword('correct horse battery')}`,
      ORDERS_EMAIL_RETRY: emailRetry.join(','),
      WARREN_MANAGEMENT_URL: MGMT_URL,
    };
    const spawnedAt = Date.now();
    const child = spawn(process.execPath, [join(out, 'examples/orders/main.js')], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<string | number | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)));
    onTeardown(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    });
    let log = '';
    child.stdout.on('data', (c: Buffer) => (log += c.toString()));
    child.stderr.on('data', (c: Buffer) => (log += c.toString()));
    await waitFor(() => {
      if (child.exitCode !== null) throw new Error(`the service exited before listening:\n${log}`);
      return /orders listening on (\S+)/.test(log);
    }, () => `the service to listen; its output:\n${log}`, 90_000);
    const listenMs = Date.now() - spawnedAt;
    const base = /orders listening on (\S+)/.exec(log)?.[1] ?? '';
    const json = async (path: string, init?: RequestInit) => {
      const res = await fetch(`${base}${path}`, init);
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const place = async (email: string, amountCents = 1250) => {
      const res = await json('/orders', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, amountCents }) });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return res.body as { orderId: string; messageId: string };
    };

    // Broker down: not ready, and why; alive; orders are taken (the outbox needs only PostgreSQL).
    const notReady = await json('/health/ready');
    expect(notReady.status).toBe(503);
    const reasons = (notReady.body['error'] as { warren: { reasons: Array<{ component: string; message: string }> } }).warren.reasons;
    expect(reasons.find((r) => r.component === 'connection')?.message).toMatch(/ECONNREFUSED/);
    expect(reasons.map((r) => r.component)).toEqual(expect.arrayContaining(['consumer billing', 'consumer email']));
    expect((await json('/health/live')).status).toBe(200);
    const during = [await place('ada@example.com'), await place('grace@example.com'), await place('edsger@example.com')];
    for (const o of during) expect((await json(`/orders/${o.orderId}`)).body).toEqual({ orderId: o.orderId, status: 'placed' });
    expect(mail.attempts).toBe(0);

    // The broker comes back: consumers attach, the outbox drains, each order charged and mailed once.
    const upAt = Date.now();
    await proxy.restore();
    await waitFor(async () => (await json('/health/ready')).status === 200, 'the service to be ready once the broker is reachable', 60_000);
    const readyMs = Date.now() - upAt;
    await waitFor(async () => {
      for (const o of during) if ((await json(`/orders/${o.orderId}`)).body['status'] !== 'charged') return false;
      return mail.sent.length === 3;
    }, () => `the three orders charged and mailed (${mail.sent.length} mailed)`, 60_000);
    const deliveredMs = Date.now() - upAt;
    expect(mail.sent.map((m) => m.to).sort()).toEqual(['ada@example.com', 'edsger@example.com', 'grace@example.com']);
    expect(mail.sent.map((m) => m.key).sort()).toEqual(during.map((o) => o.messageId).sort());

    // Metrics and the console behind its sign-in.
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(/^warren_consumer_deliveries_total\{consumer="billing",outcome="acked"\} 3$/m);
    expect(metrics).toMatch(/^warren_consumer_deliveries_total\{consumer="email",outcome="acked"\} 3$/m);
    expect((await fetch(`${base}/ops/warren/`)).status).toBe(401);
    const alice = { authorization: `Basic ${Buffer.from('alice:correct horse battery').toString('base64')}` };
    expect((await fetch(`${base}/ops/warren/`, { headers: alice })).status).toBe(200);

    // A dependency outage shorter than the ladder: retried, then sent, once.
    mail.down = true;
    const during503 = mail.attempts;
    const outage = await place('barbara@example.com');
    await waitFor(() => mail.attempts >= during503 + 2, 'the email to be tried again while the provider is down', 30_000);
    mail.down = false;
    await waitFor(() => mail.to('barbara@example.com').length === 1, 'the email sent once the provider is back', 30_000);
    expect((await json(`/orders/${outage.orderId}`)).body['status']).toBe('charged');

    // A refusal parks the message at once; after the fix (the template restored), a replay from the console sends it.
    mail.templates.delete('order-confirmation');
    const refused = await place('alan@example.com');
    const raw = await rawConnection();
    const parkedQueue = topology.consumer('email').parkedQueue;
    await waitFor(async () => (await depth(raw, parkedQueue)) === 1, 'the refused email to be parked', 30_000);
    const page = await fetch(`${base}/ops/warren/parked/email`, { headers: alice });
    const html = await page.text();
    expect(html).toContain(`data-message-id="${refused.messageId}"`);
    expect(html).toContain('MailRejectedError');
    mail.templates.add('order-confirmation');
    const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(html)?.[1] ?? '';
    const replay = await fetch(`${base}/ops/warren/parked/email/replay`, { method: 'POST', headers: alice, body: new URLSearchParams({ scope: 'selected', id: refused.messageId, _csrf: csrf }), redirect: 'manual' });
    expect(replay.status).toBe(303);
    await waitFor(() => mail.to('alan@example.com').length === 1, 'the replayed email sent', 30_000);
    await waitFor(async () => (await depth(raw, parkedQueue)) === 0, 'the parked queue empty after the replay', 30_000);

    // Everything once: five orders, five charges, five emails, one per message id.
    const charges = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".charges`);
    expect(Number(charges.rows[0]?.n)).toBe(5);
    expect(new Set(mail.sent.map((m) => m.key)).size).toBe(5);
    expect(mail.sent).toHaveLength(5);

    child.kill('SIGTERM');
    expect(await exited).toBe('SIGTERM');
    console.log(`walkthrough service: tsc build ${buildMs} ms; listening ${listenMs} ms after spawn with the broker down; ready ${readyMs} ms and the three orders delivered ${deliveredMs} ms after the broker came back`);
  }, 420_000);
});
