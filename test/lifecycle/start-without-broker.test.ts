/**
 * `startWithoutBroker`: an application starts during a broker outage. It serves its
 * writes through the outbox meanwhile, says why it is not ready, and once the broker
 * comes, its consumers attach and every message goes through, once.
 */
import { createServer } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BrokerHandshakeError, BrokerUnreachableError, ClosedError, Warren } from '../../src/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import { TcpProxy } from '../../src/store/testing/tcp-proxy.js';
import { AMQP_URL, depth, onTeardown, rawConnection, testTopology, waitFor } from '../helpers.js';

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** The test broker's URL on another port (a proxy of the test's own). */
function urlOn(port: number): string {
  const u = new URL(AMQP_URL);
  u.hostname = '127.0.0.1';
  u.port = String(port);
  return u.toString();
}

describe('startWithoutBroker', () => {
  it('with nothing listening: connect resolves without waiting connectTimeoutMs, health says why, a fail-fast publish rejects at once, close() is prompt', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const url = urlOn(await closedPort());
    const started = Date.now();
    // A minute to connect: were the option ignored, connect would wait all of it and then throw.
    const warren = await Warren.connect({ url, topology, startWithoutBroker: true, connectTimeoutMs: 60_000, publisher: { whenDisconnected: 'fail' } });
    onTeardown(() => warren.close());
    const startMs = Date.now() - started;
    expect(startMs).toBeLessThan(30_000);
    const consumer = await warren.consume(c.name, () => undefined);
    expect(consumer.attached).toBe(false);

    const report = await warren.health();
    expect(report.ready).toBe(false);
    expect(report.live).toBe(true);
    const byComponent = Object.fromEntries(report.reasons.map((r) => [r.component, r.message]));
    expect(byComponent['connection']).toMatch(/^not connected to amqp:\/\/guest:\*\*\*@127\.0\.0\.1:\d+.*; last attempt: .*ECONNREFUSED.*; reconnecting$/);
    // Publishes wait for the topology: that connection opens after the other has declared it.
    expect(byComponent['publish connection']).toMatch(/^not connected to .*; opens once the other connection has declared the topology$/);
    expect(byComponent[`consumer ${c.name}`]).toBe(`not attached to queue ${c.queue}; it attaches when the connection is up`);

    const refusedAt = Date.now();
    const error = await warren.publish('order.placed', { orderId: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BrokerUnreachableError);
    expect((error as Error).message).toMatch(/not connected, and the publisher fails at once while disconnected \(whenDisconnected: 'fail'\); message \S+ was not sent/);
    // At once: not after the publisher's connectTimeoutMs (10 s) of waiting.
    expect(Date.now() - refusedAt).toBeLessThan(5000);

    const closing = Date.now();
    await warren.close();
    expect(Date.now() - closing).toBeLessThan(10_000);
    console.log(`start with nothing listening: connect resolved in ${startMs} ms`);
  });

  it("a publish that waits while disconnected is bounded: past connectTimeoutMs it rejects with BrokerUnreachableError; one still waiting at close() is refused at once, nothing left pending", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    const url = urlOn(await closedPort());
    const bounded = await Warren.connect({ url, topology, startWithoutBroker: true, publisher: { connectTimeoutMs: 2000 } });
    onTeardown(() => bounded.close());
    const waitedFrom = Date.now();
    const timedOut = await bounded.publish('order.placed', { orderId: 1 }).catch((e: unknown) => e);
    const waitedMs = Date.now() - waitedFrom;
    expect(timedOut).toBeInstanceOf(BrokerUnreachableError);
    expect((timedOut as Error).message).toMatch(/not connected within 2000 ms/);
    // It waited for the broker (the bound, not a fail-fast), and not much past the bound.
    expect(waitedMs).toBeGreaterThanOrEqual(1900);
    expect(waitedMs).toBeLessThan(30_000);
    await bounded.close();

    // A minute's bound: close() must not wait it out, nor leave the publish pending.
    const long = await Warren.connect({ url, topology, startWithoutBroker: true, publisher: { connectTimeoutMs: 60_000 } });
    onTeardown(() => long.close());
    const settled: Array<string | undefined> = [];
    const waiting = [1, 2, 3].map((orderId) =>
      long.publish('order.placed', { orderId }).then(
        () => settled.push(undefined),
        (e: unknown) => {
          settled.push((e as Error).name);
          throw e;
        },
      ),
    );
    await new Promise((r) => setTimeout(r, 200));
    expect(settled).toEqual([]);
    const closing = Date.now();
    await long.close();
    const closeMs = Date.now() - closing;
    const outcomes = await Promise.allSettled(waiting);
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected', 'rejected']);
    for (const o of outcomes) expect((o as PromiseRejectedResult).reason).toBeInstanceOf(ClosedError);
    expect(closeMs).toBeLessThan(20_000);
    await expect(long.publish('order.placed', { orderId: 4 })).rejects.toBeInstanceOf(ClosedError);
    console.log(`a waiting publish: rejected ${waitedMs} ms after it was made (connectTimeoutMs 2000); close() with three waiting took ${closeMs} ms`);
  });

  it('broker down at start, then up: outbox writes served meanwhile, a waiting publish confirmed, the consumer attaches, every message handled once', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    await proxy.cut();
    const dir = mkdtempSync(join(tmpdir(), 'warren-nobroker-'));
    const store = sqliteStore({ filename: join(dir, 'shop.db') });
    onTeardown(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await store.migrate();

    const started = Date.now();
    const warren = await Warren.connect({
      url: urlOn(proxy.port),
      topology,
      startWithoutBroker: true,
      reconnect: { initialDelayMs: 50, maxDelayMs: 500 },
      // Long enough to outlast the outage on a busy machine: this publish waits for the broker.
      publisher: { connectTimeoutMs: 120_000, confirmTimeoutMs: 120_000 },
    });
    onTeardown(() => warren.close());
    const startMs = Date.now() - started;
    // The outbox publishes the broker confirmed: a row relayed twice would be hidden from
    // the handler by the idempotency guard, not from this count.
    let relayed = 0;
    warren.publisher.on('settled', (error: Error | undefined, _ms: number | undefined, kind: string) => {
      if (kind === 'outbox' && error === undefined) relayed += 1;
    });
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange, retry: { initialDelayMs: 50, maxDelayMs: 500 } });
    await relay.start();
    onTeardown(() => relay.stop());

    const runs = new Map<number, number>();
    const consumer = await warren.consume(c.name, (order: { orderId: number }) => {
      runs.set(order.orderId, (runs.get(order.orderId) ?? 0) + 1);
    }, { idempotency: store.idempotency() });
    expect((await warren.health()).ready).toBe(false);

    // The requests of the outage: each an order row and its event, in one transaction;
    // more of them than one relay batch (100).
    const N = 250;
    for (let i = 1; i <= N; i++) {
      await store.transaction(async (tx) => {
        await store.outbox.add(tx, 'order.placed', { orderId: i });
      });
    }
    expect((await store.outbox.lag()).pending).toBe(N);
    let confirmed = false;
    const waiting = warren.publish('order.placed', { orderId: N + 1 }).then((r) => {
      confirmed = true;
      return r;
    });
    expect(consumer.attached).toBe(false);
    expect(confirmed).toBe(false);

    const upAt = Date.now();
    await proxy.restore();
    await waitFor(() => consumer.attached, 'the consumer to attach once the broker is reachable', 60_000);
    const attachMs = Date.now() - upAt;
    await waiting;
    await waitFor(() => runs.size === N + 1, () => `every order handled (${runs.size} of ${N + 1})`, 60_000);
    await waitFor(async () => (await store.outbox.lag()).pending === 0, 'the outbox to be empty', 30_000);
    let reasons = '';
    await waitFor(async () => {
      const report = await warren.health();
      reasons = JSON.stringify(report.reasons);
      return report.ready;
    }, () => `ready (not: ${reasons})`, 30_000);
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) === 0 && consumer.stats.inFlight === 0, 'the work queue to drain', 30_000);

    expect([...runs.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: N + 1 }, (_, i) => i + 1));
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    // Every row written during the outage relayed, each once.
    expect(relayed).toBe(N);
    expect(consumer.stats.parked + consumer.stats.retried).toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
    console.log(`start with the broker cut off: connect resolved in ${startMs} ms; consumer attached ${attachMs} ms after the broker came back`);
  }, 180_000);

  it('with the broker up it changes nothing: connected, declared and attached as connect returns', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await Warren.connect({ url: AMQP_URL, topology, startWithoutBroker: true, publisher: { whenDisconnected: 'fail' } });
    onTeardown(() => warren.close());
    expect(warren.connection.ready && warren.publishConnection.ready).toBe(true);
    const consumer = await warren.consume(c.name, () => undefined);
    expect(consumer.attached).toBe(true);
    expect(await warren.health()).toMatchObject({ ready: true, reasons: [] });
    await warren.publish('order.placed', { orderId: 1 });
  });

  it('refused credentials still fail at once: waiting would not fix them', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    const u = new URL(AMQP_URL);
    u.password = 'not-the-password';
    const error = await Warren.connect({ url: u.toString(), topology, startWithoutBroker: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as BrokerHandshakeError).reason).toBe('credentials');
  });

  it('refuses a startWithoutBroker or whenDisconnected that is not one of its values', () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('billing')]: { bindings: ['order.placed'] } } }));
    expect(() => Warren.create({ topology, startWithoutBroker: 'yes' as unknown as boolean })).toThrow(/`startWithoutBroker`: expected true or false, got "yes"/);
    expect(() => Warren.create({ topology, publisher: { whenDisconnected: 'later' as 'wait' } })).toThrow(/`whenDisconnected`: "later" is not 'wait' or 'fail'/);
  });
});
