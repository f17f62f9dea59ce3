import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { drain } from '../../test/helpers.js';
import { browseParked, replayParked } from './operations.js';
import { walkParked } from './reader.js';
import { declared, failures, peekIds, publishParked, parkedTopology } from './testing/fixtures.js';

const topologyOf = parkedTopology;

/**
 * True when the broker has delivered `m` before and taken it back: a classic queue sets
 * `redelivered`, a quorum queue also counts the return in `x-delivery-count`.
 */
function returnedBefore(m: amqp.GetMessage): boolean {
  const count = m.properties.headers?.['x-delivery-count'];
  return m.fields.redelivered || (typeof count === 'number' && count > 0);
}

describe.each(['classic', 'quorum'] as const)('walks that read ahead (%s queue)', (queueType) => {
  it('never receives a message parked during the walk, even while acknowledgements open the prefetch', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(10));
    const late: Promise<string[]>[] = [];
    const seen: string[] = [];
    const result = await walkParked(
      conn,
      billing.parkedQueue,
      async (m) => {
        seen.push(m.messageId ?? '');
        if (m.position === 5) await publishParked(conn, topology, billing, failures(2, (i) => ({ id: `late-b-${i}` })));
        return { action: 'remove' };
      },
      {
        queueType,
        // A small prefetch committed one change at a time: the broker could send the late
        // messages as soon as any acknowledgement past the first six took effect.
        readAhead: 4,
        maxInFlight: 1,
        maxCommitDelayMs: 0,
        onStart: () => void late.push(publishParked(conn, topology, billing, failures(3, (i) => ({ id: `late-a-${i}` })))),
      },
    );
    await Promise.all(late);
    expect(result).toMatchObject({ total: 10, scanned: 10, removed: 10, stopReason: 'end', notExamined: 0 });
    expect(seen).toEqual(ids);
    const left = await drain(conn, billing.parkedQueue);
    expect(left.map((m) => m.properties.messageId)).toEqual(['late-a-0', 'late-a-1', 'late-a-2', 'late-b-0', 'late-b-1']);
    // Not delivered and taken back either: the walk's prefetch never reached them.
    expect(left.filter(returnedBefore).map((m) => m.properties.messageId)).toEqual([]);
  });

  it.each([0, 3, 8, 13])('replays %i messages with a read-ahead of 8, in order', async (n) => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(n));
    const started: number[] = [];
    const result = await replayParked(conn, billing, { readAhead: 8, maxInFlight: 3, onStart: (total) => void started.push(total) });
    expect(started).toEqual([n]);
    expect(result).toMatchObject({ total: n, scanned: n, replayed: n, stopReason: 'end', notExamined: 0, failed: [] });
    expect((await drain(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
  });

  it.each([0, 3, 8, 13])('lists %i messages with a read-ahead of 8 and leaves them as they were', async (n) => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(n));
    const seen: string[] = [];
    // On a classic queue the kept messages hold the whole prefetch: past 8 the walk needs a new consumer.
    const result = await browseParked(conn, billing, { readAhead: 8, onMessage: (m) => void seen.push(m.messageId ?? '') });
    expect(seen).toEqual(ids);
    expect(result).toMatchObject({ total: n, scanned: n, kept: n, stopReason: 'end', notExamined: 0 });
    const left = await drain(conn, billing.parkedQueue);
    expect(left.map((m) => m.properties.messageId)).toEqual(ids);
    // A quorum queue's kept messages are copies, never returned.
    if (queueType === 'quorum') expect(left.filter(returnedBefore)).toEqual([]);
  });

  it('keeps kept and removed messages apart when kept ones fill the prefetch again and again', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(40));
    const result = await walkParked(conn, billing.parkedQueue, (m) => ({ action: m.position % 4 === 0 ? 'remove' : 'keep' }), { queueType, readAhead: 3, maxInFlight: 2 });
    expect(result).toMatchObject({ total: 40, scanned: 40, kept: 30, removed: 10, stopReason: 'end' });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.filter((_, i) => (i + 1) % 4 !== 0));
  });

  it('keeps the order of what it did not examine when a filtered replay stops at its limit', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(40));
    // The filter matches every message, but the walk cannot know it: it reads ahead of the limit.
    const result = await replayParked(conn, billing, { filter: { errorClass: 'HttpError' }, limit: 5, readAhead: 20 });
    expect(result).toMatchObject({ replayed: 5, scanned: 5, notExamined: 35, stopReason: 'stopped', limitReached: true });
    // A quorum queue cannot take back what was read ahead in place: it is copied to the back with the rest.
    expect(result.rewritten).toBe(queueType === 'quorum' ? 35 : 0);
    expect((await drain(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 5));
    const left = await drain(conn, billing.parkedQueue);
    expect(left.map((m) => m.properties.messageId)).toEqual(ids.slice(5));
    if (queueType === 'quorum') expect(left.filter(returnedBefore)).toEqual([]);
  });

  it('reads nothing past a limit that counts every message, so nothing is rewritten', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(40));
    const result = await replayParked(conn, billing, { limit: 5, readAhead: 20, maxInFlight: 2 });
    expect(result).toMatchObject({ replayed: 5, scanned: 5, notExamined: 35, stopReason: 'stopped', rewritten: 0 });
    expect((await drain(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 5));
    const left = await drain(conn, billing.parkedQueue);
    expect(left.map((m) => m.properties.messageId)).toEqual(ids.slice(5));
    expect(left.filter(returnedBefore)).toEqual([]);
  });

  it('keeps the order of the rest when a replay is aborted after reading ahead', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(60));
    const stop = new AbortController();
    const result = await replayParked(conn, billing, {
      signal: stop.signal,
      onProgress: (p) => {
        if (p.published === 7) stop.abort();
      },
    });
    expect(result).toMatchObject({ stopReason: 'aborted', replayed: 7, scanned: 7, notExamined: 53 });
    expect((await drain(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 7));
    const left = await drain(conn, billing.parkedQueue);
    expect(left.map((m) => m.properties.messageId)).toEqual(ids.slice(7));
    if (queueType === 'quorum') expect(left.filter(returnedBefore)).toEqual([]);
  });

  it('examines a message only once even when it is the last the walk may take and a stop comes with it', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(6));
    const seen: string[] = [];
    const result = await walkParked(conn, billing.parkedQueue, (m) => (seen.push(m.messageId ?? ''), { action: 'remove', stop: m.position === 6 }), { queueType, readAhead: 6 });
    expect(seen).toEqual(ids);
    expect(result).toMatchObject({ total: 6, scanned: 6, removed: 6, notExamined: 0, stopReason: 'stopped' });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
  });

  it('refuses a read-ahead AMQP cannot carry', async () => {
    const topology = topologyOf(queueType);
    const conn = await declared(topology);
    await expect(walkParked(conn, topology.consumer('billing').parkedQueue, () => ({ action: 'keep' }), { readAhead: 70_000 })).rejects.toThrow(/readAhead.*from 1 to 65535/);
    await expect(walkParked(conn, topology.consumer('billing').parkedQueue, () => ({ action: 'keep' }), { maxScanned: 0 })).rejects.toThrow(/maxScanned/);
  });
});
