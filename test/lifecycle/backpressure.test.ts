import { describe, expect, it } from 'vitest';
import { PublishNotConfirmedError, PublishNotSentError } from '../../src/index.js';
import { BlockingProxy } from '../../src/publish/testing/blocking-proxy.js';
import { AMQP_URL, connectWarren, drain, onTeardown, rawConnection, testTopology } from '../helpers.js';

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

  it('bounds the wait for a slot by confirmTimeoutMs: with every slot held by an unconfirmed publish, the rest fail unsent', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('bp')]: { bindings: ['load'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const url = new URL(AMQP_URL);
    url.port = String(proxy.port);
    const warren = await connectWarren(topology, { url: url.toString(), publisher: { maxInFlight: 2, confirmTimeoutMs: 300 } });
    onTeardown(async () => proxy.unblock());
    proxy.stall();
    const started = Date.now();
    const outcomes = await Promise.all(Array.from({ length: 5 }, (_, i) => warren.publish('load', { i }, { messageId: `slot-${i}` }).then(() => 'confirmed', (e: unknown) => e)));
    expect(Date.now() - started).toBeLessThan(3000);
    expect(outcomes.slice(0, 2).every((o) => o instanceof PublishNotConfirmedError)).toBe(true);
    // The rest wait for a slot. One whose deadline falls a millisecond after the first
    // two's (a busy machine) can take a slot their expiry frees, be written, and time
    // out unconfirmed in its turn; at least one never gets a slot and fails unsent.
    const rest = outcomes.slice(2);
    for (const o of rest) expect(o instanceof PublishNotSentError || o instanceof PublishNotConfirmedError, String(o)).toBe(true);
    const unsent = rest.filter((o): o is PublishNotSentError => o instanceof PublishNotSentError);
    expect(unsent.length).toBeGreaterThanOrEqual(1);
    for (const o of unsent) expect(o.message).toMatch(/no free slot within 300 ms/);
    proxy.unblock();
    await warren.publish('load', { last: true }, { messageId: 'last' });
    // What was written arrives; what never had a slot never does.
    const written = outcomes.flatMap((o, i) => (o instanceof PublishNotConfirmedError ? [`slot-${i}`] : []));
    expect((await drain(await rawConnection(), c.queue)).map((m) => m.properties.messageId)).toEqual([...written, 'last']);
  });
});
