/**
 * A parked-queue walk reads ahead (a consumer with a prefetch) and commits its changes a
 * batch at a time while it examines the next messages. When its channel or connection
 * goes mid-walk, with messages read ahead, held, decided and a commit on its way, it ends
 * with a WalkInterruptedError, and every message is still there exactly once: replayed,
 * or parked (a classic queue: in its old order).
 */
import { describe, expect, it } from 'vitest';
import type { QueueType } from '../../src/index.js';
import { WalkInterruptedError } from '../../src/park/errors.js';
import { replayParked } from '../../src/park/operations.js';
import { walkParked } from '../../src/park/reader.js';
import { declared, failures, peekIds, publishParked } from '../../src/park/testing/fixtures.js';
import { connectRaw, depth, drain, testTopology, waitFor } from '../helpers.js';

function topologyOf(queueType: QueueType) {
  return testTopology(({ exchange, name }) => ({ exchange, queueType, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
}

describe.each<QueueType>(['classic', 'quorum'])('a walk that loses its connection or channel (%s queue)', (queueType) => {
  it('a replay whose connection is cut half-way throws WalkInterruptedError and loses or doubles nothing', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(300, (i) => ({ errorClass: i % 3 === 0 ? 'TimeoutError' : 'HttpError' })));
    const walker = await connectRaw();
    let cut = false;
    const replay = replayParked(walker, billing, {
      filter: { errorClass: 'HttpError' },
      maxInFlight: 20,
      onProgress: (p) => {
        if (p.scanned === 150 && !cut) {
          cut = true;
          (walker as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
        }
      },
    });
    const error = await replay.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(WalkInterruptedError);
    expect(cut).toBe(true);
    const replayed = (await drain(conn, billing.queue)).map((m) => String(m.properties.messageId));
    // The broker takes back what the lost connection held once it sees the connection go.
    await waitFor(async () => (await depth(conn, billing.parkedQueue)) + replayed.length >= ids.length, 'the broker to take back what the walk held');
    const left = await peekIds(conn, billing.parkedQueue);
    // Every message once: replayed (committed before the cut) or parked.
    expect([...replayed, ...left].sort()).toEqual([...ids].sort());
    expect(new Set(replayed).size).toBe(replayed.length);
    expect(replayed.length).toBeGreaterThanOrEqual((error as WalkInterruptedError).moved);
    expect(replayed.every((id) => ids.indexOf(id) % 3 !== 0)).toBe(true);
    // A classic queue takes back what the walk held in its old place; a quorum queue may reorder then.
    if (queueType === 'classic') expect(left).toEqual(ids.filter((id) => !replayed.includes(id)));
  });

  it('a walk whose channel the broker closes (a move to an exchange that does not exist) throws WalkInterruptedError and leaves the queue whole', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(50));
    const walk = walkParked(
      conn,
      billing.parkedQueue,
      (m) =>
        m.position === 30
          ? { action: 'move', to: { exchange: 'wt.no-such-exchange', routingKey: 'x', content: m.content, properties: {} } }
          : { action: 'keep' },
      { queueType, readAhead: 16, maxInFlight: 5 },
    );
    await expect(walk).rejects.toThrow(WalkInterruptedError);
    await expect(walk).rejects.toThrow(/no-such-exchange/);
    // The connection outlives the walk's channel; nothing was moved, so the queue holds every message.
    await waitFor(async () => (await depth(conn, billing.parkedQueue)) >= ids.length, 'the broker to take back what the walk held');
    const left = await peekIds(conn, billing.parkedQueue);
    expect([...left].sort()).toEqual([...ids].sort());
    if (queueType === 'classic') expect(left).toEqual(ids);
  });
});
