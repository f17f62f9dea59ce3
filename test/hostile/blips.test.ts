/**
 * The crash-loop guard counts deaths, not blips: a redelivery after a channel or
 * connection loss that this process lived through is not a crash. (Deaths, a process
 * killed while holding the message, are test/lifecycle/crash-loop.test.ts.)
 */
import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import type { QueueType } from '../../src/index.js';
import { connectWarren, depth, rawConnection, testTopology, waitFor } from '../helpers.js';

const CRASH_LIMIT = 2;

/** Destroys the socket under a connection: the process lives on, its channels close. */
function cutSocket(model: amqp.ChannelModel): void {
  (model as unknown as { connection: { stream: { destroy(error: Error): void } } }).connection.stream.destroy(new Error('socket cut by the test'));
}

describe.each<[QueueType, number]>([
  ['classic', CRASH_LIMIT * 2 + 1],
  // The broker's own delivery limit (crashLimit + 2) counts blips too: stay under it.
  ['quorum', CRASH_LIMIT + 1],
])('connection blips on a %s queue', (queueType, blips) => {
  it(`a message in flight through ${blips} socket losses (crashLimit ${CRASH_LIMIT}) is handled, not parked as a crash loop`, async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType, crashLimit: CRASH_LIMIT, consumers: { [name('blip')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    let runs = 0;
    const release: Array<() => void> = [];
    const consumer = await warren.consume(c.name, async () => {
      runs++;
      if (runs <= blips) await new Promise<void>((r) => release.push(r));
    }, { concurrency: blips + 2, prefetch: blips + 2 });
    await warren.publish('x', { n: 1 });
    for (let i = 1; i <= blips; i++) {
      await waitFor(() => runs === i, `handler run ${i} to start`);
      cutSocket(await warren.connection.waitReady(5000));
    }
    await waitFor(() => runs === blips + 1, 'the message to be delivered again after the last blip', 15_000);
    for (const r of release) r();
    await waitFor(() => consumer.stats.acked === 1, 'the message to be acked');
    expect(consumer.stats.parked).toBe(0);
    expect(consumer.stats.redeliveryMoved).toBe(0);
    const raw = await rawConnection();
    expect(await depth(raw, c.parkedQueue)).toBe(0);
    await warren.close();
    expect(await depth(raw, c.queue)).toBe(0);
  });
});
