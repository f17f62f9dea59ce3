import * as net from 'node:net';
import { describe, expect, it } from 'vitest';
import { HEADER, InvalidOptionError, PublishNotConfirmedError, UnroutableError } from '../index.js';
import { AMQP_URL, connectWarren, drain, onTeardown, rawConnection, testTopology } from '../../test/helpers.js';

describe('publisher', () => {
  it('stamps id, occurred-at, JSON content type and persistence, and keeps a given id', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['order.#'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const occurredAt = new Date('2026-05-01T10:00:00Z');
    const a = await warren.publish('order.created', { n: 1 }, { occurredAt, correlationId: 'corr-1', headers: { tenant: '42' } });
    const b = await warren.publish('order.created', { n: 2 }, { messageId: 'given-id' });
    const [ma, mb] = await drain(await rawConnection(), c.queue);
    expect(ma?.properties).toMatchObject({ messageId: a.messageId, contentType: 'application/json', deliveryMode: 2, correlationId: 'corr-1', timestamp: occurredAt.getTime() / 1000 });
    expect(ma?.properties.headers).toMatchObject({ [HEADER.occurredAt]: occurredAt.toISOString(), tenant: '42' });
    expect(mb?.properties.messageId).toBe(b.messageId);
    expect(b.messageId).toBe('given-id');
    expect(a.messageId < (await warren.publish('order.x', {})).messageId).toBe(true);
  });

  it('rejects an unroutable publish with the key and exchange, and keeps working', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['order.created'] } } }));
    const warren = await connectWarren(topology);
    const error = await warren.publish('order.unknown', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnroutableError);
    expect((error as UnroutableError).routingKey).toBe('order.unknown');
    expect((error as Error).message).toMatch(/no queue is bound/);
    await expect(warren.publish('order.created', {})).resolves.toHaveProperty('messageId');
  });

  it('tells routed from returned among many concurrent publishes', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['good'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const results = await Promise.allSettled(Array.from({ length: 200 }, (_, i) => warren.publish(i % 3 === 0 ? 'bad' : 'good', { i })));
    const rejected = results.filter((r) => r.status === 'rejected');
    expect(rejected).toHaveLength(67);
    for (const r of rejected) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(UnroutableError);
    expect(await drain(await rawConnection(), c.queue)).toHaveLength(133);
  });

  it('refuses what cannot be sent, naming the problem', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['x'] } } }));
    const warren = await connectWarren(topology);
    await expect(warren.publish('', {})).rejects.toThrow(/`routingKey`/);
    await expect(warren.publish('x', undefined)).rejects.toThrow(InvalidOptionError);
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    await expect(warren.publish('x', cyclic)).rejects.toThrow(/`payload`.*JSON/);
  });
});

describe('publisher faults', () => {
  it('charges a return to the publish it belongs to when two share a message id', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['bound'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const [routed, returned] = await Promise.allSettled([
      warren.publish('bound', { n: 1 }, { messageId: 'same-id' }),
      warren.publish('unbound', { n: 2 }, { messageId: 'same-id' }),
    ]);
    expect(routed.status).toBe('fulfilled');
    expect(returned.status).toBe('rejected');
    expect((returned as PromiseRejectedResult).reason).toBeInstanceOf(UnroutableError);
    expect(await drain(await rawConnection(), c.queue)).toHaveLength(1);
  });

  it('says why when the broker closes the channel over a missing exchange, and recovers', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['x'] } } }));
    const warren = await connectWarren(topology);
    await expect(warren.publish('x', {}, { exchange: `${topology.exchange}.missing` })).rejects.toThrow(/not confirmed.*NOT_FOUND/);
    await expect(warren.publish('x', {})).resolves.toHaveProperty('messageId');
  });
});

describe('confirm timeout', () => {
  it('rejects a publish whose confirm does not come, and carries on once the broker answers again', async () => {
    // A forwarder that can stop passing the broker's frames to the client, as a broker
    // under a resource alarm stops answering, while the socket stays open.
    const upstream = new URL(AMQP_URL);
    const sockets: net.Socket[] = [];
    let holding = false;
    const held: Array<[net.Socket, Buffer]> = [];
    const proxy = net.createServer((client) => {
      const server = net.connect(Number(upstream.port || 5672), upstream.hostname);
      sockets.push(client, server);
      client.pipe(server);
      server.on('data', (chunk: Buffer) => {
        if (holding) held.push([client, chunk]);
        else client.write(chunk);
      });
      client.on('error', () => server.destroy());
      server.on('error', () => client.destroy());
      client.on('close', () => server.destroy());
      server.on('close', () => client.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    onTeardown(async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => proxy.close(r));
    });
    const port = (proxy.address() as net.AddressInfo).port;
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['x'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const viaProxy = `amqp://${upstream.username}:${upstream.password}@127.0.0.1:${port}`;
    const warren = await connectWarren(topology, { url: viaProxy, publisher: { confirmTimeoutMs: 300 } });
    await warren.publish('x', { n: 1 });

    holding = true;
    const started = Date.now();
    const error = await warren.publish('x', { n: 2 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PublishNotConfirmedError);
    expect((error as Error).message).toMatch(/no confirm from the broker within 300 ms/);
    expect(Date.now() - started).toBeLessThan(3000);

    holding = false;
    for (const [socket, chunk] of held.splice(0)) socket.write(chunk);
    await expect(warren.publish('x', { n: 3 })).resolves.toHaveProperty('messageId');
    // The broker had the unconfirmed message all along: "not confirmed" never meant "lost".
    expect((await drain(await rawConnection(), c.queue)).map((m) => JSON.parse(m.content.toString()).n)).toEqual([1, 2, 3]);
  });

  it('refuses a confirm timeout out of range, naming the option', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('p')]: { bindings: ['x'] } } }));
    await expect(connectWarren(topology, { publisher: { confirmTimeoutMs: 0 } })).rejects.toThrow(/`confirmTimeoutMs`/);
  });
});
