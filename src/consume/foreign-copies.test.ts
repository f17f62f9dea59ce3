/**
 * Copies of messages from producers that are not warren, on a real broker: a message
 * that waits in the retry table comes back with the bytes and properties it came with,
 * so the decoder reads the same value and messageIdFrom finds the same id.
 */
import { describe, expect, it } from 'vitest';
import { PermanentError, type Codec, type MessageContext } from '../index.js';
import { replayParked } from '../park/operations.js';
import { WaitForConditionError } from '../retry-table/index.js';
import { connectWarren, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from '../store/testing/harness.js';

describe.each(BACKENDS)('a message from the retry table: %s', (backend) => {
  it("keeps bytes that are not UTF-8 (the 'buffer' decoder), its content encoding and app id", async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('bytes')]: { bindings: ['bytes.*'], retry: { delays: [20], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const seen: Array<{ payload: Buffer; raw: MessageContext<unknown>['raw']; id: string | undefined }> = [];
    const consumer = await warren.consume(
      c.name,
      (payload: Buffer, ctx) => {
        seen.push({ payload, raw: ctx.raw, id: ctx.messageId });
        if (seen.length === 1) throw new WaitForConditionError('archive', { delayMs: 0 });
      },
      { decoder: 'buffer', idempotency: store.idempotency(), messageIdFrom: (msg) => `${String(msg.properties.appId)}:${String(msg.properties.headers?.['seq'])}`, retryTable: { table: store.retryTable } },
    );
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    try {
      // Bytes a UTF-8 text column cannot hold as they are: an invalid sequence and a NUL.
      const body = Buffer.from([0xff, 0xfe, 0x00, 0x80, 0x41, 0xc3, 0x28]);
      const ch = await (await rawConnection()).createConfirmChannel();
      ch.publish(topology.exchange, 'bytes.x', body, { contentType: 'application/octet-stream', contentEncoding: 'deflate', appId: 'legacy', headers: { seq: 7 } });
      await ch.waitForConfirms();
      await waitFor(() => consumer.stats.acked === 1, 'the copy from the retry table handled');
      expect(consumer.stats).toMatchObject({ waiting: 1, acked: 1, parked: 0 });
      expect(seen.map((s) => s.id)).toEqual(['legacy:7', 'legacy:7']);
      expect(seen[1]?.payload.equals(body)).toBe(true);
      expect(seen[1]?.raw.properties).toMatchObject({ contentType: 'application/octet-stream', contentEncoding: 'deflate', appId: 'legacy' });
    } finally {
      await scheduler.stop();
    }
  });

  it('a copy whose decoder timed out keeps the id messageIdFrom finds, so the guard dedups it against another copy', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('slow')]: { bindings: ['slow.*'], retry: { delays: [20], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let decodes = 0;
    // The first decode never settles: the consumer's timeout ends it, and a broad rule sends it to the table.
    const codec: Codec = { name: 'slow-json', decode: (body) => (decodes++ === 0 ? new Promise(() => undefined) : Promise.resolve(JSON.parse(body.toString('utf8')))) };
    const handled: Array<string | undefined> = [];
    const consumer = await warren.consume(
      c.name,
      (_payload: unknown, ctx) => {
        handled.push(ctx.messageId);
      },
      { decoder: codec, timeoutMs: 1000, idempotency: store.idempotency(), messageIdFrom: { header: 'x-request-id' }, retryTable: { table: store.retryTable, rules: [{ when: Error, dependency: 'anything' }], delayMs: 0 } },
    );
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    try {
      const ch = await (await rawConnection()).createConfirmChannel();
      // The producer sends the same message twice (the guard is there for that).
      ch.publish(topology.exchange, 'slow.x', Buffer.from('{"n":1}'), { headers: { 'x-request-id': 'req-1' } });
      await ch.waitForConfirms();
      await waitFor(() => consumer.stats.waiting + consumer.stats.retried === 1, 'the first copy timed out in its decoder');
      ch.publish(topology.exchange, 'slow.x', Buffer.from('{"n":1}'), { headers: { 'x-request-id': 'req-1' } });
      await ch.waitForConfirms();
      await waitFor(() => consumer.stats.acked + consumer.stats.duplicate + consumer.stats.parked === 2, 'both copies settled');
      expect(handled).toEqual(['req-1']);
      expect(consumer.stats).toMatchObject({ acked: 1, duplicate: 1, parked: 0 });
    } finally {
      await scheduler.stop();
    }
  });

  it('an id from messageIdFrom longer than the 255 bytes of an AMQP message id is no id: parked, not stored in the table where it could not be sent back', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('long')]: { bindings: ['long.*'], retry: { delays: [20], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    let calls = 0;
    const consumer = await warren.consume(
      c.name,
      () => {
        if (calls++ === 0) throw new WaitForConditionError('archive', { delayMs: 0 });
      },
      { idempotency: store.idempotency(), messageIdFrom: { header: 'x-request-id' }, retryTable: { table: store.retryTable } },
    );
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    try {
      // 200 characters, 400 bytes in UTF-8.
      const ch = await (await rawConnection()).createConfirmChannel();
      ch.publish(topology.exchange, 'long.x', Buffer.from('{"n":1}'), { headers: { 'x-request-id': '\u00e9'.repeat(200) } });
      await ch.waitForConfirms();
      await waitFor(() => consumer.stats.parked + consumer.stats.acked === 1, 'the message parked or handled');
      expect(consumer.stats).toMatchObject({ parked: 1, waiting: 0, acked: 0 });
      expect(calls).toBe(0);
    } finally {
      await scheduler.stop();
    }
  });
});

describe('a parked message from a producer that sets no id', () => {
  it('replayed after another copy was handled, it is found under the same id and acked as a duplicate', async () => {
    const store = (await harness('sqlite')).store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('replayed')]: { bindings: ['replayed.*'], retry: { delays: [20], maxAttempts: 3 } } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const handled: Array<string | undefined> = [];
    let broken = true;
    const consumer = await warren.consume(
      c.name,
      (_payload: unknown, ctx) => {
        if (broken) throw new PermanentError('the first copy fails');
        handled.push(ctx.messageId);
      },
      { decoder: 'text', idempotency: store.idempotency(), messageIdFrom: { header: 'x-request-id' } },
    );
    const conn = await rawConnection();
    const ch = await conn.createConfirmChannel();
    const send = async (): Promise<void> => {
      ch.publish(topology.exchange, 'replayed.x', Buffer.from('caf\u00e9', 'latin1'), { contentType: 'text/plain; charset=iso-8859-1', headers: { 'x-request-id': 'req-p' } });
      await ch.waitForConfirms();
    };
    await send();
    await waitFor(() => consumer.stats.parked === 1, 'the first copy parked');
    broken = false;
    await send();
    await waitFor(() => consumer.stats.acked === 1, 'the second copy handled');
    await replayParked(conn, c);
    await waitFor(() => consumer.stats.duplicate === 1, 'the replayed copy acked as a duplicate');
    expect(handled).toEqual(['req-p']);
    expect(consumer.stats).toMatchObject({ acked: 1, duplicate: 1, parked: 1 });
  });
});
