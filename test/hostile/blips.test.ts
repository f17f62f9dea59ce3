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
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    // Each blip gives the message back to the broker while its run goes on here: the
    // redelivery is held until that run ends (never run beside it), then settled by its outcome.
    let held = 0;
    const warn = (message: string) => {
      if (message.includes('a redelivery of a message still running here')) held += 1;
    };
    const logger = { debug: () => undefined, info: () => undefined, warn, error: () => undefined };
    const consumer = await warren.consume(c.name, async () => {
      runs++;
      if (runs === 1) await first;
    }, { concurrency: blips + 2, prefetch: blips + 2, logger });
    await warren.publish('x', { n: 1 });
    await waitFor(() => runs === 1, 'the handler to start');
    for (let i = 1; i <= blips; i++) {
      cutSocket(await warren.connection.waitReady(5000));
      await waitFor(() => held === i, `the message back after blip ${i}, held behind its run`, 15_000);
    }
    release();
    await waitFor(() => consumer.stats.acked === 1, 'the message to be acked');
    expect(runs, 'one run, however many blips').toBe(1);
    expect(consumer.stats.parked).toBe(0);
    expect(consumer.stats.redeliveryMoved).toBe(0);
    const raw = await rawConnection();
    expect(await depth(raw, c.parkedQueue)).toBe(0);
    await warren.close();
    expect(await depth(raw, c.queue)).toBe(0);
  });
});
