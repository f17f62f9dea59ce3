/**
 * A broker under a memory or disk alarm blocks publishing connections and stops reading
 * them. `confirmTimeoutMs` bounds the whole publish all the same, a blocked connection is
 * not written to, and a publish given up before it was written is never written later.
 * The alarm is imitated for warren's connections only (BlockingProxy), not set on the
 * broker other tests share.
 */
import { describe, expect, it } from 'vitest';
import { HEADER, PublishNotConfirmedError, PublishNotSentError } from '../index.js';
import { AMQP_URL, connectWarren, depth, drain, onTeardown, rawConnection, sleep, testTopology, waitFor } from '../../test/helpers.js';
import { BlockingProxy } from './testing/blocking-proxy.js';

async function throughProxy(): Promise<{ proxy: BlockingProxy; url: string }> {
  const upstream = new URL(AMQP_URL);
  const proxy = await BlockingProxy.start(Number(upstream.port || 5672), upstream.hostname);
  onTeardown(() => proxy.close());
  const url = new URL(AMQP_URL);
  url.port = String(proxy.port);
  return { proxy, url: url.toString() };
}

function setup() {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('alarm')]: { bindings: ['x'] } } }));
  return { topology, queue: [...topology.consumers.values()][0]!.queue };
}

/** A logger that records warnings, to see what the client was told. */
function recordingLogger() {
  const warnings: Array<{ message: string; fields: unknown }> = [];
  return { warnings, logger: { debug() {}, info() {}, error() {}, warn: (message: string, fields?: unknown) => void warnings.push({ message, fields }) } };
}

/** Settles `p`, failing if it takes longer than `ms` (a publish that hangs). */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<PromiseSettledResult<T>> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} still unsettled after ${ms} ms`)), ms)));
  try {
    return await Promise.race([p.then((value) => ({ status: 'fulfilled' as const, value }), (reason: unknown) => ({ status: 'rejected' as const, reason })), hang]);
  } finally {
    clearTimeout(timer);
  }
}

describe('publishing under a resource alarm', () => {
  it('does not write to a blocked connection: publishes fail in time with the broker\'s reason, and retries leave no copies behind', async () => {
    const { proxy, url } = await throughProxy();
    const { topology, queue } = setup();
    const { warnings, logger } = recordingLogger();
    const warren = await connectWarren(topology, { url, logger, publisher: { confirmTimeoutMs: 300 } });
    onTeardown(async () => proxy.unblock());
    const before = await warren.publish('x', { n: 'before' });

    proxy.block('low on memory');
    // Both of warren's connections (consumers', publishes') go through the proxy.
    await waitFor(() => warnings.filter((w) => w.message === 'broker blocked publishing on this connection').length >= 2, 'the client to hear connection.blocked');
    // A caller that retries after each timeout, five times, with the same id.
    for (let attempt = 0; attempt < 5; attempt++) {
      const started = Date.now();
      const result = await within(warren.publish('x', { n: 'retried' }, { messageId: 'retried-id' }), 5000, 'a publish to a blocked connection');
      expect(result.status).toBe('rejected');
      const error = (result as PromiseRejectedResult).reason as Error;
      expect(error).toBeInstanceOf(PublishNotSentError);
      expect(error.message).toMatch(/blocked publishing on this connection \(low on memory\)/);
      expect((error as PublishNotSentError).blockedReason).toBe('low on memory');
      expect(Date.now() - started).toBeLessThan(2000);
    }
    expect(warren.publishConnection.blocked).toBe('low on memory');

    proxy.unblock();
    await waitFor(() => warren.publishConnection.blocked === undefined, 'the client to hear connection.unblocked');
    const after = await warren.publish('x', { n: 'after' });
    // None of the five given-up publishes was written, then or after the alarm.
    expect((await drain(await rawConnection(), queue)).map((m) => m.properties.messageId)).toEqual([before.messageId, after.messageId]);
  });

  it('holds a publish while blocked and sends it once unblocked, within its timeout', async () => {
    const { proxy, url } = await throughProxy();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology, { url, publisher: { confirmTimeoutMs: 5000 } });
    onTeardown(async () => proxy.unblock());
    await warren.publish('x', { n: 0 });
    proxy.block('low on disk');
    await waitFor(() => warren.publishConnection.blocked === 'low on disk', 'the client to hear connection.blocked');
    let settled = false;
    const held = warren.publish('x', { n: 1 }).finally(() => (settled = true));
    await sleep(150);
    expect(settled).toBe(false);
    proxy.unblock();
    const { messageId } = await held;
    expect((await drain(await rawConnection(), queue)).map((m) => m.properties.messageId).slice(1)).toEqual([messageId]);
  });

  it('sends a publish held for a slot as it was at the call: its body, and the id and occurred-at of the call', async () => {
    const { proxy, url } = await throughProxy();
    const { topology, queue } = setup();
    const warren = await connectWarren(topology, { url, publisher: { maxInFlight: 1, confirmTimeoutMs: 10_000 } });
    onTeardown(async () => proxy.unblock());
    await warren.publish('x', { n: 0 });
    proxy.block('low on memory');
    await waitFor(() => warren.publishConnection.blocked === 'low on memory', 'the client to hear connection.blocked');
    const payload = { n: 1, items: ['a'] };
    const calledFrom = Date.now();
    // The first holds the one slot, unwritten while blocked; the second waits for the slot.
    const held = [warren.publish('x', payload), warren.publish('x', payload, { exchange: topology.exchange })];
    const calledTo = Date.now();
    payload.n = 2;
    payload.items.push('b');
    // Written well after the call: a time taken at the write would show it.
    await sleep(60);
    proxy.unblock();
    const ids = (await Promise.all(held)).map((r) => r.messageId);
    const got = (await drain(await rawConnection(), queue)).slice(1);
    expect(got.map((m) => m.properties.messageId)).toEqual(ids);
    for (const m of got) {
      expect(JSON.parse(m.content.toString())).toEqual({ n: 1, items: ['a'] });
      const occurredAt = Date.parse(m.properties.headers?.[HEADER.occurredAt] as string);
      expect(occurredAt).toBeGreaterThanOrEqual(calledFrom);
      expect(occurredAt).toBeLessThanOrEqual(calledTo);
      expect(m.properties.timestamp).toBe(Math.floor(occurredAt / 1000));
      // A UUIDv7 starts with its milliseconds: those of the call.
      expect(parseInt((m.properties.messageId as string).replace(/-/g, '').slice(0, 12), 16)).toBe(occurredAt);
    }
  });

  it('bounds publishes that wait for a socket the broker stopped reading; those given up unwritten are never written later', async () => {
    const { proxy, url } = await throughProxy();
    const { topology, queue } = setup();
    // More in flight than the channel's write buffer and the socket buffers hold, so
    // later publishes have to wait for a drain that does not come while stalled.
    const warren = await connectWarren(topology, { url, publisher: { confirmTimeoutMs: 1000, maxInFlight: 5000 } });
    onTeardown(async () => proxy.unblock());
    await warren.publish('x', { n: -1 });
    await drain(await rawConnection(), queue);
    proxy.stall();
    const content = Buffer.alloc(16_000, 'x');
    const ids: string[] = [];
    let longest = 0;
    const loopStart = Date.now();
    let loopMs = 0;
    queueMicrotask(() => (loopMs = Date.now() - loopStart));
    const results = await within(
      Promise.all(
        Array.from({ length: 2500 }, (_, i) => {
          const messageId = `stall-${i}`;
          ids.push(messageId);
          const called = Date.now();
          return warren.publisher.send({ exchange: topology.exchange, routingKey: 'x', content, properties: { messageId } }).then(
            () => 'confirmed' as const,
            (error: unknown) => error,
          ).finally(() => (longest = Math.max(longest, Date.now() - called)));
        }),
      ),
      20_000,
      'publishes waiting for the socket to drain',
    );
    expect(results.status).toBe('fulfilled');
    const outcomes = (results as PromiseFulfilledResult<unknown[]>).value;
    // Each publish settled within its timeout, counted from when the event loop was free
    // again after making them all, plus a sweep and a busy machine.
    expect(longest).toBeLessThan(loopMs + 1000 + 3000);
    const notSent = ids.filter((_, i) => outcomes[i] instanceof PublishNotSentError);
    const notConfirmed = ids.filter((_, i) => outcomes[i] instanceof PublishNotConfirmedError);
    expect(notSent.length + notConfirmed.length).toBe(ids.length);
    expect(notSent.length).toBeGreaterThan(0);
    expect(notConfirmed.length).toBeGreaterThan(0);
    expect(((outcomes[ids.indexOf(notSent[0] as string)] as Error).message)).toMatch(/did not drain within 1000 ms/);

    proxy.unblock();
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, queue)) >= notConfirmed.length, 'the written messages to arrive', 15_000);
    // Confirmed only once everything written before it was read: had a given-up publish
    // been written late, it would be in the queue by now.
    const marker = await warren.publish('x', { n: 'marker' });
    const got = (await drain(conn, queue)).map((m) => m.properties.messageId as string);
    // Exactly what was written, once each, then the marker: nothing given up unwritten.
    expect(got).toEqual([...notConfirmed, marker.messageId]);
  });
});
