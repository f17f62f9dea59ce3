/**
 * warren/metrics against a real broker and real prom-client: what a scrape says after
 * real traffic, the broker figures from the management API and from AMQP alone, the
 * cache, and bad options.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { InvalidOptionError, PermanentError, UnroutableError } from '../errors.js';
import { connectWarren, MGMT_URL, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { findConnection, forceCloseConnection, uniqueConnectionName } from '../../test/lifecycle/support.js';
import { warrenMetrics, type WarrenMetricsOptions } from './index.js';
import { BrokerReader } from './broker.js';
import { ManagementClient } from '../management/client.js';
import { replayParked } from '../park/operations.js';
import { parseScrape, valueOf, type Sample } from './testing/scrape.js';

function shop() {
  let billing!: string;
  let idle!: string;
  const topology = testTopology(({ exchange, name }) => {
    billing = name('billing');
    idle = name('idle');
    return {
      exchange,
      retry: { delays: ['20ms'], maxAttempts: 2 },
      consumers: { [billing]: { bindings: ['order.created'] }, [idle]: { bindings: ['order.created'] } },
    };
  });
  return { topology, billing, idle };
}

async function scrape(registry: Registry): Promise<Sample[]> {
  return parseScrape(await registry.metrics());
}

function metricsFor(options: WarrenMetricsOptions) {
  const metrics = warrenMetrics(options);
  onTeardown(() => metrics.close());
  return metrics;
}

describe('application and broker figures after real traffic', () => {
  it('counts outcomes by consumer, tier and reason, times handlers and confirms, and reads every queue of the topology', async () => {
    const { topology, billing, idle } = shop();
    const warren = await connectWarren(topology);
    const metrics = metricsFor({ warren, broker: { management: { url: MGMT_URL }, cacheMs: 0 } });
    await warren.consume<{ kind: string }>(billing, async ({ kind }) => {
      if (kind === 'permanent') throw new PermanentError('no such customer');
      if (kind === 'transient') throw new Error('carrier timeout');
      await new Promise((r) => setTimeout(r, 30));
    });
    for (const kind of ['ok', 'ok', 'ok', 'transient', 'permanent']) await warren.publish('order.created', { kind });
    await expect(warren.publish('nobody.listens', { kind: 'ok' })).rejects.toBeInstanceOf(UnroutableError);

    // billing: 3 acked, the transient one retried once then parked at the cap, the permanent one parked.
    await waitFor(async () => {
      const now = await scrape(metrics.registry);
      return valueOf(now, 'warren_consumer_parked_total', { consumer: billing, reason: 'max-attempts' }) === 1 && valueOf(now, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'acked' }) === 3 && valueOf(now, 'warren_consumer_parked_total', { consumer: billing, reason: 'permanent-error' }) === 1;
    }, 'three acked, the permanent failure parked, the transient one parked at the cap');
    let s = await scrape(metrics.registry);
    expect(valueOf(s, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'acked' })).toBe(3);
    expect(valueOf(s, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'retried' })).toBe(1);
    expect(valueOf(s, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'parked' })).toBe(2);
    expect(valueOf(s, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'requeued' })).toBe(0);
    expect(valueOf(s, 'warren_consumer_retries_total', { consumer: billing, tier: '1', delay: '20ms' })).toBe(1);
    expect(valueOf(s, 'warren_consumer_parked_total', { consumer: billing, reason: 'permanent-error' })).toBe(1);
    expect(valueOf(s, 'warren_consumer_parked_total', { consumer: billing, reason: 'crash-loop' })).toBe(0);
    // Handlers that slept 30 ms are all above the 25 ms bucket and within 10 s.
    expect(valueOf(s, 'warren_consumer_handler_duration_seconds_count', { consumer: billing, outcome: 'acked' })).toBe(3);
    expect(valueOf(s, 'warren_consumer_handler_duration_seconds_bucket', { consumer: billing, outcome: 'acked', le: '0.025' })).toBe(0);
    expect(valueOf(s, 'warren_consumer_handler_duration_seconds_bucket', { consumer: billing, outcome: 'acked', le: '10' })).toBe(3);
    expect(valueOf(s, 'warren_consumer_handler_duration_seconds_sum', { consumer: billing, outcome: 'acked' })).toBeGreaterThanOrEqual(0.09);
    expect(valueOf(s, 'warren_consumer_in_flight', { consumer: billing })).toBe(0);
    expect(valueOf(s, 'warren_consumer_attached', { consumer: billing })).toBe(1);
    expect(valueOf(s, 'warren_consumer_cancellations_total', { consumer: billing })).toBe(0);
    // Every publish, by kind: the application's five confirmed and one returned, the
    // transient one's retry copy, and the two park copies. A move's confirm comes before
    // the outcome it leads to, so these are counted already.
    expect(valueOf(s, 'warren_publishes_total', { kind: 'publish', outcome: 'confirmed' })).toBe(5);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'publish', outcome: 'returned' })).toBe(1);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'publish', outcome: 'nacked' })).toBe(0);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'retry', outcome: 'confirmed' })).toBe(1);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'park', outcome: 'confirmed' })).toBe(2);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'put-back', outcome: 'confirmed' })).toBe(0);
    expect(valueOf(s, 'warren_publish_confirm_duration_seconds_count', { kind: 'publish' })).toBe(5);
    expect(valueOf(s, 'warren_publish_confirm_duration_seconds_count', { kind: 'retry' })).toBe(1);
    expect(valueOf(s, 'warren_publish_confirm_duration_seconds_count', { kind: 'park' })).toBe(2);
    expect(valueOf(s, 'warren_connection_up', { connection: 'consume' })).toBe(1);
    expect(valueOf(s, 'warren_connection_reconnects_total', { connection: 'publish' })).toBe(0);

    // The broker's figures: management statistics lag by their interval (5 s).
    const b = topology.consumer(billing);
    const i = topology.consumer(idle);
    await waitFor(
      async () => {
        s = await scrape(metrics.registry);
        return valueOf(s, 'warren_queue_messages_ready', { queue: b.parkedQueue }) === 2 && valueOf(s, 'warren_queue_messages_ready', { queue: i.queue }) === 5 && valueOf(s, 'warren_queue_published_total', { queue: b.parkedQueue }) === 2 &&
          // Each queue's statistics arrive on their own 5 s tick: the work queue's consumer
          // count may still be from before the consumer attached when the parked queue's is fresh.
          valueOf(s, 'warren_queue_consumers', { consumer: billing, role: 'work' }) === 1;
      },
      'the management API to show 2 parked and 5 waiting for the idle consumer',
      20_000,
    );
    expect(valueOf(s, 'warren_broker_up', { source: 'management' })).toBe(1);
    // AMQP was not read: no series, rather than a 0 that reads as down.
    expect(valueOf(s, 'warren_broker_up', { source: 'amqp' })).toBeUndefined();
    expect(valueOf(s, 'warren_queue_consumers', { consumer: billing, role: 'work' })).toBe(1);
    // A consumer that is not running: depth and zero consumers, all the same.
    expect(valueOf(s, 'warren_queue_consumers', { consumer: idle, role: 'work' })).toBe(0);
    expect(valueOf(s, 'warren_queue_messages_unacked', { consumer: idle, role: 'work' })).toBe(0);
    expect(valueOf(s, 'warren_queue_redelivered_total', { consumer: idle, role: 'work' })).toBe(0);
    expect(valueOf(s, 'warren_queue_messages_ready', { consumer: billing, role: 'retry', queue: b.retryQueues[0] as string })).toBe(0);
    expect(valueOf(s, 'warren_queue_exists', { queue: b.parkedQueue })).toBe(1);
    // A parked queue's redeliveries are walks reading it, not failures: no series.
    expect(valueOf(s, 'warren_queue_redelivered_total', { queue: b.parkedQueue })).toBeUndefined();
    expect(valueOf(s, 'warren_queue_redelivered_total', { queue: b.queue })).toBe(0);
    expect(s.filter((x) => x.name === 'warren_queue_messages_ready')).toHaveLength(6);

    // A replay told to report its copies counts them as replays.
    const replay = await replayParked(await warren.connection.waitReady(5000), b, { onPublished: metrics.observePublish });
    expect(replay.replayed).toBe(2);
    s = await scrape(metrics.registry);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'replay', outcome: 'confirmed' })).toBe(2);
    expect(valueOf(s, 'warren_publishes_total', { kind: 'replay', outcome: 'returned' })).toBe(0);
  });

  it('without the management API, reads depths and consumers over AMQP, and says so; a missing queue does not hide the rest', async () => {
    const { topology, billing, idle } = shop();
    const warren = await connectWarren(topology);
    const metrics = metricsFor({ warren, broker: { management: { url: 'http://guest:guest@127.0.0.1:1', timeoutMs: 500 }, cacheMs: 0 } });
    for (let n = 0; n < 4; n++) await warren.publish('order.created', { n });
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.deleteQueue(topology.consumer(billing).retryQueues[0] as string);
    await ch.close();
    const s = await scrape(metrics.registry);
    expect(valueOf(s, 'warren_broker_up', { source: 'amqp' })).toBe(1);
    expect(valueOf(s, 'warren_broker_up', { source: 'management' })).toBe(0);
    expect(valueOf(s, 'warren_queue_messages_ready', { consumer: idle, role: 'work' })).toBe(4);
    expect(valueOf(s, 'warren_queue_messages_ready', { consumer: billing, role: 'work' })).toBe(4);
    expect(valueOf(s, 'warren_queue_consumers', { consumer: billing, role: 'work' })).toBe(0);
    expect(valueOf(s, 'warren_queue_exists', { consumer: billing, role: 'retry' })).toBe(0);
    expect(valueOf(s, 'warren_queue_exists', { consumer: billing, role: 'parked' })).toBe(1);
    expect(valueOf(s, 'warren_queue_messages_ready', { consumer: idle, role: 'parked' })).toBe(0);
    // What only the management API knows is absent, not zero.
    expect(valueOf(s, 'warren_queue_messages_unacked', { consumer: idle, role: 'work' })).toBeUndefined();
    expect(valueOf(s, 'warren_queue_redelivered_total', { consumer: idle, role: 'work' })).toBeUndefined();
  });

  it('a queue the management API does not list yet is asked over AMQP before it is called missing', async () => {
    const { topology, billing } = shop();
    const warren = await connectWarren(topology);
    for (let n = 0; n < 3; n++) await warren.publish('order.created', { n });
    const conn = await rawConnection();
    const b = topology.consumer(billing);
    const gone = b.retryQueues[0] as string;
    const ch = await conn.createChannel();
    await ch.deleteQueue(gone);
    await ch.close();
    // The real management API, less the work queue: as it answers in the seconds after a
    // queue is declared, before its statistics are first collected.
    const api = new ManagementClient({ url: MGMT_URL });
    const lagging = Object.assign(Object.create(api) as ManagementClient, {
      queues: async (columns?: readonly string[]) => (await api.queues(columns)).filter((q) => q.name !== b.queue),
    });
    const reader = new BrokerReader(topology, { management: lagging, connection: () => Promise.resolve(conn), cacheMs: 0 });
    const snapshot = await reader.read();
    expect(snapshot.source).toBe('management');
    const figures = (queue: string) => snapshot.queues.find((q) => q.queue === queue);
    expect(figures(b.queue)).toMatchObject({ exists: true, ready: 3, consumers: 0, unacked: undefined });
    // A queue that is really gone is still missing.
    expect(figures(gone)).toMatchObject({ exists: false });
    expect(figures(b.parkedQueue)).toMatchObject({ exists: true });
    // Without a connection to ask, the listing is all there is.
    const alone = await new BrokerReader(topology, { management: lagging, connection: undefined, cacheMs: 0 }).read();
    expect(alone.queues.find((q) => q.queue === b.queue)).toMatchObject({ exists: false });
  });

  it('reads the broker once per cache interval, and concurrent scrapes share one reading', async () => {
    const { topology } = shop();
    const warren = await connectWarren(topology);
    const metrics = metricsFor({ warren, broker: { management: { url: MGMT_URL }, cacheMs: 60_000 } });
    const reader = metrics.broker;
    if (!reader) throw new Error('no broker reader');
    await Promise.all([metrics.registry.metrics(), metrics.registry.metrics(), metrics.registry.metrics()]);
    expect(reader.reads).toBe(1);
    await metrics.registry.metrics();
    expect(reader.reads).toBe(1);
    reader.invalidate();
    await metrics.registry.metrics();
    expect(reader.reads).toBe(2);
  });

  it('counts reconnects and cancellations', async () => {
    const { topology, billing } = shop();
    const connectionName = uniqueConnectionName('metrics');
    const warren = await connectWarren(topology, { connectionName });
    const metrics = metricsFor({ warren, broker: false });
    const consumer = await warren.consume(billing, async () => undefined);
    // The broker cancels a consumer whose queue is deleted; warren declares it again.
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.deleteQueue(topology.consumer(billing).queue);
    await ch.close();
    await waitFor(async () => valueOf(await scrape(metrics.registry), 'warren_consumer_cancellations_total', { consumer: billing }) === 1, 'the cancellation counted');
    await waitFor(() => consumer.attached, 'the consumer back on its queue');
    // Cut the consume connection under warren: it comes back by itself.
    await forceCloseConnection(await findConnection(connectionName));
    await waitFor(async () => valueOf(await scrape(metrics.registry), 'warren_connection_reconnects_total', { connection: 'consume' }) === 1, 'the reconnect counted', 20_000);
    const s = await scrape(metrics.registry);
    expect(valueOf(s, 'warren_connection_reconnects_total', { connection: 'publish' })).toBe(0);
  });
});

describe('registry and options', () => {
  it("registers on the application's registry beside its own metrics, and close() takes warren's off again", async () => {
    const { topology } = shop();
    const warren = await connectWarren(topology);
    const registry = new Registry();
    registry.registerMetric(new (await import('prom-client')).Counter({ name: 'app_orders_total', help: 'orders', registers: [] }));
    const metrics = warrenMetrics({ warren, registry, broker: false });
    expect(metrics.registry).toBe(registry);
    const text = await registry.metrics();
    expect(text).toContain('app_orders_total');
    expect(text).toContain('warren_consumer_deliveries_total');
    expect(() => warrenMetrics({ warren, registry, broker: false })).toThrow(/already has a metric named warren_/);
    await metrics.close();
    expect(await registry.metrics()).not.toContain('warren_');
    // Closed, the listeners are gone too: a new one can take its place.
    const again = warrenMetrics({ warren, registry, broker: false });
    await again.close();
  });

  it('rejects bad options with InvalidOptionError naming the option', () => {
    const bad: Array<[unknown, RegExp]> = [
      [{ registry: {} }, /`registry`/],
      [{ buckets: { handler: [1, 0.5] } }, /`buckets.handler`/],
      [{ buckets: { confirm: [] } }, /`buckets.confirm`/],
      [{ storeCacheMs: -1 }, /`storeCacheMs`/],
      [{ stores: [{}] }, /`stores\[0\]`/],
      [{ stores: [{ backend: 'sqlite', outbox: { lag: () => 0 }, retryTable: { signals: () => 0 } }, { backend: 'sqlite', outbox: { lag: () => 0 }, retryTable: { signals: () => 0 } }] }, /`stores`.*two entries are named "sqlite"/],
      [{ schedulers: [{ scheduler: 1, name: 'a' }] }, /`schedulers\[0\]`/],
      [{ broker: {} }, /`broker`.*needs the topology/],
      [{ warren: {} }, /`warren`/],
      [{ health: [1] }, /`health`/],
    ];
    for (const [options, message] of bad) {
      let error: unknown;
      try {
        warrenMetrics(options as WarrenMetricsOptions);
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(options)).toBeInstanceOf(InvalidOptionError);
      expect((error as Error).message).toMatch(message);
    }
  });
});
