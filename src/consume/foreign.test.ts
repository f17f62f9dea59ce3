/**
 * Producers that are not warren, on a real broker: plain amqplib publishes without
 * warren's headers or a message id. The id comes from a header, a payload field or a
 * function, so the idempotency guard (a real SQLite store) dedups them; bodies that are
 * text, bytes or a format of the user's own; and copies that keep the original bytes and
 * properties through retries and parking.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HEADER, InvalidOptionError, type Codec, type ConsumerOptions, type MessageContext } from '../index.js';
import { connectWarren, drain, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { harness } from '../store/testing/harness.js';
import { charsetOf } from './decode.js';
import { messageIdReader } from './message-id.js';

const fast = { delays: [20], maxAttempts: 3 };

interface Seen {
  payload: unknown;
  id: string | undefined;
  raw: MessageContext<unknown>['raw'];
}

/** A consumer on `plain.*` and a raw publisher that sends what a producer that is not warren would. */
async function setup(options: ConsumerOptions<unknown, unknown>, handler?: (payload: unknown, ctx: MessageContext<unknown>) => unknown) {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('plain')]: { bindings: ['plain.*'], retry: fast } } }));
  const c = [...topology.consumers.values()][0]!;
  const warren = await connectWarren(topology);
  const seen: Seen[] = [];
  const consumer = await warren.consume(
    c.name,
    async (payload: unknown, ctx: MessageContext<unknown>) => {
      seen.push({ payload, id: ctx.messageId, raw: ctx.raw });
      await handler?.(payload, ctx);
    },
    options as ConsumerOptions<unknown, undefined>,
  );
  const raw = await rawConnection();
  const ch = await raw.createConfirmChannel();
  const send = async (body: Buffer | string, properties: Record<string, unknown> = {}, key = 'plain.x') => {
    ch.publish(topology.exchange, key, typeof body === 'string' ? Buffer.from(body) : body, properties);
    await ch.waitForConfirms();
  };
  return { c, warren, consumer, seen, raw, send };
}

async function sqliteGuard() {
  const h = await harness('sqlite');
  return h.store().idempotency();
}

describe('message id from a producer that sets none', () => {
  it('from a header: the guard runs the work once per id and acks a second copy of the message as a duplicate', async () => {
    const idempotency = await sqliteGuard();
    const t = await setup({ idempotency, messageIdFrom: { header: 'x-request-id' } });
    await t.send('{"n":1}', { headers: { 'x-request-id': 'req-1' } });
    await t.send('{"n":1}', { headers: { 'x-request-id': 'req-1' } });
    await t.send('{"n":2}', { headers: { 'x-request-id': 'req-2' } });
    await waitFor(() => t.consumer.stats.acked + t.consumer.stats.duplicate === 3, 'three deliveries settled');
    expect(t.consumer.stats).toMatchObject({ acked: 2, duplicate: 1, parked: 0 });
    expect(t.seen.map((s) => s.id)).toEqual(['req-1', 'req-2']);
    expect(t.seen[0]?.raw.properties.messageId).toBeUndefined();
  });

  it('from a header: a copy the broker redelivers after the work committed (its channel closed before the ack) is acked, the handler run once', async () => {
    const real = await sqliteGuard();
    let closeAfterCommit = true;
    const cut: { channel?: () => { close(): Promise<void> } | undefined } = {};
    // The real guard commits; then the consumer's channel closes before the consumer can ack.
    const guard: typeof real = Object.assign(Object.create(real) as typeof real, {
      run: async (...args: Parameters<typeof real.run>) => {
        const result = await real.run(...args);
        if (closeAfterCommit) {
          closeAfterCommit = false;
          await cut.channel?.()?.close();
        }
        return result;
      },
    });
    const t = await setup({ idempotency: guard, messageIdFrom: { header: 'x-request-id' } });
    // The consumer's channel is private; a test reaches it to cut it at the worst moment.
    cut.channel = () => (t.consumer as unknown as { channel: { close(): Promise<void> } | undefined }).channel;
    await t.send('{"n":1}', { headers: { 'x-request-id': 'req-r' } });
    // The copy comes back while the first run is still ending here: it is held, then acked
    // by that run's outcome (were it to come later, the guard would find it a duplicate).
    await waitFor(() => t.consumer.stats.acked + t.consumer.stats.duplicate === 1 && t.consumer.stats.inFlight === 0, 'the redelivered copy to be acked');
    expect(t.seen.map((s) => s.id)).toEqual(['req-r']);
    expect(t.consumer.stats).toMatchObject({ parked: 0, retried: 0 });
    expect(t.consumer.stats.acked + t.consumer.stats.duplicate).toBe(1);
  });

  it('from a payload field (a number becomes its text) and from a function', async () => {
    const byField = await setup({ idempotency: await sqliteGuard(), messageIdFrom: { field: 'order.id' } });
    for (const body of ['{"order":{"id":42}}', '{"order":{"id":42},"again":true}', '{"order":{"id":"43"}}']) await byField.send(body);
    await waitFor(() => byField.consumer.stats.acked + byField.consumer.stats.duplicate === 3, 'three deliveries settled');
    expect(byField.consumer.stats).toMatchObject({ acked: 2, duplicate: 1 });
    expect(byField.seen.map((s) => s.id)).toEqual(['42', '43']);

    const byFunction = await setup({
      idempotency: await sqliteGuard(),
      messageIdFrom: (msg) => (msg.properties.appId === undefined ? undefined : `${String(msg.properties.appId)}:${String(msg.properties.headers?.['seq'])}`),
    });
    await byFunction.send('{}', { appId: 'legacy', headers: { seq: 7 } });
    await byFunction.send('{}', { appId: 'legacy', headers: { seq: 7 } });
    await waitFor(() => byFunction.consumer.stats.acked + byFunction.consumer.stats.duplicate === 2, 'both deliveries settled');
    expect(byFunction.consumer.stats).toMatchObject({ acked: 1, duplicate: 1 });
    expect(byFunction.seen.map((s) => s.id)).toEqual(['legacy:7']);
  });

  it('the id stays the same on a retried copy, and a producer-set message id still wins', async () => {
    let failures = 0;
    const t = await setup({ idempotency: await sqliteGuard(), messageIdFrom: { header: 'x-request-id' } }, () => {
      if (failures++ === 0) throw new Error('flaky');
    });
    await t.send('{"n":1}', { headers: { 'x-request-id': 'req-9' } });
    await t.send('{"n":2}', { messageId: 'own-id', headers: { 'x-request-id': 'ignored' } });
    await waitFor(() => t.consumer.stats.acked === 2, 'both handled');
    expect(t.consumer.stats.retried).toBe(1);
    // The retry and the second message may arrive in either order.
    expect(t.seen.map((s) => s.id).sort()).toEqual(['own-id', 'req-9', 'req-9']);
    expect(t.seen.filter((s) => s.id === 'req-9').map((s) => s.payload)).toEqual([{ n: 1 }, { n: 1 }]);
  });

  it('with a guard, a message whose id is not where messageIdFrom looks is parked, saying where it looked', async () => {
    const t = await setup({ idempotency: await sqliteGuard(), messageIdFrom: { header: 'x-request-id' } });
    await t.send('{"n":1}', { headers: { 'x-other': 'r' } });
    await t.send('{"n":2}', { headers: { 'x-request-id': { nested: true } } });
    await waitFor(() => t.consumer.stats.parked === 2, 'both parked');
    expect(t.seen).toEqual([]);
    const parked = new Map((await drain(t.raw, t.c.parkedQueue)).map((m) => [m.content.toString(), m.properties.headers ?? {}]));
    expect([...parked.values()].map((h) => h[HEADER.parkedReason])).toEqual(['missing-message-id', 'missing-message-id']);
    expect(String(parked.get('{"n":1}')?.[HEADER.errorMessage])).toMatch(/header 'x-request-id' is absent \(messageIdFrom: header 'x-request-id'\)/);
    expect(String(parked.get('{"n":2}')?.[HEADER.errorMessage])).toMatch(/holds a value of type object, not a text or number id/);
  });

  it('refuses an unusable option with a clear error', async () => {
    await expect(setup({ messageIdFrom: { field: 'a..b' } })).rejects.toThrow(/`messageIdFrom.field`.*not a dotted path/);
    await expect(setup({ messageIdFrom: { field: 'id' }, decoder: 'buffer' })).rejects.toThrow(InvalidOptionError);
    await expect(setup({ messageIdFrom: 'x-request-id' as never })).rejects.toThrow(/`messageIdFrom`: expected \{ header: name \}/);
    await expect(setup({ decoder: 'xml' as never })).rejects.toThrow(/`decoder`: "xml" is not a decoder/);
  });
});

describe('bodies that are not JSON', () => {
  it("'text' reads the charset the content type names; a failure retries and parks the original bytes and properties unchanged", async () => {
    const t = await setup({ decoder: 'text' }, () => {
      throw new Error('cannot handle it yet');
    });
    const latin1 = Buffer.from([0x63, 0x61, 0x66, 0xe9]); // "café" in ISO-8859-1: not valid UTF-8
    const properties = { contentType: 'text/plain; charset=iso-8859-1', contentEncoding: 'identity', correlationId: 'c-1', type: 'note', appId: 'legacy', headers: { 'x-app': 'old' } };
    await t.send(latin1, properties);
    await waitFor(() => t.consumer.stats.parked === 1, 'parked after its retries');
    expect(t.seen.map((s) => s.payload)).toEqual(['café', 'café', 'café']);
    const [m] = await drain(t.raw, t.c.parkedQueue);
    expect(m?.content.equals(latin1)).toBe(true);
    const { headers, ...props } = m!.properties;
    expect(props).toMatchObject({ contentType: properties.contentType, contentEncoding: 'identity', correlationId: 'c-1', type: 'note', appId: 'legacy' });
    expect(props.messageId).toBeUndefined();
    expect(headers?.['x-app']).toBe('old');
    expect(headers?.[HEADER.parkedReason]).toBe('max-attempts');
    // The copy each retry delivered was the original too.
    for (const s of t.seen) expect(s.raw.content.equals(latin1)).toBe(true);
  });

  it("'text' parks a body it cannot read, naming the decoder", async () => {
    const t = await setup({ decoder: 'text' });
    await t.send(Buffer.from([0xff, 0xfe, 0x41]), { contentType: 'text/plain' });
    await waitFor(() => t.consumer.stats.parked === 1, 'parked');
    const [m] = await drain(t.raw, t.c.parkedQueue);
    expect(m?.properties.headers?.[HEADER.parkedReason]).toBe('invalid-payload');
    expect(String(m?.properties.headers?.[HEADER.errorMessage])).toMatch(/The 'text' decoder could not read the body as utf-8; 3 bytes, content type text\/plain/);
  });

  it("'buffer' hands over a copy of the bytes: a handler that writes into it does not change the retried copy", async () => {
    const bytes = Buffer.from([0x00, 0xff, 0x10, 0x80, 0x7f]);
    let runs = 0;
    const t = await setup({ decoder: 'buffer' }, (payload) => {
      runs++;
      (payload as Buffer).fill(0);
      if (runs === 1) throw new Error('once');
    });
    await t.send(bytes, { contentType: 'application/octet-stream' });
    await waitFor(() => t.consumer.stats.acked === 1, 'handled on the retry');
    expect(t.seen).toHaveLength(2);
    for (const s of t.seen) {
      expect(Buffer.isBuffer(s.payload)).toBe(true);
      expect(s.raw.content.equals(bytes)).toBe(true);
      expect(s.raw.properties.contentType).toBe('application/octet-stream');
    }
  });

  it('a codec decodes, the schema validates what it returns, and a codec that throws parks naming it', async () => {
    const kv: Codec<Record<string, string>> = {
      name: 'key-value',
      decode(body, properties) {
        if (properties.contentType !== 'text/x-kv') throw new Error(`content type ${String(properties.contentType)} is not text/x-kv`);
        return Object.fromEntries(body.toString('utf8').split(';').map((pair) => pair.split('=') as [string, string]));
      },
    };
    const schema = z.object({ order: z.string().regex(/^\d+$/), state: z.enum(['paid', 'void']) });
    const t = await setup({ decoder: kv, schema });
    await t.send('order=42;state=paid', { contentType: 'text/x-kv' });
    await t.send('order=abc;state=paid', { contentType: 'text/x-kv' });
    await t.send('order=43;state=paid', { contentType: 'application/json', contentEncoding: 'gzip' });
    await waitFor(() => t.consumer.stats.acked === 1 && t.consumer.stats.parked === 2, 'one handled, two parked');
    expect(t.seen.map((s) => s.payload)).toEqual([{ order: '42', state: 'paid' }]);
    const parked = await drain(t.raw, t.c.parkedQueue);
    const byBody = new Map(parked.map((m) => [m.content.toString(), m]));
    const bad = byBody.get('order=abc;state=paid')?.properties;
    expect(bad?.headers?.[HEADER.parkedReason]).toBe('invalid-payload');
    expect(String(bad?.headers?.[HEADER.errorMessage])).toMatch(/does not match the schema: order/);
    const thrown = byBody.get('order=43;state=paid')?.properties;
    expect(thrown?.headers?.[HEADER.parkedReason]).toBe('invalid-payload');
    expect(String(thrown?.headers?.[HEADER.errorMessage])).toMatch(/The decoder 'key-value' threw \(content type application\/json is not text\/x-kv\)/);
    expect(thrown).toMatchObject({ contentType: 'application/json', contentEncoding: 'gzip' });
  });

  it('an asynchronous codec is awaited; its rejection parks like a throw', async () => {
    const slow: Codec = { name: 'async', decode: async (body) => (body.toString() === 'bad' ? Promise.reject(new Error('nope')) : { text: body.toString() }) };
    const t = await setup({ decoder: slow });
    await t.send('good');
    await t.send('bad');
    await waitFor(() => t.consumer.stats.acked === 1 && t.consumer.stats.parked === 1, 'one handled, one parked');
    expect(t.seen.map((s) => s.payload)).toEqual([{ text: 'good' }]);
    const [m] = await drain(t.raw, t.c.parkedQueue);
    expect(String(m?.properties.headers?.[HEADER.errorMessage])).toMatch(/The decoder 'async' threw \(nope\)/);
  });
});

describe('pure parts', () => {
  it('reads the charset of a content type', () => {
    expect(charsetOf('text/plain; charset=ISO-8859-1')).toBe('iso-8859-1');
    expect(charsetOf('text/plain;charset="utf-8"')).toBe('utf-8');
    expect(charsetOf('text/plain')).toBeUndefined();
    expect(charsetOf(undefined)).toBeUndefined();
  });

  it('reads ids and says why there is none', () => {
    const msg = (headers: Record<string, unknown>) => ({ content: Buffer.alloc(0), fields: {}, properties: { headers } }) as never;
    const header = messageIdReader({ header: 'id' })!;
    expect(header.read(msg({ id: 'a' }), undefined)).toEqual({ id: 'a' });
    expect(header.read(msg({ id: 12 }), undefined)).toEqual({ id: '12' });
    expect(header.read(msg({ id: Buffer.from('b') }), undefined)).toEqual({ id: 'b' });
    expect(header.read(msg({ id: '' }), undefined)).toMatchObject({ id: undefined, why: "the header 'id' is empty" });
    expect(header.read(msg({ id: 'x'.repeat(256) }), undefined)).toMatchObject({ why: /256 characters long, more than 255/ });
    expect(header.read(msg({ id: '\u00e9'.repeat(128) }), undefined)).toMatchObject({ why: /256 bytes long in UTF-8, more than the 255 of an AMQP message id/ });
    expect(header.read(msg({ id: '\u00e9'.repeat(127) }), undefined)).toEqual({ id: '\u00e9'.repeat(127) });
    const field = messageIdReader({ field: 'a.b' })!;
    expect(field.read(msg({}), { a: { b: 'c' } })).toEqual({ id: 'c' });
    expect(field.read(msg({}), { a: Object.create({ b: 'inherited' }) })).toMatchObject({ why: "the payload field 'a.b' is absent" });
    const fn = messageIdReader(() => {
      throw new Error('boom');
    })!;
    expect(fn.read(msg({}), undefined)).toMatchObject({ why: 'the messageIdFrom function threw (boom)' });
    expect(messageIdReader(undefined)).toBeUndefined();
  });
});
