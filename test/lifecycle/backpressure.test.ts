import { describe, expect, it } from 'vitest';
import { connectWarren, drain, rawConnection, testTopology } from '../helpers.js';

describe('publisher backpressure', () => {
  it('with maxInFlight 5, 200 concurrent publishes never have more than 5 awaiting a confirm, and all are confirmed', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('bp')]: { bindings: ['load'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { publisher: { maxInFlight: 5 } });
    const publisher = warren.publisher;
    const samples: number[] = [];
    let sampling = true;
    // Sample on every turn of the event loop while the publishes run.
    const sampler = (async () => {
      while (sampling) {
        samples.push(publisher.pending);
        await new Promise((r) => setImmediate(r));
      }
    })();
    const receipts = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        warren.publish('load', { i }).then((r) => {
          samples.push(publisher.pending);
          return r;
        }),
      ),
    );
    sampling = false;
    await sampler;

    expect(new Set(receipts.map((r) => r.messageId)).size).toBe(200);
    expect(Math.max(...samples)).toBe(5);
    expect(publisher.pending).toBe(0);
    // All 200 are in the queue, in the order publish() was called: a publish waiting for a
    // slot keeps its place in line.
    const inQueue = (await drain(await rawConnection(), c.queue)).map((m) => m.properties.messageId as string);
    expect(inQueue).toEqual(receipts.map((r) => r.messageId));
  });
});
