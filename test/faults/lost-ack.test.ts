/**
 * An ack written to a connection that is already dead (the network stopped carrying
 * the client's bytes; the broker's heartbeat finds it) never reaches the broker: the
 * message comes back marked redelivered. The handler succeeded and the process lived:
 * that redelivery is a blip, and the crash-loop guard must not count it as a death.
 * The broker's own frames (heartbeats) keep reaching the client all along, so only its
 * reply to a request written after the ack proves the ack was read.
 */
import { describe, expect, it } from 'vitest';
import type { QueueType } from '../../src/index.js';
import { hash53 } from '../../src/consume/delivery.js';
import { BlockingProxy } from '../../src/publish/testing/blocking-proxy.js';
import { AMQP_URL, connectWarren, depth, rawConnection, testTopology, waitFor } from '../helpers.js';

describe.each<QueueType>(['classic', 'quorum'])('acks lost on a connection that died silently (%s queue)', (queueType) => {
  it('a message whose handler succeeded, but whose ack was lost twice, is handled again, not parked', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType, crashLimit: 2, consumers: { [name('lostack')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    const warren = await connectWarren(topology, { url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, heartbeatSeconds: 1, reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    let runs = 0;
    let gate: (() => void) | undefined;
    const consumer = await warren.consume(c.name, async () => {
      runs++;
      if (runs <= 2) await new Promise<void>((r) => (gate = r));
    });
    let losses = 0;
    warren.connection.on('disconnected', () => losses++);
    await warren.publish('x', { n: 1 });
    for (let i = 1; i <= 2; i++) {
      await waitFor(() => runs === i && gate !== undefined, `handler run ${i} to start`);
      proxy.stall(); // the client's bytes stop reaching the broker; the broker's still arrive
      const release = gate!;
      gate = undefined;
      release(); // succeeds: the ack goes nowhere
      await waitFor(() => losses === i, `the broker's heartbeat to end connection ${i}`, 10_000);
      proxy.unblock();
    }
    await waitFor(() => consumer.stats.acked + consumer.stats.parked >= 3, 'the message to reach an outcome after the losses', 15_000);
    const raw = await rawConnection();
    expect(runs).toBe(3);
    expect(consumer.stats.parked, 'a handler that succeeded every time must not be parked as a crash loop').toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
    expect(consumer.stats.redeliveryMoved, 'a lost ack is a blip this process lived through, not a death').toBe(0);
    await warren.close();
    await proxy.close();
    expect(await depth(raw, c.queue)).toBe(0);
  });
});

describe('an ack the broker was seen to read', () => {
  it('is not noted as in doubt when its channel is lost', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'classic', crashLimit: 2, consumers: { [name('proven')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    const consumer = await warren.consume(c.name, async () => undefined);
    await warren.publish('x', { n: 1 }, { messageId: 'proven' });
    await waitFor(() => consumer.stats.acked === 1, 'warren to ack it');
    // The consumer's blip memory is private; the test reads it to see the proof arrive.
    const internals = (consumer as unknown as { blips: { unprovenAcks: Map<unknown, unknown>; seenInFlight: Map<number, unknown> } }).blips;
    await waitFor(() => internals.unprovenAcks.size === 0, 'the broker to answer after the ack', 10_000);
    const model = await warren.connection.waitReady(5000);
    (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
    await waitFor(() => consumer.attached && warren.connection.currentGeneration === 2, 'the consumer to re-attach', 5_000);
    expect(internals.seenInFlight.has(hash53('proven')), 'an ack the broker answered after is not in doubt').toBe(false);
    await warren.close();
  });
});

describe('deliveries that may have been in transit at a loss', () => {
  it('excuse no more unexplained redeliveries than the prefetch less what the channel held: past that, a death still counts', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'classic', crashLimit: 2, consumers: { [name('transit')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    const raw = await rawConnection();
    // Another consumer takes three messages and holds them.
    const other = await raw.createChannel();
    await other.prefetch(3);
    let held = 0;
    await other.consume(c.queue, () => void (held += 1), { noAck: false });
    for (let i = 0; i < 3; i++) other.sendToQueue(c.queue, Buffer.from(`{"i":${i}}`), { messageId: `held-${i}`, contentType: 'application/json', persistent: true });
    await waitFor(() => held === 3, 'the other consumer to hold three');
    // warren's channel (prefetch 2, holding nothing) is lost: up to two unexplained redeliveries may be deliveries it lost in transit.
    const consumer = await warren.consume(c.name, async () => undefined, { prefetch: 2 });
    const model = await warren.connection.waitReady(5000);
    (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
    await waitFor(() => consumer.attached && warren.connection.currentGeneration === 2, 'the consumer to re-attach', 5_000);
    // Then the other consumer dies holding three: two are excused, the third counts.
    await other.close();
    await waitFor(() => consumer.stats.acked === 3, 'the three to be handled');
    // The third is moved to the back of the queue with its death counted, and counted once
    // the move's confirm is in; its copy can be delivered and handled before that confirm
    // arrives (the broker confirms a persistent message once it is on disk), so wait for it.
    await waitFor(() => consumer.stats.redeliveryMoved > 0, 'the third redelivery to be counted as a death', 10_000);
    expect(consumer.stats.redeliveryMoved, 'the third redelivery is a death this process cannot explain').toBe(1);
    expect(consumer.stats.acked).toBe(3);
    await warren.close();
  });
});
