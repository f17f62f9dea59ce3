import * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { BrokerConnection } from './index.js';
import { coalesceWrites } from './writes.js';
import { walkParked } from '../park/reader.js';
import { AMQP_URL, onTeardown, uniqueName, waitFor } from '../../test/helpers.js';

type Counted = { _write: (...a: unknown[]) => unknown; _writev?: (...a: unknown[]) => unknown };

/**
 * Publishes `n` small messages to a fresh queue in one turn of the event loop and
 * returns how many socket writes carried them, after checking that all `n` arrived.
 */
async function writesFor(model: amqp.ChannelModel, n: number): Promise<number> {
  const ch = await model.createChannel();
  const queue = uniqueName('writes');
  await ch.assertQueue(queue, { exclusive: true });
  const stream = (model as unknown as { connection: { stream: Counted } }).connection.stream;
  const write = stream._write;
  const writev = stream._writev;
  let writes = 0;
  stream._write = function (this: unknown, ...a: unknown[]) {
    writes += 1;
    return write.apply(this, a);
  };
  if (writev) {
    stream._writev = function (this: unknown, ...a: unknown[]) {
      writes += 1;
      return writev.apply(this, a);
    };
  }
  try {
    for (let i = 0; i < n; i++) ch.sendToQueue(queue, Buffer.from(`m${i}`));
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
  } finally {
    stream._write = write;
    if (writev) stream._writev = writev;
  }
  await waitFor(async () => (await ch.checkQueue(queue)).messageCount === n, `${n} messages in ${queue}`);
  await ch.close();
  return writes;
}

async function bare(): Promise<amqp.ChannelModel> {
  const model = await amqp.connect(AMQP_URL, { noDelay: true });
  onTeardown(() => model.close().catch(() => undefined));
  return model;
}

describe('coalesceWrites', () => {
  it("sends the frames of one multiplexer pass in one socket write, and each still arrives", async () => {
    const plain = await writesFor(await bare(), 200);
    const model = await bare();
    expect(coalesceWrites(model)).toBe(true);
    const corked = await writesFor(model, 200);
    // Without it, amqplib writes each publish on its own.
    expect(plain).toBeGreaterThanOrEqual(100);
    expect(corked).toBeLessThanOrEqual(3);
  });

  it('wraps once, however often it is called', async () => {
    const model = await bare();
    expect(coalesceWrites(model)).toBe(true);
    const muxer = (model as unknown as { connection: { muxer: { _readIncoming: unknown } } }).connection.muxer;
    const wrapped = muxer._readIncoming;
    expect(coalesceWrites(model)).toBe(true);
    expect(muxer._readIncoming).toBe(wrapped);
    expect(await writesFor(model, 50)).toBeLessThanOrEqual(3);
  });

  it('does nothing, and says so, on a connection without the parts it needs', () => {
    expect(coalesceWrites({} as amqp.ChannelModel)).toBe(false);
    expect(coalesceWrites({ connection: { muxer: {}, stream: {} } } as unknown as amqp.ChannelModel)).toBe(false);
  });

  it("is applied to warren's own connections", async () => {
    const conn = new BrokerConnection({ url: AMQP_URL });
    onTeardown(() => conn.close());
    await conn.open();
    const model = await conn.waitReady(5_000);
    expect(await writesFor(model, 200)).toBeLessThanOrEqual(3);
  });

  it("is applied by a walk of a parked queue to the connection it is given", async () => {
    const model = await bare();
    const ch = await model.createChannel();
    const queue = uniqueName('writes-walk');
    await ch.assertQueue(queue, { exclusive: true });
    ch.sendToQueue(queue, Buffer.from('parked'));
    await waitFor(async () => (await ch.checkQueue(queue)).messageCount === 1, `a message in ${queue}`);
    expect(await writesFor(model, 200)).toBeGreaterThanOrEqual(100);
    const result = await walkParked(model, queue, () => ({ action: 'keep' }));
    expect(result).toMatchObject({ scanned: 1, kept: 1 });
    expect(await writesFor(model, 200)).toBeLessThanOrEqual(3);
    await ch.close();
  });
});
