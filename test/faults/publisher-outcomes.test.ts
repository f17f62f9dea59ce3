/**
 * A publish's outcome must be its own: a return charged to the publish it belongs to,
 * a channel's close not failing publishes it never carried, every publish settled
 * (and counted) once, close() leaving none pending. Each case failed before the fix
 * it names.
 */
import * as net from 'node:net';
import { describe, expect, it } from 'vitest';
import { BrokerConnection, PublishNotConfirmedError, PublishNotSentError, Publisher, UnroutableError, type LateAnswer } from '../../src/index.js';
import { BlockingProxy } from '../../src/publish/testing/blocking-proxy.js';
import { AMQP_URL, depth, onTeardown, rawConnection, uniqueName, waitFor } from '../helpers.js';

async function publisherOn(url: string, exchange: string, options: ConstructorParameters<typeof Publisher>[2] = {}): Promise<Publisher> {
  const connection = new BrokerConnection({ url, reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
  await connection.open();
  const publisher = new Publisher(connection, exchange, options);
  await publisher.start();
  onTeardown(async () => {
    await publisher.close();
    await connection.close();
  });
  return publisher;
}

/** What a promise settled with, read without awaiting it. */
function outcome<T>(promise: Promise<T>): { state?: 'ok' | Error; value?: T } {
  const o: { state?: 'ok' | Error; value?: T } = {};
  promise.then(
    (value) => Object.assign(o, { state: 'ok', value }),
    (error: Error) => (o.state = error),
  );
  return o;
}

/** A proxy that can hold back what the broker sends (confirms, returns) until released. */
async function holdingProxy(): Promise<{ url: string; hold(): void; release(): void }> {
  const target = Number(new URL(AMQP_URL).port || 5672);
  const links: Array<{ client: net.Socket; held: Buffer[] }> = [];
  let holding = false;
  const server = net.createServer((client) => {
    const up = net.connect(target, '127.0.0.1');
    const link = { client, held: [] as Buffer[] };
    links.push(link);
    up.on('data', (b: Buffer) => (holding ? link.held.push(b) : client.write(b)));
    client.on('data', (b: Buffer) => up.write(b));
    const close = (): void => {
      client.destroy();
      up.destroy();
    };
    client.on('error', close).on('close', close);
    up.on('error', close).on('close', close);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTeardown(async () => {
    for (const l of links) l.client.destroy();
    await new Promise((r) => server.close(r));
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `amqp://guest:guest@127.0.0.1:${port}`,
    hold: () => void (holding = true),
    release: () => {
      holding = false;
      for (const l of links) for (const b of l.held.splice(0)) l.client.write(b);
    },
  };
}

describe('publish outcomes', () => {
  it('charges a return to the publish it belongs to when two alike in id and key route differently (headers exchange)', async () => {
    const raw = await rawConnection();
    const ch = await raw.createChannel();
    const exchange = uniqueName('hdr');
    const queue = `${exchange}.q`;
    await ch.assertExchange(exchange, 'headers', { durable: false, autoDelete: true });
    // Quorum: the routed copy's confirm waits for the commit, so the other's return comes first.
    await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
    onTeardown(async () => void (await ch.deleteQueue(queue)));
    await ch.bindQueue(queue, exchange, '', { 'x-match': 'all', route: 'yes' });
    const publisher = await publisherOn(AMQP_URL, exchange);
    for (let i = 0; i < 10; i++) {
      const routed = outcome(publisher.publish('', { i, pad: 'x'.repeat(50_000) }, { messageId: `same-${i}`, exchange, headers: { route: 'yes' } }));
      const unroutable = outcome(publisher.publish('', { i }, { messageId: `same-${i}`, exchange, headers: { route: 'no' } }));
      await waitFor(() => routed.state !== undefined && unroutable.state !== undefined, `round ${i} to settle`);
      expect(routed.state, `round ${i}: the routed publish`).toBe('ok');
      expect(unroutable.state, `round ${i}: the unroutable publish`).toBeInstanceOf(UnroutableError);
    }
    expect(await depth(raw, queue)).toBe(10);
  });

  it("charges a late return to the publish that timed out, not to the caller's retry with the same id", async () => {
    const raw = await rawConnection();
    const ch = await raw.createChannel();
    const exchange = uniqueName('late');
    const queue = `${exchange}.q`;
    await ch.assertExchange(exchange, 'direct', { durable: false, autoDelete: true });
    await ch.assertQueue(queue, { durable: true });
    onTeardown(async () => void (await ch.deleteQueue(queue)));
    const proxy = await holdingProxy();
    const publisher = await publisherOn(proxy.url, exchange, { confirmTimeoutMs: 300 });
    proxy.hold();
    // Unbound: the broker returns it, but the return is held back past the deadline.
    const first = await publisher.publish('k', { attempt: 1 }, { messageId: 'order-42' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(first).toBeInstanceOf(PublishNotConfirmedError);
    let late: LateAnswer | undefined;
    void (first as PublishNotConfirmedError).late?.then((a) => (late = a));
    await ch.bindQueue(queue, exchange, 'k');
    const retry = outcome(publisher.publish('k', { attempt: 2 }, { messageId: 'order-42' }));
    proxy.release();
    await waitFor(() => retry.state !== undefined && late !== undefined, 'the retry and the late answer');
    expect(retry.state, 'the retry was routed').toBe('ok');
    expect(late, 'the first publish was the one returned').toBe('returned');
    expect(await depth(raw, queue)).toBe(1);
  });

  it('sends publishes waiting for a slot on a new channel when the broker closes the one they would have used', async () => {
    const raw = await rawConnection();
    const ch = await raw.createChannel();
    const exchange = uniqueName('cascade');
    const queue = `${exchange}.q`;
    await ch.assertExchange(exchange, 'direct', { durable: false, autoDelete: true });
    await ch.assertQueue(queue, { durable: true });
    onTeardown(async () => void (await ch.deleteQueue(queue)));
    await ch.bindQueue(queue, exchange, 'k');
    const publisher = await publisherOn(AMQP_URL, exchange, { maxInFlight: 1, confirmTimeoutMs: 5000 });
    const settled: Array<Error | undefined> = [];
    publisher.on('settled', (error: Error | undefined) => settled.push(error));
    // A publish to a missing exchange makes the broker close the channel (404).
    const bad = outcome(publisher.publish('k', {}, { exchange: `${exchange}.missing` }));
    const good = Array.from({ length: 8 }, (_, i) => outcome(publisher.publish('k', { i })));
    await waitFor(() => bad.state !== undefined && good.every((g) => g.state !== undefined), 'every publish to settle');
    expect(bad.state).toBeInstanceOf(PublishNotConfirmedError);
    expect(good.map((g) => g.state)).toEqual(good.map(() => 'ok'));
    expect(await depth(raw, queue)).toBe(8);
    expect(settled).toHaveLength(9);
    expect(publisher.pending).toBe(0);
  });

  it("emits 'settled' for publishes never written, so the not_sent count is real", async () => {
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const publisher = await publisherOn(`amqp://guest:guest@127.0.0.1:${proxy.port}`, 'amq.direct', { maxInFlight: 1, confirmTimeoutMs: 200 });
    const settled: Array<Error | undefined> = [];
    publisher.on('settled', (error: Error | undefined) => settled.push(error));
    proxy.block('low on memory');
    await waitFor(() => (publisher as unknown as { connection: BrokerConnection }).connection.blocked !== undefined, 'the connection to be blocked');
    // One holds the slot and waits to be written; the other waits for the slot.
    const results = await Promise.allSettled([publisher.publish('k', {}), publisher.publish('k', {})]);
    proxy.unblock();
    for (const r of results) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(PublishNotSentError);
    expect(settled.map((e) => e?.constructor.name)).toEqual(['PublishNotSentError', 'PublishNotSentError']);
  });

  it('refuses a message amqplib cannot encode as not sent, keeping the encoder\'s error as its cause, and goes on publishing', async () => {
    const publisher = await publisherOn(AMQP_URL, 'amq.direct');
    // A mover tells an encoding error by its cause (a RangeError or TypeError) and parks with minimal headers.
    for (const [headers, cause] of [[{ big: 'x'.repeat(200_000) }, RangeError], [{ odd: Symbol('s') }, TypeError]] as const) {
      const error = await publisher.send({ exchange: 'amq.direct', routingKey: 'k', content: Buffer.from('{}'), properties: { messageId: 'enc', headers } }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(PublishNotSentError);
      expect((error as Error).cause).toBeInstanceOf(cause);
    }
    expect(publisher.pending).toBe(0);
    await expect(publisher.send({ exchange: 'amq.direct', routingKey: 'k', content: Buffer.from('{}'), properties: { messageId: 'after' } })).rejects.toBeInstanceOf(UnroutableError);
  });

  it('close() leaves no publish pending, even when the broker stopped answering', async () => {
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const connection = new BrokerConnection({ url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, reconnect: { initialDelayMs: 20, maxDelayMs: 100 } });
    await connection.open();
    onTeardown(() => connection.close());
    const publisher = new Publisher(connection, 'amq.direct', { confirmTimeoutMs: 5000, connectTimeoutMs: 300 });
    await publisher.start();
    proxy.stall(); // written, never read by the broker: no confirm comes
    const pending = outcome(publisher.publish('k', {}));
    const started = Date.now();
    await publisher.close();
    expect(Date.now() - started).toBeLessThan(4000);
    await waitFor(() => pending.state !== undefined, 'the publish to settle at close');
    expect(pending.state).toBeInstanceOf(PublishNotConfirmedError);
    expect((pending.state as Error).message).toMatch(/closed before the broker confirmed/);
    proxy.unblock(); // lets the connection close quickly
  });
});
