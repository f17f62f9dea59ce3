/**
 * Health for probes, against the real broker and databases: faults are injected between
 * warren and the broker (a TCP proxy that cuts, a proxy that blocks like a resource
 * alarm) or between a store and its database.
 */
import http from 'node:http';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { healthFetchHandler, healthHandler, healthOf, healthReport, InvalidOptionError, relayHealth, storeHealth, type HealthReport } from '../index.js';
import { AMQP_URL, connectWarren, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { BlockingProxy } from '../publish/testing/blocking-proxy.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import { BACKENDS, harness } from '../store/testing/harness.js';

function setup() {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('health')]: { bindings: ['x'] } } }));
  const declaration = [...topology.consumers.values()][0]!;
  return { topology, name: declaration.name, queue: declaration.queue };
}

function brokerUrl(port: number): string {
  const url = new URL(AMQP_URL);
  url.port = String(port);
  return url.toString();
}

function upstream(): { port: number; host: string } {
  const u = new URL(AMQP_URL);
  return { port: Number(u.port || 5672), host: u.hostname };
}

const components = (h: HealthReport) => h.reasons.map((r) => r.component);

describe('warren.health()', () => {
  it('is ready and live when connected, declared and attached; a closed Warren is not ready', async () => {
    const { topology } = setup();
    const warren = await connectWarren(topology);
    await warren.consume(topology.consumers.keys().next().value!, async () => {});
    expect(await warren.health()).toEqual({ ready: true, live: true, reasons: [] });
    expect(await healthOf([warren])).toEqual({ ready: true, live: true, reasons: [] });
    await warren.close();
    const closed = await warren.health();
    expect(closed).toMatchObject({ ready: false, live: true });
    expect(components(closed)).toEqual(['warren']);
  });

  it('is not ready while a consumer whose queue was deleted is cancelled, and ready again once it re-attached', async () => {
    const { topology, name, queue } = setup();
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(name, async () => {});
    const cancelled = once(consumer, 'cancelled');
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.deleteQueue(queue);
    await cancelled;
    const h = await warren.health();
    expect(h.ready).toBe(false);
    expect(h.live).toBe(true);
    expect(h.reasons).toEqual([expect.objectContaining({ component: `consumer ${name}`, fails: 'ready' })]);
    expect(h.reasons[0]!.message).toContain(queue);
    await waitFor(async () => (await warren.health()).ready, 'the consumer to re-attach');
    expect(consumer.attached).toBe(true);
  });

  it('is not ready, naming the connections, while the broker is cut off; ready again once reconnected', async () => {
    const { host, port } = upstream();
    const proxy = await TcpProxy.start(port, host);
    onTeardown(() => proxy.close());
    const { topology, name } = setup();
    const warren = await connectWarren(topology, { url: brokerUrl(proxy.port), reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
    await warren.consume(name, async () => {});
    expect((await warren.health()).ready).toBe(true);

    await proxy.cut();
    await waitFor(async () => {
      const c = components(await warren.health());
      return c.includes('connection') && c.includes('publish connection');
    }, 'both connections reported down');
    const down = await warren.health();
    expect(down.ready).toBe(false);
    expect(down.live).toBe(true);
    expect(down.reasons.find((r) => r.component === 'connection')!.message).toContain(`127.0.0.1:${proxy.port}`);
    expect(components(down)).toContain(`consumer ${name}`);

    await proxy.restore();
    await waitFor(async () => (await warren.health()).ready, 'ready again after reconnecting', 15_000);
    expect(await warren.health()).toEqual({ ready: true, live: true, reasons: [] });
  });

  it('is not ready, naming the topology, while its declaration after a reconnect fails (a queue redeclared with other arguments)', async () => {
    const { host, port } = upstream();
    const proxy = await TcpProxy.start(port, host);
    onTeardown(() => proxy.close());
    const { topology, name, queue } = setup();
    const warren = await connectWarren(topology, { url: brokerUrl(proxy.port), reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
    await warren.consume(name, async () => {});
    await proxy.cut();
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.deleteQueue(queue);
    await ch.assertQueue(queue, { durable: true, arguments: { 'x-message-ttl': 1234 } });
    await proxy.restore();
    await waitFor(async () => components(await warren.health()).includes('topology'), 'the failed declaration reported', 15_000);
    const h = await warren.health();
    expect(h).toMatchObject({ ready: false, live: true });
    expect(h.reasons.find((r) => r.component === 'topology')!.message).toContain(queue);
  });

  it('is not ready while the broker blocks the publish connection, naming the broker\'s reason', async () => {
    const { host, port } = upstream();
    const proxy = await BlockingProxy.start(port, host);
    onTeardown(() => proxy.close());
    const { topology, name } = setup();
    const warren = await connectWarren(topology, { url: brokerUrl(proxy.port) });
    await warren.consume(name, async () => {});
    onTeardown(async () => proxy.unblock());

    proxy.block('low on disk');
    await waitFor(() => warren.publishConnection.blocked !== undefined, 'the client to hear connection.blocked');
    const h = await warren.health();
    expect(h).toMatchObject({ ready: false, live: true });
    const reason = h.reasons.find((r) => r.component === 'publish connection')!;
    expect(reason).toMatchObject({ fails: 'ready' });
    expect(reason.message).toContain('low on disk');

    proxy.unblock();
    await waitFor(async () => (await warren.health()).ready, 'ready again once unblocked');
  });

  it('answers probes over node:http: 200 when ready, 503 with the reasons when not, liveness unaffected by the broker', async () => {
    const { host, port } = upstream();
    const proxy = await BlockingProxy.start(port, host);
    onTeardown(() => proxy.close());
    const { topology } = setup();
    const warren = await connectWarren(topology, { url: brokerUrl(proxy.port) });
    onTeardown(async () => proxy.unblock());
    const server = http.createServer(healthHandler([warren]));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    onTeardown(() => new Promise((r) => server.close(() => r())));
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;

    let res = await fetch(`${base}/readyz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ probe: 'ready', ready: true, live: true, reasons: [] });

    proxy.block('low on memory');
    await waitFor(() => warren.publishConnection.blocked !== undefined, 'the client to hear connection.blocked');
    res = await fetch(`${base}/readyz`);
    expect(res.status).toBe(503);
    const body = (await res.json()) as HealthReport;
    expect(body.reasons.map((r) => r.message).join(' ')).toContain('low on memory');
    res = await fetch(`${base}/livez`);
    expect(res.status).toBe(200);
    res = await fetch(`${base}/elsewhere`);
    expect(res.status).toBe(404);
  });
});

describe('healthOf', () => {
  it('combines sources: a check of your own can fail liveness, a check that throws fails readiness, anything else is refused', async () => {
    const stuck = { health: async () => healthReport([{ component: 'worker pool', fails: 'live', message: 'every worker wedged' }]) };
    const broken = { health: async (): Promise<HealthReport> => { throw new Error('redis client gone'); } };
    const h = await healthOf([stuck, broken]);
    expect(h).toMatchObject({ ready: false, live: false });
    expect(h.reasons).toEqual([
      { component: 'worker pool', fails: 'live', message: 'every worker wedged' },
      { component: 'health check', fails: 'ready', message: 'a health check threw: redis client gone' },
    ]);
    const fetchStyle = healthFetchHandler([stuck]);
    const res = await fetchStyle(new Request('http://pod/livez'));
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ probe: 'live', live: false });
    await expect(healthOf([{} as never])).rejects.toThrow(InvalidOptionError);
  });
});

describe.each(BACKENDS)('store and relay health (%s)', (backend) => {
  it('a store is ready while its database answers, not ready (still live) while it is unreachable, ready again after', async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    await outage.store.migrate();
    expect(await healthOf([outage.store])).toEqual({ ready: true, live: true, reasons: [] });

    await outage.down();
    const down = await healthOf([storeHealth(outage.store, { timeoutMs: 3000 })]);
    expect(down).toMatchObject({ ready: false, live: true });
    expect(down.reasons).toEqual([expect.objectContaining({ component: `store (${backend})`, fails: 'ready' })]);
    expect(down.reasons[0]!.message).toMatch(/unreachable/);

    await outage.up();
    await waitFor(async () => (await healthOf([outage.store])).ready, 'the store ready again');
  });

  it('a relay is not ready when stopped, and not ready when its lag is above maxLagMs', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { host, port } = upstream();
    const proxy = await BlockingProxy.start(port, host);
    onTeardown(() => proxy.close());
    const { topology } = setup();
    const warren = await connectWarren(topology, { url: brokerUrl(proxy.port), publisher: { confirmTimeoutMs: 200 } });
    onTeardown(async () => proxy.unblock());
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    onTeardown(() => relay.stop());

    const stopped = await healthOf([relay]);
    expect(stopped).toMatchObject({ ready: false, live: true });
    expect(stopped.reasons[0]).toMatchObject({ component: 'outbox relay', fails: 'ready' });

    await relay.start();
    expect(await healthOf([relayHealth(relay, { maxLagMs: 100 })])).toEqual({ ready: true, live: true, reasons: [] });

    // The broker stops reading publishes: the row stays pending and ages past the bound.
    proxy.block('low on memory');
    await waitFor(() => warren.publishConnection.blocked !== undefined, 'the client to hear connection.blocked');
    await store.transaction((tx) => store.outbox.add(tx, 'x', { n: 1 }));
    await waitFor(async () => !(await healthOf([relayHealth(relay, { maxLagMs: 100 })])).ready, 'the relay reported behind');
    const behind = await healthOf([relayHealth(relay, { maxLagMs: 100 })]);
    expect(behind.live).toBe(true);
    expect(behind.reasons[0]).toMatchObject({ component: 'outbox relay', fails: 'ready' });
    expect(behind.reasons[0]!.message).toMatch(/behind: the oldest of 1 pending rows is \d+ ms old \(bound: maxLagMs 100\)/);

    proxy.unblock();
    await waitFor(async () => (await relay.lag()).pending === 0, 'the row published after the alarm');
    expect((await healthOf([relayHealth(relay, { maxLagMs: 100 })])).ready).toBe(true);
  });

  it('a retry scheduler is not ready when stopped; a failing dependency fails neither probe', async () => {
    const h = await harness(backend);
    const store = h.store();
    const { topology } = setup();
    const warren = await connectWarren(topology);
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, checks: { carrier: async () => { throw new Error('carrier says 503'); } }, health: { intervalMs: 20, failuresToPause: 1 } });
    onTeardown(() => scheduler.stop());
    expect(await healthOf([scheduler])).toMatchObject({ ready: false, live: true });
    await scheduler.start();
    await waitFor(async () => (await healthOf([scheduler])).reasons.length > 0, 'the failing dependency reported');
    const h2 = await healthOf([scheduler]);
    expect(h2).toMatchObject({ ready: true, live: true });
    expect(h2.reasons[0]).toMatchObject({ component: 'dependency carrier', fails: 'none' });
    expect(h2.reasons[0]!.message).toContain('carrier says 503');
  });
});
