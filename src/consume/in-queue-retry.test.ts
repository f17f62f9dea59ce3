/**
 * A retry inside the work queue (`retry.inQueue`) against the real broker: RabbitMQ 4.3
 * sets a rejected message aside in its own quorum queue; older brokers accept the
 * arguments and ignore them, so warren refuses there at connect.
 */
import { describe, expect, it } from 'vitest';
import { declareTopology, defineTopology, HEADER, ManagementClient, PermanentError, planTopology, readStatus, TopologyDriftError, UnsupportedBrokerError, Warren } from '../index.js';
import { AMQP_URL, BROKER, connectWarren, depth, drain, MGMT_URL, rawConnection, testTopology, waitFor } from '../../test/helpers.js';

const HAS_IT = BROKER !== '3.10' && BROKER !== '4.0';
const inQueue = { inQueue: { min: '50ms', max: '150ms' } } as const;

async function exists(queue: string): Promise<boolean> {
  const conn = await rawConnection();
  const ch = await conn.createChannel();
  try {
    await ch.checkQueue(queue);
    await ch.close();
    return true;
  } catch {
    return false;
  }
}

describe.skipIf(!HAS_IT)(`retry inside the queue${HAS_IT ? '' : ` (skipped: RabbitMQ ${BROKER} has no delayed retry; the refusal is tested below)`}`, () => {
  it('a failure waits in its own queue and comes back with the delivery count raised; no copy, no tier queue', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('iq')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 6 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const seen: Array<{ attempt: number; count: unknown; redelivered: boolean }> = [];
    const consumer = await warren.consume(c.name, (_p, ctx) => {
      seen.push({ attempt: ctx.attempt, count: ctx.headers['x-delivery-count'], redelivered: ctx.raw.fields.redelivered });
      if (seen.length < 4) throw new Error(`flaky ${seen.length}`);
    });
    await warren.publish('x', { n: 1 });
    await waitFor(() => consumer.stats.acked === 1, 'the fourth run to succeed');
    expect(seen.map((s) => s.attempt)).toEqual([1, 2, 3, 4]);
    expect(seen.slice(1).map((s) => [s.count, s.redelivered])).toEqual([
      [1, true],
      [2, true],
      [3, true],
    ]);
    expect(consumer.stats).toMatchObject({ retried: 3, parked: 0, acked: 1 });
    // The broker's count rose on the same message: a copy would have started it again.
    expect(c.retryQueues).toEqual([]);
    expect(await exists(`${c.queue}.retry.50ms`)).toBe(false);
    const raw = await rawConnection();
    expect(await depth(raw, c.queue)).toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
  });

  it('at the cap, warren parks the message itself with its failure, before the broker would', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('cap')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => {
      runs++;
      throw new TypeError(`the ledger said no (${runs})`);
    });
    const { messageId } = await warren.publish('x', { n: 2 });
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked');
    expect(runs).toBe(3);
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(parked?.properties.messageId).toBe(messageId);
    const h = parked!.properties.headers!;
    expect(h[HEADER.parkedReason]).toBe('max-attempts');
    expect(h[HEADER.attempts]).toBe(3);
    expect(h[HEADER.errorClass]).toBe('TypeError');
    expect(h[HEADER.errorMessage]).toBe('the ledger said no (3)');
    expect(h[HEADER.consumer]).toBe(c.name);
    expect(h[HEADER.routingKey]).toBe('x');
    // Not the broker's dead-lettering: no delivery_limit death, and no broker header copied.
    expect(JSON.stringify(h['x-death'] ?? [])).not.toMatch(/delivery_limit/);
    expect(h['x-delivery-count']).toBeUndefined();
    expect(consumer.stats).toMatchObject({ retried: 2, parked: 1 });
  });

  it('parks a permanent error at once', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('perm')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 5 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => {
      runs++;
      throw new PermanentError('account 42 is closed');
    });
    await warren.publish('x', { n: 3 });
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked');
    expect(runs).toBe(1);
    const [parked] = await drain(await rawConnection(), c.parkedQueue);
    expect(parked!.properties.headers![HEADER.parkedReason]).toBe('permanent-error');
    expect(parked!.properties.headers![HEADER.attempts]).toBe(1);
  });

  it('the crash-loop guard: a message whose consumers died on it maxAttempts times is parked without running', async () => {
    const maxAttempts = 3;
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('crash')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts } } } }));
    const c = [...topology.consumers.values()][0]!;
    const conn = await rawConnection();
    await declareTopology(conn, topology);
    const pub = await conn.createConfirmChannel();
    pub.publish(topology.exchange, 'x', Buffer.from('{"poison":true}'), { messageId: 'poison-iq', persistent: true });
    await pub.waitForConfirms();
    // Consumers that die on the message: each channel closes with the delivery unsettled,
    // which the broker counts (and, with type `failed`, delays like a reject).
    for (let deaths = 0; deaths < maxAttempts; deaths++) {
      const ch = await conn.createChannel();
      await new Promise<void>((resolve) => {
        void ch.consume(c.queue, (m) => {
          if (m) resolve();
        });
      });
      await ch.close();
    }
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(c.name, () => {
      runs++;
    });
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked as a crash loop');
    expect(runs).toBe(0);
    const [parked] = await drain(conn, c.parkedQueue);
    expect(parked?.properties.messageId).toBe('poison-iq');
    expect(parked!.properties.headers![HEADER.parkedReason]).toBe('crash-loop');
    expect(parked!.properties.headers![HEADER.errorClass]).toBe('CrashLoopError');
    expect(String(parked!.properties.headers![HEADER.errorMessage])).toMatch(/attempts spent.*reached no outcome/);
  });

  it('a message given back unstarted at shutdown keeps its delivery count: a nack, never a copy', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('shut')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 6 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const first = await Warren.connect({ url: AMQP_URL, topology, connectTimeoutMs: 5000 });
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => (release = r));
    const bRuns: number[] = [];
    const consumer = await first.consume<{ id: string }>(
      c.name,
      async ({ id }, ctx) => {
        if (id === 'a') return held;
        bRuns.push(ctx.attempt);
        // b fails once, then waits behind a (concurrency 1) when it comes back.
        if (bRuns.length === 1) throw new Error('b fails once');
      },
      { prefetch: 10, concurrency: 1, shutdownTimeoutMs: 5000 },
    );
    await first.publish('x', { id: 'b' });
    await waitFor(() => consumer.stats.retried === 1, 'b to fail once');
    await first.publish('x', { id: 'a' });
    // a runs; b comes back (count 1) and waits behind it, never started: both held unacked.
    await waitFor(() => consumer.stats.inFlight === 1, 'a to run');
    const api = new ManagementClient({ url: MGMT_URL });
    await waitFor(async () => ((await api.queue(c.queue)) as { messages_unacknowledged?: number } | undefined)?.messages_unacknowledged === 2, 'a and b both held by the consumer', 20_000);
    const closing = first.close();
    release();
    await closing;
    expect(consumer.stats.requeued).toBe(1);
    const second = await connectWarren(topology);
    const seen: Array<{ attempt: number; redelivered: boolean }> = [];
    const after = await second.consume<{ id: string }>(c.name, ({ id }, ctx) => {
      if (id === 'b') seen.push({ attempt: ctx.attempt, redelivered: ctx.raw.fields.redelivered });
    });
    await waitFor(() => seen.length === 1, 'b to come back');
    // A copy would be a first delivery (attempt 1, not redelivered); the nack kept the broker's count.
    expect(seen[0]).toEqual({ attempt: 2, redelivered: true });
    expect(bRuns).toEqual([1]);
    expect(after.stats.parked).toBe(0);
  });

  it('status shows the messages set aside in the work queue (the management API), which its ready count leaves out', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('seen')]: { bindings: ['x'], retry: { inQueue: { min: '30s', max: '30s' }, maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const consumer = await warren.consume(c.name, () => {
      throw new Error('waits 30 s');
    });
    await warren.publish('x', { n: 5 });
    await waitFor(() => consumer.stats.retried === 1, 'the first failure');
    const conn = await rawConnection();
    const api = new ManagementClient({ url: MGMT_URL });
    await waitFor(async () => (await readStatus(conn, topology, { management: api })).consumers[0]?.work.delayed === 1, 'status to count one message set aside', 20_000);
    const report = await readStatus(conn, topology, { management: api });
    expect(report.consumers[0]?.work.ready).toBe(0);
    expect(report.consumers[0]?.retries).toEqual([]);
  });

  it('a queue declared with tier retries, then declared to retry inside: drift names each argument, and nothing is deleted', async () => {
    const tiers = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('drift')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 4 } } } }));
    const c = [...tiers.consumers.values()][0]!;
    const conn = await rawConnection();
    await declareTopology(conn, tiers);
    const inside = defineTopology({ exchange: tiers.exchange, queueType: 'quorum', consumers: { [c.name]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 4 } } } });
    const error = await declareTopology(conn, inside).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(TopologyDriftError);
    expect((error as TopologyDriftError).differences[0]?.name).toBe(c.queue);
    const api = new ManagementClient({ url: MGMT_URL });
    if (await api.available()) {
      const plan = await planTopology(conn, inside, api);
      const work = plan.entries.find((e) => e.kind === 'queue' && e.name === c.queue);
      expect(work?.status).toBe('differs');
      expect(work?.differences.map((d) => [d.argument, d.expected, d.actual])).toEqual([
        ['x-delayed-retry-max', 150, undefined],
        ['x-delayed-retry-min', 50, undefined],
        ['x-delayed-retry-type', 'failed', undefined],
        ['x-delivery-limit', 6, 7],
      ]);
    }
    expect(await exists(c.queue)).toBe(true);
    expect(await exists(c.retryQueues[0]!)).toBe(true);
  });
});

describe.skipIf(HAS_IT)(`retry inside the queue on a broker without it${HAS_IT ? ` (skipped: RabbitMQ ${BROKER} has it; tested above)` : ''}`, () => {
  it('is refused at connect, naming the option and what to do, and nothing is declared', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('old')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 4 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const error = await Warren.connect({ url: AMQP_URL, topology, connectTimeoutMs: 5000 }).then(
      async (w) => {
        await w.close();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(UnsupportedBrokerError);
    const e = error as UnsupportedBrokerError;
    expect(e.option).toBe(`consumers.${c.name}.retry.inQueue`);
    expect(e.server).toMatch(new RegExp(`^RabbitMQ ${BROKER.replace('.', '\\.')}\\.`));
    expect(e.message).toMatch(/needs RabbitMQ 4\.3 or later.*Upgrade the broker.*retry\.delays/);
    expect(await exists(c.queue)).toBe(false);
  });

  it('is refused by a consumer of a Warren that does not declare', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'quorum', consumers: { [name('nodecl')]: { bindings: ['x'], retry: { ...inQueue, maxAttempts: 4 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { declare: false });
    await expect(warren.consume(c.name, () => undefined)).rejects.toBeInstanceOf(UnsupportedBrokerError);
  });
});
