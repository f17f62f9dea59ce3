import { PassThrough, Writable } from 'node:stream';
import * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { BrokerConnection } from './index.js';
import { coalesceWrites } from './writes.js';
import { walkParked } from '../park/reader.js';
import { resolveOptions } from '../console/options.js';
import { AMQP_URL, onTeardown, testTopology, uniqueName, waitFor } from '../../test/helpers.js';

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

  it("is applied to the console's own connection", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('console')]: { bindings: ['x'] } } }));
    const options = resolveOptions({ authorize: () => ({ user: 'test', role: 'viewer' }), topology, url: AMQP_URL, management: false });
    onTeardown(() => options.closeConnection());
    expect(await writesFor(await options.connection(), 200)).toBeLessThanOrEqual(3);
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

  /**
   * amqplib's own multiplexer over a socket whose writes the test completes: at once (the
   * kernel takes every byte) or only when `release` is called (the kernel's buffer is full).
   */
  async function muxOver(completeAtOnce: boolean) {
    const model = await bare();
    const Mux = (model as unknown as { connection: { muxer: { constructor: new (out: Writable) => unknown } } }).connection.muxer.constructor;
    const written: string[] = [];
    const waiting: (() => void)[] = [];
    const settle = (cb: () => void) => (completeAtOnce ? cb() : waiting.push(cb));
    const socket = new Writable({
      highWaterMark: 16 * 1024,
      write(chunk: Buffer, _encoding, cb) {
        written.push(chunk.length > 1024 ? 'large' : 'small');
        settle(cb);
      },
      writev(chunks, cb) {
        for (const c of chunks) written.push((c.chunk as Buffer).length > 1024 ? 'large' : 'small');
        settle(cb);
      },
    });
    let drains = 0;
    let writtenBeforeDrain = -1;
    socket.on('drain', () => {
      drains += 1;
      if (writtenBeforeDrain < 0) writtenBeforeDrain = written.length;
    });
    const mux = new Mux(socket) as { pipeFrom(s: PassThrough): void; blocked: boolean };
    expect(coalesceWrites({ connection: { muxer: mux, stream: socket } } as unknown as amqp.ChannelModel)).toBe(true);
    // One channel publishing large messages (a frame of 64 KiB each), one that only acks.
    const publishing = new PassThrough({ objectMode: true });
    const acking = new PassThrough({ objectMode: true });
    mux.pipeFrom(publishing);
    mux.pipeFrom(acking);
    for (let i = 0; i < 4; i++) publishing.write(Buffer.alloc(64 * 1024));
    for (let i = 0; i < 10; i++) acking.write(Buffer.alloc(21));
    const release = () => waiting.splice(0).forEach((cb) => cb());
    return { mux, written, release, drains: () => drains, writtenBeforeDrain: () => writtenBeforeDrain };
  }

  const turn = () => new Promise((r) => setImmediate(r));

  it('goes on past a large frame while the socket takes the bytes, so a channel that acks does not wait behind one that publishes', async () => {
    const m = await muxOver(true);
    await turn();
    await turn();
    // All in the first pass, the two channels in turn; corked without more, the pass would
    // have ended at the first large frame, and the acks waited for the socket's 'drain'.
    expect(m.writtenBeforeDrain() < 0 ? m.written.length : m.writtenBeforeDrain()).toBe(14);
    expect(m.written.slice(0, 8)).toEqual(['large', 'small', 'large', 'small', 'large', 'small', 'large', 'small']);
    expect(m.mux.blocked).toBe(false);
  });

  it("still stops when the socket does not take the bytes, and goes on at its 'drain'", async () => {
    const m = await muxOver(false);
    await turn();
    await turn();
    expect(m.mux.blocked).toBe(true);
    expect(m.written.length).toBeLessThan(14);
    for (let i = 0; i < 20 && m.written.length < 14; i++) {
      m.release();
      await turn();
    }
    m.release();
    await turn();
    expect(m.written.filter((w) => w === 'small')).toHaveLength(10);
    expect(m.written.filter((w) => w === 'large')).toHaveLength(4);
    expect(m.drains()).toBeGreaterThan(0);
    expect(m.mux.blocked).toBe(false);
  });
});
