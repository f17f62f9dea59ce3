/**
 * The hostile-input corpus: messages a hostile or broken peer publishes with a bare
 * client (amqplib, not warren's publisher), and errors a broken handler throws. Each
 * class ends in the outcome docs/hostile-input.md states for it, and the consumer goes
 * on working: a normal message published right after each hostile one is handled.
 *
 * One topology for the file, three consumers: `plain` (no schema; its classifier, its
 * outcome listener and its logger all throw), `schema` (a zod schema behind a validator
 * that throws on request) and `guarded` (an idempotency guard).
 */
import { gzipSync } from 'node:zlib';
import * as amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTopology, HEADER, PermanentError, Warren, type IdempotencyGuard, type Logger, type StandardSchemaV1, type Topology } from '../../src/index.js';
import { AMQP_URL, deleteTopology, uniqueName, waitFor } from '../helpers.js';

type Act = 'ok' | 'read-field' | 'throw' | 'permanent' | 'throw-string' | 'throw-undefined' | 'throw-null' | 'throw-getter' | 'throw-proxy' | 'huge-message' | 'huge-name' | 'odd-fields' | 'getters-throw' | 'nul-surrogates';

const prefix = uniqueName('hostile');
const names = { plain: `${prefix}.plain`, schema: `${prefix}.schema`, guarded: `${prefix}.guarded` };
let topology: Topology;
let warren: Warren;
let conn: amqp.ChannelModel;
let pub: amqp.ConfirmChannel;
const handled = new Map<string, number>();
const parked = new Map<string, amqp.ConsumeMessage>();
let serial = 0;

/** A handler that does what the message's `hostile-act` header says. */
function handler(payload: unknown, ctx: { headers: Readonly<Record<string, unknown>> }): void {
  const id = String(ctx.headers['hostile-id']);
  const act = String(ctx.headers['hostile-act'] ?? 'ok') as Act;
  switch (act) {
    case 'ok':
      break;
    case 'read-field':
      // A handler that trusts the payload to be an object.
      void (payload as { orderId: { toString(): string } }).orderId.toString();
      break;
    case 'throw':
      throw new Error('transient failure');
    case 'permanent':
      throw new PermanentError('permanent failure');
    case 'throw-string':
      throw 'a bare string';
    case 'throw-undefined':
      throw undefined;
    case 'throw-null':
      throw null;
    case 'throw-getter':
      throw Object.defineProperty({}, 'message', { get: () => { throw new Error('getter'); }, enumerable: true });
    case 'throw-proxy':
      throw new Proxy({}, { get: () => { throw new Error('trap'); }, getPrototypeOf: () => { throw new Error('trap'); }, ownKeys: () => { throw new Error('trap'); } });
    case 'huge-message':
      throw new Error('m'.repeat(1_000_000));
    case 'huge-name':
      throw Object.assign(new Error('named'), { name: 'N'.repeat(100_000) });
    case 'odd-fields':
      throw Object.assign(new Error('odd'), { name: { not: 'a string' }, message: 42, stack: { frames: [] } });
    case 'getters-throw': {
      const e = new Error('x');
      for (const k of ['stack', 'name', 'message']) Object.defineProperty(e, k, { get: () => { throw new Error(`${k} getter`); } });
      throw e;
    }
    case 'nul-surrogates':
      throw Object.assign(new Error('nul\u0000 lone \ud800 and \udfff end'), { name: 'Bad\u0000Name\ud83d' });
  }
  handled.set(id, (handled.get(id) ?? 0) + 1);
}

const hostileLogger: Logger = {
  debug: () => { throw new Error('logger'); },
  info: () => { throw new Error('logger'); },
  warn: () => { throw new Error('logger'); },
  error: () => { throw new Error('logger'); },
};

const orderSchema = z.object({ orderId: z.number() });
/** A schema whose validator throws when the payload asks it to (a validator bug). */
const explodingSchema: StandardSchemaV1<unknown, { orderId: number }> = {
  '~standard': {
    version: 1,
    vendor: 'test',
    validate: (value) => {
      if (typeof value === 'object' && value !== null && 'explode' in value) throw new TypeError('validator bug');
      return orderSchema['~standard'].validate(value) as never;
    },
  },
};

/** An in-memory guard: the consumer's handling of message ids is what is under test here, not a database. */
const seen = new Set<string>();
const memoryGuard: IdempotencyGuard<undefined> = {
  async run(messageId, consumer, work) {
    const key = `${consumer}\u0000${messageId}`;
    if (seen.has(key)) return 'duplicate';
    await work(undefined);
    seen.add(key);
    return 'done';
  },
};

beforeAll(async () => {
  topology = defineTopology({
    exchange: `${prefix}.events`,
    consumers: {
      [names.plain]: { bindings: ['plain.#'], retry: { delays: [10], maxAttempts: 2 } },
      [names.schema]: { bindings: ['schema.#'], retry: { delays: [10], maxAttempts: 2 } },
      [names.guarded]: { bindings: ['guarded.#'], retry: { delays: [10], maxAttempts: 2 } },
    },
  });
  warren = await Warren.connect({ url: AMQP_URL, topology, connectTimeoutMs: 5000 });
  await warren.consume(names.plain, handler, {
    prefetch: 50,
    classify: (e) => ((e as { code: string }).code.startsWith('E_') ? 'permanent' : undefined),
    onOutcome: () => { throw new Error('listener'); },
    logger: hostileLogger,
  });
  await warren.consume(names.schema, handler, { schema: explodingSchema, prefetch: 50 });
  await warren.consume(names.guarded, handler, { idempotency: memoryGuard, prefetch: 50 });
  conn = await amqp.connect(AMQP_URL);
  pub = await conn.createConfirmChannel();
  const sub = await conn.createChannel();
  for (const c of topology.consumers.values()) {
    await sub.consume(c.parkedQueue, (m) => {
      if (m) parked.set(String(m.properties.headers?.['hostile-id']), m);
    }, { noAck: true });
  }
}, 30_000);

afterAll(async () => {
  await warren?.close();
  await conn?.close().catch(() => undefined);
  if (topology) await deleteTopology(topology);
});

interface Hostile {
  routingKey: string;
  body?: Buffer;
  act?: Act;
  properties?: amqp.Options.Publish;
}

/** Publishes with a bare client; `hostile-id` is the test's own handle on the message. */
async function publish(m: Hostile, id: string): Promise<void> {
  const headers = { ...m.properties?.headers, 'hostile-id': id, 'hostile-act': m.act ?? 'ok' };
  pub.publish(topology.exchange, m.routingKey, m.body ?? Buffer.from('{"orderId":1}'), { messageId: `m-${id}`, ...m.properties, headers });
  await pub.waitForConfirms();
}

type Expect = { handled: true } | { parked: string };

/**
 * Publishes the hostile message and a normal one after it to the same consumer, waits
 * for both outcomes, and returns the parked copy (if any) for further checks.
 */
async function run(m: Hostile, expected: Expect): Promise<amqp.ConsumeMessage | undefined> {
  const id = `c${++serial}`;
  const after = `${id}-after`;
  await publish(m, id);
  await publish({ routingKey: `${m.routingKey.split('.')[0]}.normal` }, after);
  await waitFor(() => handled.has(id) || parked.has(id), `an outcome for the hostile message ${id}`, 15_000);
  await waitFor(() => handled.has(after), 'the normal message after it to be handled', 15_000);
  const p = parked.get(id);
  if ('handled' in expected) {
    expect(p?.properties.headers?.[HEADER.parkedReason], 'parked, expected handled').toBeUndefined();
    expect(handled.get(id)).toBe(1);
    return undefined;
  }
  expect(handled.has(id), 'handled, expected parked').toBe(false);
  expect(p?.properties.headers?.[HEADER.parkedReason]).toBe(expected.parked);
  const h = p!.properties.headers!;
  // Every header warren wrote is bounded, and no broker header was copied.
  expect(String(h[HEADER.errorClass] ?? '').length).toBeLessThanOrEqual(200);
  expect(String(h[HEADER.errorMessage] ?? '').length).toBeLessThanOrEqual(2000);
  expect(String(h[HEADER.errorStack] ?? '').length).toBeLessThanOrEqual(1600);
  return p;
}

/** x-death on a parked copy is only the broker's own record of this consumer's retry tier. */
function expectOnlyBrokerDeaths(m: amqp.ConsumeMessage): void {
  const deaths = m.properties.headers?.['x-death'] as unknown;
  if (deaths === undefined) return;
  expect(Array.isArray(deaths)).toBe(true);
  for (const d of deaths as Array<Record<string, unknown>>) {
    expect(typeof d['queue']).toBe('string');
    expect(typeof d['count']).toBe('number');
  }
}

describe('hostile input', () => {
  it('invalid JSON: parked invalid-json', async () => {
    await run({ routingKey: 'plain.x', body: Buffer.from('{"orderId": 1,') }, { parked: 'invalid-json' });
  });

  it('invalid UTF-8 inside a JSON string: parked invalid-json (not quietly replaced)', async () => {
    const p = await run({ routingKey: 'plain.x', body: Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]) }, { parked: 'invalid-json' });
    expect(String(p!.properties.headers![HEADER.errorMessage])).toMatch(/not valid UTF-8/);
    expect(p!.content.subarray(9, 12)).toEqual(Buffer.from([0xff, 0xfe, 0xc3]));
  });

  it('empty body: parked invalid-json', async () => {
    await run({ routingKey: 'plain.x', body: Buffer.alloc(0) }, { parked: 'invalid-json' });
  });

  it('a 10 MB body: handled; parked whole when it fails', async () => {
    const body = Buffer.from(JSON.stringify({ orderId: 1, pad: 'p'.repeat(10 * 1024 * 1024) }));
    await run({ routingKey: 'plain.x', body }, { handled: true });
    const p = await run({ routingKey: 'plain.x', body, act: 'permanent' }, { parked: 'permanent-error' });
    expect(p!.content.equals(body)).toBe(true);
  }, 30_000);

  it('JSON null, a number, an array where an object is expected: without a schema the handler fails (retried, then max-attempts); with one, invalid-payload', async () => {
    for (const body of ['null', '42', '[1,2]']) {
      const p = await run({ routingKey: 'plain.x', body: Buffer.from(body), act: 'read-field' }, { parked: 'max-attempts' });
      expect(p!.properties.headers![HEADER.errorClass]).toBe('TypeError');
      expect(p!.properties.headers![HEADER.attempts]).toBe(2);
      await run({ routingKey: 'schema.x', body: Buffer.from(body) }, { parked: 'invalid-payload' });
    }
  });

  it('wrong content type or content encoding: the body is parsed as UTF-8 JSON whatever they say', async () => {
    await run({ routingKey: 'plain.x', properties: { contentType: 'text/plain', contentEncoding: 'x-unknown' } }, { handled: true });
    const p = await run({ routingKey: 'plain.x', body: gzipSync('{"orderId":1}'), properties: { contentType: 'application/json', contentEncoding: 'gzip' } }, { parked: 'invalid-json' });
    expect(p!.properties.contentEncoding).toBe('gzip');
  });

  it('missing or empty message id: handled without a guard, parked missing-message-id with one', async () => {
    await run({ routingKey: 'plain.x', properties: { messageId: undefined } as never }, { handled: true });
    await run({ routingKey: 'plain.x', properties: { messageId: '' } }, { handled: true });
    await run({ routingKey: 'guarded.x', properties: { messageId: undefined } as never }, { parked: 'missing-message-id' });
    await run({ routingKey: 'guarded.x', properties: { messageId: '' } }, { parked: 'missing-message-id' });
  });

  it('a message id of 255 bytes (the most AMQP allows) is handled; a 10 KB one cannot be published at all', async () => {
    await run({ routingKey: 'guarded.x', properties: { messageId: 'i'.repeat(255) } }, { handled: true });
    await run({ routingKey: 'plain.x', properties: { messageId: 'é'.repeat(127) } }, { handled: true });
    expect(() => pub.publish(topology.exchange, 'guarded.x', Buffer.from('{}'), { messageId: 'i'.repeat(10_240) })).toThrow(/messageId.*up to 255/);
  });

  it.each<[string, unknown, number]>([
    ['text', 'abc', 2],
    ['negative', -5, 2],
    ['huge', 2 ** 62, 1_000_001],
    ['a nested table', { attempts: 1 }, 2],
    ['an array', [1, 2], 2],
  ])('forged warren-attempts (%s): read as a count warren can trust, parked max-attempts', async (_label, value, attempts) => {
    const p = await run({ routingKey: 'plain.x', act: 'throw', properties: { headers: { [HEADER.attempts]: value } } }, { parked: 'max-attempts' });
    expect(p!.properties.headers![HEADER.attempts]).toBe(attempts);
  });

  it('forged warren-redeliveries, -waits, -first-failed-at, -routing-key, -exchange, -error-* of every type: replaced by warren\'s own, bounded', async () => {
    const forged = [
      { [HEADER.redeliveries]: 'x'.repeat(20_000), [HEADER.waits]: [1, { a: 2 }], [HEADER.firstFailedAt]: 'y'.repeat(20_000), [HEADER.routingKey]: 'k'.repeat(5_000), [HEADER.exchange]: { a: 1 } },
      { [HEADER.redeliveries]: -1, [HEADER.waits]: 2 ** 60, [HEADER.firstFailedAt]: { nested: { deeper: 1 } }, [HEADER.routingKey]: 42, [HEADER.exchange]: ['e'] },
      { [HEADER.redeliveries]: { a: 1 }, [HEADER.waits]: 'abc', [HEADER.firstFailedAt]: -5, [HEADER.errorClass]: 'c'.repeat(20_000), [HEADER.errorMessage]: Buffer.alloc(20_000), [HEADER.parkedReason]: 'operator' },
    ];
    for (const headers of forged) {
      const p = await run({ routingKey: 'plain.forged', act: 'throw', properties: { headers } }, { parked: 'max-attempts' });
      const h = p!.properties.headers!;
      expect(h[HEADER.routingKey]).toBe('plain.forged');
      expect(h[HEADER.exchange]).toBe(topology.exchange);
      expect(Date.parse(String(h[HEADER.firstFailedAt]))).toBeGreaterThan(Date.now() - 60_000);
      expect(h[HEADER.errorClass]).toBe('Error');
    }
  });

  it.each<[string, unknown]>([
    ['an array of non-tables', ['a', 5]],
    ['a count that is text', [{ queue: 'RETRY', reason: 'expired', count: 'abc', exchange: '', 'routing-keys': ['q'] }]],
    ['a negative count', [{ queue: 'RETRY', reason: 'expired', count: -3 }]],
    ['a table, not an array', { queue: 'RETRY', reason: 'expired', count: 1 }],
    ['text', 'x-death'],
    ['entries missing every field', [{}, { queue: 7 }, { reason: ['expired'] }]],
  ])('malformed x-death (%s): never copied onto a retry or a park; the message goes round its tier and is parked max-attempts', async (_label, value) => {
    const retryQueue = topology.consumers.get(names.plain)!.retryQueues[0]!;
    const xDeath = JSON.parse(JSON.stringify(value).replaceAll('RETRY', retryQueue)) as unknown;
    const p = await run({ routingKey: 'plain.x', act: 'throw', properties: { headers: { 'x-death': xDeath, 'x-first-death-queue': 7, 'x-delivery-count': 'many' } } }, { parked: 'max-attempts' });
    expect(p!.properties.headers![HEADER.attempts]).toBe(2);
    expect(p!.properties.headers!['x-first-death-queue']).not.toBe(7);
    expect(p!.properties.headers!['x-delivery-count']).toBeUndefined();
    expectOnlyBrokerDeaths(p!);
  });

  it('a header table near the 64 KiB limit: the retry copy cannot carry warren\'s headers too, so it is parked unencodable-headers with the producer\'s headers kept', async () => {
    // 62.5 KB of the producer's, and a failure whose message fills its 2,000 characters.
    const headers = { big1: 'a'.repeat(40_000), big2: 'b'.repeat(22_500) };
    const p = await run({ routingKey: 'plain.x', act: 'huge-message', properties: { headers } }, { parked: 'unencodable-headers' });
    const h = p!.properties.headers!;
    expect(String(h['big1']).length).toBe(40_000);
    expect(String(h['big2']).length).toBe(22_500);
    expect(h[HEADER.droppedHeaders]).toBeUndefined();
    expect(h[HEADER.consumer]).toBe(names.plain);
  });

  it('producer headers that alone fill the table: parked with the largest dropped and named in warren-dropped-headers', async () => {
    const p = await run({ routingKey: 'plain.x', act: 'permanent', properties: { headers: { huge: 'h'.repeat(64_800), small: 'kept' } } }, { parked: 'permanent-error' });
    const h = p!.properties.headers!;
    expect(h['huge']).toBeUndefined();
    expect(h['small']).toBe('kept');
    expect(h[HEADER.droppedHeaders]).toBe('huge');
  });

  it('an error whose message is 1 MB: parked with the message cut to 2,000 characters', async () => {
    const p = await run({ routingKey: 'plain.x', act: 'huge-message' }, { parked: 'max-attempts' });
    expect(String(p!.properties.headers![HEADER.errorMessage])).toMatch(/more characters cut\]$/);
  });

  it('an error whose name is 100 KB: parked with the class cut to 200 characters (never wedged)', async () => {
    const p = await run({ routingKey: 'plain.x', act: 'huge-name' }, { parked: 'max-attempts' });
    expect(String(p!.properties.headers![HEADER.errorClass])).toMatch(/^NNNN.*more characters cut\]$/);
  });

  it('an error whose name, message and stack are not strings, or whose getters throw: described, parked max-attempts', async () => {
    const odd = await run({ routingKey: 'plain.x', act: 'odd-fields' }, { parked: 'max-attempts' });
    expect(odd!.properties.headers![HEADER.errorMessage]).toBe('42');
    expect(odd!.properties.headers![HEADER.errorStack]).toBe('');
    const getters = await run({ routingKey: 'plain.x', act: 'getters-throw' }, { parked: 'max-attempts' });
    expect(getters!.properties.headers![HEADER.errorClass]).toBe('Error');
  });

  it('an error with NUL and lone surrogates in its name and message: parked, text kept (surrogates as U+FFFD)', async () => {
    const p = await run({ routingKey: 'plain.x', act: 'nul-surrogates' }, { parked: 'max-attempts' });
    expect(p!.properties.headers![HEADER.errorMessage]).toBe('nul\u0000 lone \ufffd and \ufffd end');
  });

  it.each<[Act, string, string]>([
    ['throw-string', 'string', 'a bare string'],
    ['throw-undefined', 'undefined', 'undefined'],
    ['throw-null', 'null', 'null'],
    ['throw-getter', 'object', ''],
    ['throw-proxy', 'Error', 'cannot be inspected'],
  ])('a handler that throws a non-Error (%s): retried, then parked max-attempts', async (act, errorClass, message) => {
    const p = await run({ routingKey: 'plain.x', act }, { parked: 'max-attempts' });
    expect(p!.properties.headers![HEADER.errorClass]).toBe(errorClass);
    expect(String(p!.properties.headers![HEADER.errorMessage])).toContain(message);
  });

  it('a schema validator that throws: parked invalid-payload, saying the schema threw', async () => {
    const p = await run({ routingKey: 'schema.x', body: Buffer.from('{"explode":true}') }, { parked: 'invalid-payload' });
    expect(String(p!.properties.headers![HEADER.errorMessage])).toMatch(/schema threw/);
  });

  it('a classifier that throws (reading `code` of an error without one): warren\'s own rules decide', async () => {
    await run({ routingKey: 'plain.x', act: 'throw' }, { parked: 'max-attempts' });
    await run({ routingKey: 'plain.x', act: 'permanent' }, { parked: 'permanent-error' });
  });

  it('a routing key of 255 bytes, and one in Unicode: handled, and kept whole on a parked copy', async () => {
    const long = `plain.${'r'.repeat(249)}`;
    expect(Buffer.byteLength(long)).toBe(255);
    await run({ routingKey: long }, { handled: true });
    const p = await run({ routingKey: long, act: 'throw' }, { parked: 'max-attempts' });
    expect(p!.properties.headers![HEADER.routingKey]).toBe(long);
    const unicode = 'plain.ünïcødé.日本.🐇';
    const u = await run({ routingKey: unicode, act: 'throw' }, { parked: 'max-attempts' });
    expect(u!.properties.headers![HEADER.routingKey]).toBe(unicode);
  });
});
