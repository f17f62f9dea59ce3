/**
 * close() that lands while a reconnect's setup closes a channel. amqplib's
 * `channel.close()` settles only when the broker's close-ok is read, and a connection
 * that has begun to close reads no other channel's frames: the promise never settles.
 * A setup step that awaited it held its connection's close(), and `warren.close()`,
 * for ever (found as a test's teardown that timed out on a busy machine).
 */
import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { closeChannel } from '../../src/connection/channel.js';
import { TcpProxy } from '../../src/store/testing/tcp-proxy.js';
import { AMQP_URL, connectRaw, connectWarren, onTeardown, testTopology, waitFor } from '../helpers.js';

/** `promise`'s outcome, or 'pending' if it has not settled within `ms`. */
function settledWithin(promise: Promise<unknown>, ms: number): Promise<'settled' | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.then(
      () => 'settled' as const,
      () => 'settled' as const,
    ),
    new Promise<'pending'>((r) => (timer = setTimeout(() => r('pending'), ms))),
  ]).finally(() => clearTimeout(timer));
}

async function channelPrototype(): Promise<{ close: (this: amqp.Channel) => Promise<void> }> {
  const raw = await connectRaw();
  const ch = await raw.createChannel();
  const proto = Object.getPrototypeOf(ch) as { close: (this: amqp.Channel) => Promise<void> };
  await raw.close();
  return proto;
}

describe('a channel closed as its connection closes', () => {
  it("amqplib's close() never settles; closeChannel settles at once", async () => {
    const model = await connectRaw();
    const plain = await model.createChannel();
    const ours = await model.createChannel();
    const bare = plain.close();
    const helped = closeChannel(ours);
    // The connection begins to close before either close-ok is read.
    await model.close();
    expect(await settledWithin(helped, 2000)).toBe('settled');
    // What warren works around: if this ever settles, amqplib has changed.
    expect(await settledWithin(bare, 500)).toBe('pending');
  });

  it('closeChannel settles on a channel that closes normally, and on one closed already', async () => {
    const model = await connectRaw();
    onTeardown(() => model.close());
    const ch = await model.createChannel();
    expect(await settledWithin(closeChannel(ch), 2000)).toBe('settled');
    expect(await settledWithin(closeChannel(ch), 1000)).toBe('settled');
    // The connection still works: nothing was torn down with the channel.
    await (await model.createChannel()).close();
  });

  it('the connection\'s close() ends when it lands while a reconnect closes a setup channel', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('audit')]: { bindings: ['order.*'] } } }));
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const u = new URL(AMQP_URL);
    u.port = String(proxy.port);
    // connectTimeoutMs above the bound below: the fix must not be the close's own bound.
    const warren = await connectWarren(topology, { url: u.toString(), connectTimeoutMs: 20_000, reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
    // The connection consumers use, which warren.close() closes after its publishers.
    const connection = (warren as unknown as { connection: { connecting?: Promise<void>; model?: { connection: unknown }; close(): Promise<void> } }).connection;
    const proto = await channelPrototype();
    const close = proto.close;
    let closing: Promise<void> | undefined;
    // The moment that matters: the channel's close request is written, its close-ok not yet read.
    proto.close = function (this: amqp.Channel) {
      const request = close.call(this);
      const own = (this as unknown as { connection: unknown }).connection;
      if (closing === undefined && connection.connecting !== undefined && own === connection.model?.connection) closing = connection.close();
      return request;
    };
    try {
      await proxy.cut();
      await proxy.restore();
      await waitFor(() => closing !== undefined, 'a setup channel to close during the reconnect', 15_000);
    } finally {
      proto.close = close;
    }
    expect(await settledWithin(closing!, 8000)).toBe('settled');
    expect(await settledWithin(warren.close(), 8000)).toBe('settled');
  });
});
