/**
 * warren on a three-node RabbitMQ cluster (scripts/cluster.sh) with quorum queues:
 * publishing and consuming under a steady load while the node the consumer is on is
 * stopped, then the node that leads the work queue; each is brought back before the next.
 * Nothing confirmed is lost, nothing runs twice past the idempotency guard, parked
 * messages stay parked, and the consumer resumes within seconds.
 *
 * The cluster is made of the machine's RabbitMQ 3.10, so this runs once per `npm test`,
 * in the 3.10 run.
 */
import { describe, expect, it } from 'vitest';
import { defineTopology, PermanentError, topologySpec, Warren, type BrokerNode } from '../../src/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { bumpEffect, createEffects, readEffects } from '../../src/store/testing/spec.js';
import { BROKER, onTeardown, sleep, uniqueName, waitFor } from '../helpers.js';
import { clusterNode, clusterUnavailable, CLUSTER_URLS, connectCluster, lockCluster, quorumState, runningNodes, startNode, stopNode, until, type ClusterNode } from './support.js';

const skipReason =
  BROKER !== '3.10'
    ? "the test cluster is three nodes of the machine's RabbitMQ 3.10; it runs once, in the 3.10 run of npm test"
    : await clusterUnavailable();
if (skipReason) console.warn(`test/cluster/failover.test.ts skipped: ${skipReason}`);

/** One failover: what was stopped, and how long the work stopped. */
interface Phase {
  readonly what: string;
  readonly stopped: ClusterNode;
  /** Longest gap between two handled messages from the stop until the node was back. */
  gapMs: number;
  /**
   * When the consumers' connection was lost: from then until the consumer was attached
   * on another node, and until the first message was handled there.
   */
  reattachMs: number | undefined;
  resumeMs: number | undefined;
  /** The node the consumers' connection was on after the stop. */
  after: string | undefined;
  /** How long the node took to stop (rabbitmqctl shutdown), and to start and answer again. */
  stopMs: number;
  startMs: number;
}

describe.skipIf(skipReason !== undefined)(`warren on a RabbitMQ cluster${skipReason ? ` (skipped: ${skipReason})` : ''}`, () => {
  it('loses nothing confirmed and runs nothing twice while the consumer node, then the queue leader, stop and come back', { timeout: 600_000 }, async () => {
    const prefix = uniqueName('cluster');
    const name = `${prefix}.billing`;
    const topology = defineTopology({ exchange: `${prefix}.events`, queueType: 'quorum', consumers: { [name]: { bindings: ['job'], retry: { delays: ['200ms'], maxAttempts: 3 } } } });
    const c = topology.consumer(name);
    onTeardown(await lockCluster(300_000));
    const stopped = new Set<ClusterNode>();
    onTeardown(async () => {
      // A failed run leaves no node down, and none of its queues behind.
      for (const n of stopped) await startNode(n).catch(() => undefined);
      const conn = await connectCluster();
      try {
        const ch = await conn.createChannel();
        for (const q of topologySpec(topology).queues) await ch.deleteQueue(q.name).catch(() => undefined);
        await ch.deleteExchange(topology.exchange).catch(() => undefined);
      } finally {
        await conn.close().catch(() => undefined);
      }
    });

    const h = await harness('sqlite');
    const store = h.store();
    await createEffects(h.spec, store);
    const warren = await Warren.connect({ url: CLUSTER_URLS, topology, connectionName: prefix, connectTimeoutMs: 20_000, reconnect: { initialDelayMs: 50, maxDelayMs: 1000 } });
    onTeardown(() => warren.close());
    const connects: Array<{ node: BrokerNode; at: number }> = [{ node: warren.connection.node!, at: Date.now() }];
    // Emitted once the ready hooks ran: the topology is declared and the consumer attached.
    warren.connection.on('connected', (_generation: number, node: BrokerNode) => connects.push({ node, at: Date.now() }));

    // The work: one effect row per message in the handler's transaction; every 50th
    // message is poison and parks on its first attempt.
    const handledAt: number[] = [];
    const guard = store.idempotency();
    const consumer = await warren.consume(
      name,
      async (payload: { i: number; poison: boolean }, ctx) => {
        if (payload.poison) throw new PermanentError(`message ${payload.i} is poison`);
        await bumpEffect(h.spec, ctx.tx, ctx.messageId as string);
        handledAt.push(Date.now());
      },
      { idempotency: guard, prefetch: 20, concurrency: 4 },
    );

    // A steady stream of publishes with their own ids; one that fails (its node went
    // away) is published again with the same id until it is confirmed.
    const confirmed = new Set<string>();
    const poison = new Set<string>();
    let failedPublishes = 0;
    let publishing = true;
    const inFlight = new Set<Promise<void>>();
    const publishOne = async (i: number): Promise<void> => {
      const id = `${prefix}-${i}`;
      const payload = { i, poison: i % 50 === 49 };
      while (publishing || !confirmed.has(id)) {
        try {
          await warren.publish('job', payload, { messageId: id });
          confirmed.add(id);
          if (payload.poison) poison.add(id);
          return;
        } catch {
          failedPublishes += 1;
          await sleep(100);
        }
      }
    };
    const stream = (async () => {
      for (let i = 0; publishing; i++) {
        while (inFlight.size >= 20) await Promise.race(inFlight);
        const p = publishOne(i).finally(() => inFlight.delete(p));
        inFlight.add(p);
        await sleep(10);
      }
      await Promise.all(inFlight);
    })();

    const flowing = async (what: string): Promise<void> => {
      const before = handledAt.length;
      await waitFor(() => handledAt.length >= before + 50, what, 60_000);
    };
    await flowing('messages to flow through the cluster');

    /** Stops a node, waits for the work to resume, brings the node back and waits for its queue member to be online. */
    const failover = async (what: string, node: ClusterNode): Promise<Phase> => {
      let lostAt: number | undefined;
      const onLost = () => (lostAt ??= Date.now());
      warren.connection.on('disconnected', onLost);
      const start = Date.now();
      stopped.add(node);
      await stopNode(node);
      const stopMs = Date.now() - start;
      await waitFor(() => consumer.attached, `the consumer to attach again after ${what}`, 60_000);
      await flowing(`messages to flow again after ${what}`);
      const lost = lostAt;
      const reattachAt = lost === undefined ? undefined : connects.find((x) => x.at >= lost)!.at;
      const reattachMs = lost === undefined || reattachAt === undefined ? undefined : reattachAt - lost;
      // Handlers that were running when the connection dropped may finish after; their
      // acks are lost, and the guard skips their redelivery. Resuming is work on the new node.
      const resumeMs = lost === undefined || reattachAt === undefined ? undefined : handledAt.find((t) => t >= reattachAt)! - lost;
      warren.connection.off('disconnected', onLost);
      const after = warren.connection.node?.address;
      const startAt = Date.now();
      await startNode(node);
      const startMs = Date.now() - startAt;
      stopped.delete(node);
      await until(async () => ((await runningNodes()).length === 3 ? true : undefined), `${node} to run again`, 120_000);
      await until(async () => ((await quorumState(c.queue)).online.length === 3 ? true : undefined), `the queue's member on ${node} to be online`, 120_000);
      const end = Date.now();
      const times = handledAt.filter((t) => t >= start && t <= end);
      let gapMs = times.length > 0 ? times[0]! - start : end - start;
      for (let k = 1; k < times.length; k++) gapMs = Math.max(gapMs, times[k]! - times[k - 1]!);
      return { what, stopped: node, gapMs, reattachMs, resumeMs, after, stopMs, startMs };
    };

    const phases: Phase[] = [];
    const consumerNode = clusterNode(warren.connection.node!.address);
    phases.push(await failover(`stopping the consumer's node ${consumerNode}`, consumerNode));
    expect(phases[0]!.after, 'the consumers moved to another node').not.toMatch(new RegExp(`:${5700 + Number(consumerNode.slice(1))}$`));
    await flowing('messages to flow with every node back');
    const leader = (await quorumState(c.queue)).leader;
    expect(leader, 'the work queue has a leader').toBeDefined();
    phases.push(await failover(`stopping the queue leader's node ${leader!}`, leader!));
    await flowing('messages to flow with every node back');

    // A few thousand messages in all, however slow this machine is today.
    await waitFor(() => confirmed.size >= 2000, `2000 messages to be confirmed (${confirmed.size} so far)`, 120_000);
    publishing = false;
    await stream;
    const expected = [...confirmed].filter((id) => !poison.has(id));
    await waitFor(async () => (await readEffects(h.spec, store)).size >= expected.length, `every confirmed message to be handled`, 120_000);
    await waitFor(() => consumer.stats.inFlight === 0, 'the consumer to be idle', 30_000);

    const effects = await readEffects(h.spec, store);
    const missing = expected.filter((id) => !effects.has(id));
    const twice = [...effects].filter(([, n]) => n !== 1).map(([id]) => id);
    const unknown = [...effects.keys()].filter((id) => !confirmed.has(id));
    // The parked queue holds every poison message (a redelivered one may be parked twice).
    const conn = await connectCluster();
    onTeardown(() => conn.close());
    const ch = await conn.createChannel();
    const parked = new Set<string>();
    for (;;) {
      const m = await ch.get(c.parkedQueue, { noAck: true });
      if (m === false) break;
      parked.add(m.properties.messageId as string);
    }
    for (const q of c.retryQueues) expect((await ch.checkQueue(q)).messageCount, q).toBe(0);
    expect((await ch.checkQueue(c.queue)).messageCount, 'the work queue ends empty').toBe(0);

    console.log(
      [
        `cluster failover: ${confirmed.size} messages confirmed (${poison.size} poison), ${failedPublishes} publishes repeated after a node went away, ` +
          `${consumer.stats.duplicate} deliveries skipped by the idempotency guard, ${parked.size} parked`,
        ...phases.map(
          (p) =>
            `  ${p.what} (stop ${p.stopMs} ms, start ${p.startMs} ms): longest pause in handling ${p.gapMs} ms; ` +
            (p.reattachMs === undefined ? `the consumers' connection was on another node (${p.after ?? '?'}) and stayed` : `consumer re-attached on ${p.after ?? '?'} ${p.reattachMs} ms after its connection dropped, first message handled there after ${p.resumeMs} ms`),
        ),
        `  consumers' connection: ${connects.map((x) => `${x.node.address} (${x.node.clusterName ?? '?'})`).join(' -> ')}`,
      ].join('\n'),
    );

    expect(confirmed.size, 'a few thousand messages went through').toBeGreaterThanOrEqual(2000);
    expect(missing, `${missing.length} confirmed messages were never handled`).toEqual([]);
    expect(twice, 'messages whose work ran twice past the idempotency guard').toEqual([]);
    expect(unknown, 'work for messages never confirmed').toEqual([]);
    expect(parked).toEqual(poison);
    expect(consumer.stats.parked).toBeGreaterThanOrEqual(poison.size);
    expect(phases[0]!.resumeMs, 'the consumers\' connection was lost when its node stopped').toBeDefined();
    for (const p of phases) {
      expect(p.gapMs, `${p.what}: handling resumes within seconds`).toBeLessThan(20_000);
      if (p.resumeMs !== undefined) expect(p.resumeMs, `${p.what}: the consumer resumes on another node within seconds`).toBeLessThan(20_000);
    }
  });
});
