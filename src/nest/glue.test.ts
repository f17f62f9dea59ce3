/**
 * What the module runs from its options alone: the outbox relay and the retry scheduler
 * with the application's lifecycle, the store closed on shutdown, the metrics and the
 * console (behind its sign-in and the application's guards) served, health through
 * terminus. A real Nest application on Express, the real broker, a SQLite file.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Injectable, type CanActivate, type ExecutionContext, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { basicAuth, hashPassword, parseUsers } from '../console/index.js';
import { InvalidOptionError, silentLogger, type Topology } from '../index.js';
import { ManagementClient } from '../management/client.js';
import type { WarrenService } from '../service/index.js';
import { sqliteStore, type SqliteStore } from '../store/sqlite/index.js';
import { WARREN_SERVICE, WarrenConsumer, WarrenModule, type WarrenModuleOptions, type WarrenModuleRoutes } from './index.js';
import { WarrenHealthModule } from './terminus.js';

function topology(): Topology {
  return testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.placed'] } } }));
}

function tempStore(): SqliteStore {
  const dir = mkdtempSync(join(tmpdir(), 'warren-nest-glue-'));
  const store = sqliteStore({ filename: join(dir, 'app.db') });
  onTeardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
}

const seen: number[] = [];

@Injectable()
class Billing {
  @WarrenConsumer('billing')
  charge(order: { orderId: number }): void {
    seen.push(order.orderId);
  }
}

/** Lets a request through only with `x-team: ops`: the application's own guard. */
class OpsTeamGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    return context.switchToHttp().getRequest<{ headers: Record<string, string | undefined> }>().headers['x-team'] === 'ops';
  }
}

async function listen(options: WarrenModuleOptions, routes: WarrenModuleRoutes, withHealth = true): Promise<{ app: INestApplication; base: string }> {
  const moduleRef = await Test.createTestingModule({
    imports: [WarrenModule.forRoot({ ...options, routes }), ...(withHealth ? [WarrenHealthModule.forRoot()] : [])],
    providers: [Billing],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  onTeardown(() => app.close());
  await app.listen(0, '127.0.0.1');
  return { app, base: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

describe('WarrenModule runs warren\'s parts from its options', { timeout: 60_000 }, () => {
  it('relay and scheduler with the application, /metrics, the console behind basic auth and a guard, terminus health, the store closed on app.close()', async () => {
    const t = topology();
    const store = tempStore();
    await store.migrate();
    const users = parseUsers(`alice:operator:${await hashPassword('s3cret-pass')}`);
    const { app, base } = await listen(
      {
        url: AMQP_URL,
        topology: t,
        logger: silentLogger,
        store,
        retryScheduler: { pollMs: 50 },
        console: { authorize: basicAuth(users), challenge: 'Basic realm="warren"', management: new ManagementClient({ url: MGMT_URL }), sampleIntervalMs: 60_000 },
      },
      { metrics: '/metrics', console: '/ops/warren', consoleGuards: [OpsTeamGuard] },
    );
    const service = app.get<WarrenService>(WARREN_SERVICE);
    expect(service.relay?.started).toBe(true);
    expect(service.scheduler?.started).toBe(true);

    // The relay runs: an outbox row written in a request's transaction reaches billing.
    await store.transaction((tx) => store.outbox.add(tx, 'order.placed', { orderId: 41 }));
    await waitFor(() => seen.includes(41), 'the outbox row to be relayed and handled');

    const metrics = await fetch(`${base}/metrics`);
    expect(metrics.status).toBe(200);
    const text = await metrics.text();
    expect(text).toMatch(/warren_consumer_deliveries_total\{consumer="billing",outcome="acked"\} 1$/m);
    expect(text).toMatch(/warren_outbox_pending\{/);

    const alice = { authorization: `Basic ${Buffer.from('alice:s3cret-pass').toString('base64')}` };
    expect((await fetch(`${base}/ops/warren/`, { headers: alice })).status).toBe(403); // the guard: no x-team
    const noUser = await fetch(`${base}/ops/warren/`, { headers: { 'x-team': 'ops' } });
    expect(noUser.status).toBe(401);
    expect(noUser.headers.get('www-authenticate')).toBe('Basic realm="warren"');
    const page = await fetch(`${base}/ops/warren/`, { headers: { ...alice, 'x-team': 'ops' } });
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain(`href="/ops/warren/parked/billing"`);
    const js = await fetch(`${base}/ops/warren/assets/console.js`, { headers: { ...alice, 'x-team': 'ops' } });
    expect(js.status).toBe(200);

    const ready = await fetch(`${base}/health/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ok', info: { warren: { status: 'up', ready: true, reasons: [] } } });
    expect((await fetch(`${base}/health/live`)).status).toBe(200);

    await app.close();
    expect(service.relay?.started).toBe(false);
    expect(service.scheduler?.started).toBe(false);
    await expect(store.transaction(() => undefined)).rejects.toThrow();
  });

  it('a global prefix with the console excluded from it: the console where its links say, metrics under the prefix', async () => {
    const t = topology();
    const moduleRef = await Test.createTestingModule({
      imports: [WarrenModule.forRoot({ url: AMQP_URL, topology: t, logger: silentLogger, console: { authorize: () => ({ user: 'local', role: 'viewer' }), management: false }, routes: { metrics: '/metrics', console: '/ops/warren' } })],
      providers: [Billing],
    }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    onTeardown(() => app.close());
    app.setGlobalPrefix('api', { exclude: ['ops/warren', 'ops/warren/{*path}'] });
    await app.listen(0, '127.0.0.1');
    const base = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    const page = await fetch(`${base}/ops/warren/`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('src="/ops/warren/assets/console.js"');
    expect((await fetch(`${base}/ops/warren/assets/console.js`)).status).toBe(200);
    expect((await fetch(`${base}/api/metrics`)).status).toBe(200);
  });

  it('started without the broker: the application starts and readiness says why; metrics and probes answer', async () => {
    const t = topology();
    const { base } = await listen({ url: 'amqp://guest:guest@127.0.0.1:1', topology: t, logger: silentLogger, startWithoutBroker: true }, { metrics: '/metrics' });
    const ready = await fetch(`${base}/health/ready`);
    expect(ready.status).toBe(503);
    const body = (await ready.json()) as { error: { warren: { reasons: Array<{ component: string; message: string }> } } };
    const reasons = body.error.warren.reasons;
    expect(reasons.find((r) => r.component === 'connection')?.message).toMatch(/ECONNREFUSED/);
    expect(reasons.find((r) => r.component === 'consumer billing')?.message).toMatch(/it attaches when the connection is up/);
    expect((await fetch(`${base}/health/live`)).status).toBe(200);
    expect((await fetch(`${base}/metrics`)).status).toBe(200);
  });

  it('refuses options that cannot work where the module is declared or created, naming them', async () => {
    const t = topology();
    expect(() => WarrenModule.forRoot({ topology: t, routes: { metrics: 'metrics' } })).toThrow(/`routes.metrics`: "metrics" is not a path/);
    expect(() => WarrenModule.forRoot({ topology: t, routes: { consoleGuards: [OpsTeamGuard] } })).toThrow(/`routes.consoleGuards`: guards a console that is not mounted/);
    expect(() => WarrenModule.forRoot({ topology: t, console: {} as never })).toThrow(/`console.authorize`: is required/);
    const failing = async (options: WarrenModuleOptions, routes: WarrenModuleRoutes = {}) => {
      const error = await Test.createTestingModule({ imports: [WarrenModule.forRoot({ ...options, routes })], providers: [Billing] })
        .compile()
        .then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidOptionError);
      return (error as Error).message;
    };
    expect(await failing({ topology: t, retryScheduler: true })).toMatch(/`retryScheduler`: needs a store/);
    expect(await failing({ topology: t }, { console: '/ops' })).toMatch(/`console`: routes.console mounts the console at \/ops, but the options have no `console`/);
    expect(await failing({ topology: t, console: { authorize: () => null } })).toMatch(/`routes.console`: the options have a `console` but no path/);
  });
});
