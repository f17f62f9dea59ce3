/**
 * `warrenService`: the parts of a warren application run with it, against the real
 * broker and a SQLite file, served from node:http, Express and Hono.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { hashPassword, parseUsers, basicAuth } from '../console/index.js';
import { ManagementClient } from '../management/client.js';
import { sqliteStore } from '../store/sqlite/index.js';
import { Warren } from '../warren.js';
import { warrenService, type ServiceOptions } from './index.js';

function listen(server: Server): Promise<string> {
  return new Promise((done) => {
    server.listen(0, '127.0.0.1', () => done(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
    onTeardown(() => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }));
  });
}

async function setup(extra: Partial<ServiceOptions> = {}) {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.placed'] } } }));
  const dir = mkdtempSync(join(tmpdir(), 'warren-service-'));
  onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
  const store = sqliteStore({ filename: join(dir, 'app.db') });
  onTeardown(() => store.close());
  await store.migrate();
  const warren = Warren.create({ url: AMQP_URL, topology });
  onTeardown(() => warren.close());
  const users = parseUsers(`alice:operator:${await hashPassword('s3cret-pass')}`);
  const service = warrenService({
    warren,
    store,
    retryScheduler: { pollMs: 50 },
    metrics: true,
    console: { path: '/ops/warren', authorize: basicAuth(users), challenge: 'Basic realm="warren"', management: new ManagementClient({ url: MGMT_URL }), sampleIntervalMs: 60_000 },
    ...extra,
  });
  onTeardown(() => service.close());
  return { topology, store, warren, service };
}

const alice = { authorization: `Basic ${Buffer.from('alice:s3cret-pass').toString('base64')}` };

/** The checks every server runs: probes, metrics, the console behind its sign-in, the application's own path. */
async function exercise(base: string, ownPath: string): Promise<void> {
  const ready = await fetch(`${base}/readyz`);
  expect(ready.status).toBe(200);
  expect(await ready.json()).toMatchObject({ probe: 'ready', ready: true, live: true });
  expect((await fetch(`${base}/livez`)).status).toBe(200);
  const metrics = await fetch(`${base}/metrics`);
  expect(metrics.status).toBe(200);
  const text = await metrics.text();
  expect(text).toMatch(/^# HELP warren_/m);
  expect(text).toMatch(/warren_outbox_pending\{/);
  const refused = await fetch(`${base}/ops/warren/`);
  expect(refused.status).toBe(401);
  expect(refused.headers.get('www-authenticate')).toBe('Basic realm="warren"');
  const page = await fetch(`${base}/ops/warren/`, { headers: alice });
  expect(page.status).toBe(200);
  expect(await page.text()).toContain('src="/ops/warren/assets/console.js"');
  const own = await fetch(`${base}${ownPath}`);
  expect(await own.text()).toBe('the application');
}

describe('warrenService', () => {
  it('starts the relay and the scheduler, serves probes, metrics and the console from Express, and closes the store last', async () => {
    const { topology, store, warren, service } = await setup();
    await service.start();
    expect(service.relay?.started).toBe(true);
    expect(service.scheduler?.started).toBe(true);
    const seen: number[] = [];
    await warren.consume(topology.consumer('billing').name, (order: { orderId: number }) => {
      seen.push(order.orderId);
    }, { idempotency: store.idempotency() });
    // The relay runs: an outbox row reaches the consumer.
    await store.transaction((tx) => store.outbox.add(tx, 'order.placed', { orderId: 7 }));
    await waitFor(() => seen.includes(7), 'the outbox row to be relayed and handled');

    const app = express();
    app.use(express.urlencoded({ extended: false }));
    app.use(service.listener);
    app.get('/orders', (_req, res) => {
      res.send('the application');
    });
    const base = await listen(createServer(app));
    await exercise(base, '/orders');

    await service.close();
    expect(service.relay?.started).toBe(false);
    expect(service.scheduler?.started).toBe(false);
    expect((await warren.health()).ready).toBe(false);
    // Closed: its transactions fail.
    await expect(store.transaction(() => undefined)).rejects.toThrow();
  });

  it('serves the same from Hono (fetch), node:http and Fastify, and leaves other paths to the application', async () => {
    const { service } = await setup();
    await service.start();
    const hono = new Hono();
    hono.use(async (c, next) => (await service.fetch(c.req.raw)) ?? next());
    hono.get('/hello', (c) => c.text('the application'));
    const server = serve({ fetch: hono.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await new Promise<void>((r) => (server.listening ? r() : server.once('listening', () => r())));
    onTeardown(() => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }));
    await exercise(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, '/hello');

    const plain = await listen(createServer((req, res) => service.listener(req, res, () => res.end('the application'))));
    await exercise(plain, '/anything');

    const fastify = Fastify();
    fastify.addHook('onRequest', (req, reply, done) => {
      if (!service.handles(req.url)) return done();
      reply.hijack();
      service.listener(req.raw, reply.raw);
    });
    fastify.get('/shipments', () => 'the application');
    onTeardown(() => fastify.close());
    await exercise(await fastify.listen({ port: 0, host: '127.0.0.1' }), '/shipments');
    expect(service.paths).toEqual({ metrics: '/metrics', ready: '/readyz', live: '/livez', console: '/ops/warren' });
  });

  it('says readiness fails while the broker is away (started without it), with the reasons', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.placed'] } } }));
    const warren = Warren.create({ url: 'amqp://guest:guest@127.0.0.1:1', topology, startWithoutBroker: true });
    const service = warrenService({ warren });
    onTeardown(() => service.close());
    await service.start();
    const res = await service.fetch(new Request('http://app/readyz'));
    expect(res?.status).toBe(503);
    const body = (await res?.json()) as { reasons: Array<{ component: string; message: string }> };
    expect(body.reasons.map((r) => r.component)).toEqual(['connection', 'publish connection']);
    expect((await service.fetch(new Request('http://app/livez')))?.status).toBe(200);
    expect(await service.fetch(new Request('http://app/orders'))).toBeUndefined();
  });

  it('refuses options that cannot work, naming them', () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.placed'] } } }));
    const warren = Warren.create({ topology });
    expect(() => warrenService({ warren, retryScheduler: true })).toThrow(/`retryScheduler`: needs a store/);
    expect(() => warrenService({ warren, console: { path: '/ops' } as never })).toThrow(/`console.authorize`: is required/);
    expect(() => warrenService({ warren, console: { path: '/', authorize: () => null } })).toThrow(/`console.path`: is \//);
    expect(() => warrenService({ warren, metrics: { path: 'metrics' } })).toThrow(/`metrics.path`: "metrics" is not a path/);
    expect(() => warrenService({ warren: {} as Warren })).toThrow(/`warren`: expected a Warren/);
  });
});
