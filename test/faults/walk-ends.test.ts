/**
 * A parked-queue walk always ends, and leaves the queue as it found it where it examined
 * nothing: when the connection goes while it closes its channel (amqplib settles a
 * channel's close only on the broker's close-ok), and when the visitor throws (as the
 * export does when the pipe it writes to closes) on a quorum queue, where kept messages
 * have gone to the back.
 */
import { describe, expect, it } from 'vitest';
import type { QueueType } from '../../src/index.js';
import { browseParked, replayParked } from '../../src/park/operations.js';
import { declared, failures, parkedTopology, peekIds, publishParked } from '../../src/park/testing/fixtures.js';
import { TcpProxy } from '../../src/store/testing/tcp-proxy.js';
import { AMQP_URL, connectRaw, depth, drain, onTeardown, waitFor } from '../helpers.js';

describe.each<QueueType>(['classic', 'quorum'])('a parked-queue walk (%s queue)', (queueType) => {
  it('ends when the connection is lost while it closes its channel', async () => {
    const topology = parkedTopology(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(50));
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const url = new URL(AMQP_URL);
    url.port = String(proxy.port);
    const walker = await connectRaw(url.toString());
    // The walk's own channel (the one that consumes, not those that check the queue and
    // its type): when it is closed, the broker's close-ok is held back, and the connection
    // cut a moment later.
    const create = walker.createChannel.bind(walker);
    let walks = 0;
    (walker as { createChannel: typeof create }).createChannel = async () => {
      const ch = await create();
      const consume = ch.consume.bind(ch);
      let consumed = false;
      ch.consume = (...args: Parameters<typeof consume>) => {
        if (!consumed) walks += 1;
        consumed = true;
        return consume(...args);
      };
      const close = ch.close.bind(ch);
      ch.close = () => {
        if (consumed) {
          proxy.hold();
          setTimeout(() => void proxy.cut(), 200);
        }
        return close();
      };
      return ch;
    };
    const result = await replayParked(walker, billing, { limit: 5 });
    expect(walks, 'the walk consumed on a channel of its own').toBe(1);
    expect(result.replayed).toBe(5);
    await waitFor(async () => (await depth(conn, billing.parkedQueue)) === 45, 'the other 45 back in the parked queue');
    const replayed = (await drain(conn, billing.queue)).map((m) => m.properties.messageId as string);
    expect(replayed).toEqual(ids.slice(0, 5));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(5));
  });

  it.each([1, 10])('leaves every message in its order when the visitor throws half-way (readAhead %i)', async (readAhead) => {
    const topology = parkedTopology(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(50));
    const browse = browseParked(conn, billing, {
      readAhead,
      maxInFlight: 5,
      onMessage: (m) => {
        if (m.position === 20) throw new Error('EPIPE: the reader went away');
      },
    });
    await expect(browse).rejects.toThrow(/EPIPE/);
    await waitFor(async () => (await depth(conn, billing.parkedQueue)) === 50, 'all fifty back in the parked queue');
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });
});
