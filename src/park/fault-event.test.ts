/**
 * Fault events against a real broker: a parked message publishes one small JSON event to
 * the topology's faults exchange (routing key `<consumer>.<reason>`), without the body
 * unless asked, its error message cut to a bound; an event nobody can receive changes
 * nothing about the park.
 */
import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { defineTopology, HEADER, InvalidOptionError, PermanentError, type Topology } from '../index.js';
import { connectWarren, depth, drain, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { faultEvent, faultRoutingKey, type FaultEvent, type FaultEventOptions } from './fault-event.js';
import { describeFailure } from './failure.js';
import { ArchiveIngester } from '../archive/ingest.js';
import { harness } from '../store/testing/harness.js';

const fast = { delays: [20], maxAttempts: 2 };

function topologyWith(faults: Omit<FaultEventOptions, 'exchange'>): { topology: Topology; billing: string; exchange: string } {
  const n = { billing: '', exchange: '' };
  const topology = testTopology(({ exchange, name }) => {
    n.billing = name('billing');
    n.exchange = `${exchange}.faults`;
    return { exchange, faults: { exchange: n.exchange, ...faults }, consumers: { [n.billing]: { bindings: ['order.created'], retry: fast } } };
  });
  return { topology, ...n };
}

/** A queue bound to the faults exchange, as a subscriber would have; deleted after the test. */
async function subscriber(exchange: string, key: string): Promise<{ ch: amqp.Channel; queue: string }> {
  const conn = await rawConnection();
  const ch = await conn.createChannel();
  const { queue } = await ch.assertQueue('', { exclusive: true });
  await ch.bindQueue(queue, exchange, key);
  onTeardown(async () => void (await ch.deleteQueue(queue).catch(() => undefined)));
  return { ch, queue };
}

async function events(ch: amqp.Channel, queue: string, count: number): Promise<{ event: FaultEvent; msg: amqp.GetMessage }[]> {
  const got: { event: FaultEvent; msg: amqp.GetMessage }[] = [];
  await waitFor(async () => {
    const msg = await ch.get(queue, { noAck: true });
    if (msg !== false) got.push({ event: JSON.parse(msg.content.toString('utf8')) as FaultEvent, msg });
    return got.length >= count;
  }, `${count} fault event(s) in ${queue}`);
  return got;
}

describe('fault events', () => {
  it('a permanent error parks the message and publishes one event with the failure and no body', async () => {
    const { topology, billing, exchange } = topologyWith({ consoleUrl: 'https://warren.example/' });
    const warren = await connectWarren(topology);
    const sub = await subscriber(exchange, `${billing}.#`);
    const consumer = await warren.consume(billing, () => {
      throw new PermanentError('customer 42 has no account');
    });
    await warren.publish('order.created', { secret: 'card 4111' }, { messageId: 'm-1' });
    await waitFor(() => consumer.stats.parked === 1, 'the message to be parked');
    const [got] = await events(sub.ch, sub.queue, 1);
    const { event, msg } = got!;
    expect(msg.fields.routingKey).toBe(`${billing}.permanent-error`);
    expect(msg.properties.contentType).toBe('application/json');
    expect(event).toMatchObject({
      type: 'warren.fault',
      stage: 'parked',
      consumer: billing,
      messageId: 'm-1',
      reason: 'permanent-error',
      errorClass: 'PermanentError',
      errorMessage: 'customer 42 has no account',
      errorTruncated: false,
      attempts: 1,
      link: `https://warren.example/parked/${encodeURIComponent(billing)}/messages/m-1`,
    });
    expect(event.fingerprint).toMatch(/^PermanentError: customer <n> has no account/);
    expect(Date.parse(event.parkedAt)).toBeGreaterThan(Date.now() - 60_000);
    expect(event).not.toHaveProperty('body');
    expect(msg.content.toString()).not.toContain('4111');
    // The parked copy says the same: one event, for this message.
    const conn = await rawConnection();
    const parked = await drain(conn, topology.consumer(billing).parkedQueue);
    expect(parked).toHaveLength(1);
    expect(parked[0]!.properties.headers?.[HEADER.parkedReason]).toBe('permanent-error');
    expect(await sub.ch.get(sub.queue)).toBe(false);
    expect(consumer.stats.faultEventsFailed).toBe(0);
  });

  it('cuts a long error message to maxErrorBytes (never inside a character) and says so', async () => {
    const { topology, billing, exchange } = topologyWith({ maxErrorBytes: 100 });
    const warren = await connectWarren(topology);
    const sub = await subscriber(exchange, '#');
    await warren.consume(billing, () => {
      throw new PermanentError('é'.repeat(1000));
    });
    await warren.publish('order.created', { n: 1 }, { messageId: 'long' });
    const [{ event, msg }] = (await events(sub.ch, sub.queue, 1)) as [{ event: FaultEvent; msg: amqp.GetMessage }];
    expect(event.errorTruncated).toBe(true);
    expect(event.errorMessage).toBe('é'.repeat(50));
    expect(Buffer.byteLength(event.fingerprint)).toBeLessThanOrEqual(100);
    expect(msg.content.length).toBeLessThan(1024);
  });

  it('with includeBody, carries the body, cut to maxBodyBytes', async () => {
    const { topology, billing, exchange } = topologyWith({ includeBody: true, maxBodyBytes: 16 });
    const warren = await connectWarren(topology);
    const sub = await subscriber(exchange, '#');
    await warren.consume(billing, () => {
      throw new PermanentError('no');
    });
    await warren.publish('order.created', { order: 'abcdefghijklmnopqrstuvwxyz' }, { messageId: 'with-body' });
    const [{ event }] = (await events(sub.ch, sub.queue, 1)) as [{ event: FaultEvent; msg: amqp.GetMessage }];
    const sent = Buffer.from(JSON.stringify({ order: 'abcdefghijklmnopqrstuvwxyz' }));
    expect(event.body).toEqual({ base64: sent.subarray(0, 16).toString('base64'), bytes: sent.length, truncated: true });
  });

  it('an event nobody can receive (unroutable) is logged and counted, and the message is parked all the same', async () => {
    const { topology, billing } = topologyWith({});
    const logged: string[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (m: string) => void logged.push(m) };
    const warren = await connectWarren(topology, { logger });
    let runs = 0;
    const consumer = await warren.consume(billing, () => {
      runs++;
      throw new PermanentError('no');
    });
    for (let i = 0; i < 3; i++) await warren.publish('order.created', { i }, { messageId: `u-${i}` });
    await waitFor(() => consumer.stats.faultEventsFailed === 3, () => `three failed fault events (now ${consumer.stats.faultEventsFailed})`);
    expect(consumer.stats.parked).toBe(3);
    expect(runs).toBe(3);
    expect(logged.filter((m) => m.startsWith('could not publish a fault event'))).toHaveLength(3);
    const conn = await rawConnection();
    const { parkedQueue, queue } = topology.consumer(billing);
    await waitFor(async () => (await depth(conn, parkedQueue)) === 3, 'three parked messages');
    expect(await depth(conn, queue)).toBe(0);
    // Later messages still park and still publish: the consumer goes on as before.
    const sub = await subscriber(topology.faults!.exchange, '#');
    await warren.publish('order.created', { i: 3 }, { messageId: 'u-3' });
    const [{ event }] = (await events(sub.ch, sub.queue, 1)) as [{ event: FaultEvent; msg: amqp.GetMessage }];
    expect(event.messageId).toBe('u-3');
    expect(consumer.stats.parked).toBe(4);
  });
});

describe('fault events of the archive', () => {
  it('an ingester publishes an archived event for each row it stores, and one that cannot be published leaves the row archived', async () => {
    const { topology, billing, exchange } = topologyWith({});
    const warren = await connectWarren(topology);
    const store = (await harness('sqlite')).store();
    const conn = await rawConnection();
    const consumer = await warren.consume(billing, () => {
      throw new PermanentError('gone');
    });
    // First with nobody bound: the parked and the archived events are both unroutable.
    await warren.publish('order.created', { n: 0 }, { messageId: 'a-0' });
    await waitFor(() => consumer.stats.parked === 1, 'a-0 parked');
    const ingester = new ArchiveIngester({ store, topology, connection: async () => conn }, { batchSize: 10, maxBatchDelayMs: 5 });
    onTeardown(() => ingester.stop());
    ingester.start();
    await waitFor(() => ingester.state()[0]?.faultEventsFailed === 1, () => `one failed archived event (state ${JSON.stringify(ingester.state()[0])})`);
    expect(await store.archive.count({ consumer: billing })).toBe(1);
    // Then with a subscriber: both stages arrive for the next message.
    const sub = await subscriber(exchange, `${billing}.permanent-error`);
    await warren.publish('order.created', { n: 1 }, { messageId: 'a-1' });
    const got = await events(sub.ch, sub.queue, 2);
    expect(got.map((g) => g.event.stage).sort()).toEqual(['archived', 'parked']);
    const archived = got.find((g) => g.event.stage === 'archived')!.event;
    const parked = got.find((g) => g.event.stage === 'parked')!.event;
    expect(archived).toMatchObject({ consumer: billing, messageId: 'a-1', reason: 'permanent-error', errorClass: 'PermanentError', errorMessage: 'gone', attempts: 1 });
    expect(archived.fingerprint).toBe(parked.fingerprint);
    expect(archived).not.toHaveProperty('body');
    await waitFor(async () => (await store.archive.count({ consumer: billing })) === 2, 'two rows archived');
    expect(ingester.state()[0]?.faultEventsFailed).toBe(1);
  });
});

describe('fault event options and shape', () => {
  const consumers = { billing: { bindings: ['order.created'] } };
  it('declares the faults exchange as a topic exchange of the topology', () => {
    const t = defineTopology({ exchange: 'x.events', faults: { exchange: 'x.faults' }, consumers });
    expect(t.exchanges.get('x.faults')).toMatchObject({ type: 'topic', durable: true, passive: false });
    expect(t.faults).toMatchObject({ exchange: 'x.faults', includeBody: false, maxErrorBytes: 1024 });
  });
  it('rejects bad options, naming them', () => {
    expect(() => defineTopology({ faults: { exchange: 'x.events' }, exchange: 'x.events', consumers })).toThrow(/faults\.exchange.*already an exchange/);
    expect(() => defineTopology({ faults: { exchange: 'f', maxErrorBytes: 10 ** 9 }, consumers })).toThrow(InvalidOptionError);
    expect(() => defineTopology({ faults: { exchange: 'f', consoleUrl: 'javascript:alert(1)' }, consumers })).toThrow(/faults\.consoleUrl/);
    expect(() => defineTopology({ faults: { exchange: 'f', includBody: true } as unknown as FaultEventOptions, consumers })).toThrow(/faults\.includBody/);
  });
  it('routes by consumer and reason', () => {
    expect(faultRoutingKey('shop.billing', 'max-attempts')).toBe('shop.billing.max-attempts');
    expect(faultRoutingKey('billing', 'a.b c')).toBe('billing.a_b_c');
    const t = defineTopology({ faults: { exchange: 'f' }, consumers });
    const e = faultEvent(t.faults!, { stage: 'archived', consumer: 'billing', messageId: undefined, reason: 'crash-loop', failure: describeFailure('x'), parkedAt: new Date(0), attempts: 5, body: Buffer.from('b') });
    expect(e).toMatchObject({ messageId: null, stage: 'archived' });
    expect(e).not.toHaveProperty('link');
    expect(e).not.toHaveProperty('body');
  });
});
