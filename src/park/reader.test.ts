import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { QueueNotFoundError } from './errors.js';
import { browseParked, listParked, purgeParked, replayParked } from './operations.js';
import { walkParked } from './reader.js';
import { declared, failures, peekIds, publishParked, takeAll, parkedTopology } from './testing/fixtures.js';
import { queueCounts, waitFor } from '../../test/helpers.js';

const topologyOf = parkedTopology;

describe.each(['classic', 'quorum'] as const)('parked queue walks on a %s queue', (queueType) => {
  it('lists every message without removing or reordering any, twice over', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(30));

    const first = await listParked(conn, billing);
    expect(first.messages.map((m) => m.messageId)).toEqual(ids);
    expect(first.messages.map((m) => m.position)).toEqual(ids.map((_, i) => i + 1));
    expect(first).toMatchObject({ total: 30, scanned: 30, kept: 30, stopReason: 'end', notExamined: 0 });
    const second = await listParked(conn, billing);
    expect(second.messages.map((m) => m.messageId)).toEqual(ids);
    expect((await takeAll(conn, billing.parkedQueue)).map((m) => m.properties.messageId)).toEqual(ids);
  });

  it('keeps the order when it stops early (a limit), leaving the rest untouched', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(12));

    const result = await listParked(conn, billing, { limit: 4 });
    expect(result.messages.map((m) => m.messageId)).toEqual(ids.slice(0, 4));
    expect(result).toMatchObject({ stopReason: 'stopped', scanned: 4, notExamined: 8, limitReached: true });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });

  it('replays only the matching messages; the others stay parked in their order', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(21, (i) => (i % 3 === 0 ? { errorClass: 'TimeoutError', message: `timed out after ${i} ms` } : {})));
    const matching = ids.filter((_, i) => i % 3 === 0);
    const others = ids.filter((_, i) => i % 3 !== 0);

    const result = await replayParked(conn, billing, { filter: { errorClass: 'TimeoutError' } });
    expect(result).toMatchObject({ matched: 7, replayed: 7, kept: 14, failed: [] });
    expect((await takeAll(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(matching);
    expect((await takeAll(conn, billing.parkedQueue)).map((m) => m.properties.messageId)).toEqual(others);
  });

  it('purges only the matching messages, keeping the order of the rest', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(10, (i) => ({ routingKey: i < 5 ? 'order.created' : 'order.cancelled' })));

    const result = await purgeParked(conn, billing, { filter: { routingKey: 'order.cancelled' } });
    expect(result).toMatchObject({ matched: 5, removed: 5, kept: 5 });
    expect((await takeAll(conn, billing.parkedQueue)).map((m) => m.properties.messageId)).toEqual(ids.slice(0, 5));
  });

  it('survives many reads (RabbitMQ 4 drops a quorum message requeued 20 times)', async () => {
    // A parked queue has no dead-letter target, so a message past the delivery limit is gone.
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(6));
    for (let pass = 0; pass < 25; pass++) {
      const r = await listParked(conn, billing, pass % 2 === 0 ? {} : { limit: 2 });
      expect(r.messages[0]?.messageId, `pass ${pass}`).toBe(ids[0]);
    }
    const later = await publishParked(conn, topology, billing, failures(4, (i) => ({ id: `late-${i}` })));
    const partial = await listParked(conn, billing, { limit: 2 });
    expect(partial.messages.map((m) => m.messageId)).toEqual(ids.slice(0, 2));
    // A quorum queue is rewritten in order (kept messages, then the unexamined rest); a classic one is not touched.
    expect(partial.rewritten).toBe(queueType === 'quorum' ? 10 : 0);
    const all = await takeAll(conn, billing.parkedQueue);
    expect(all.map((m) => m.properties.messageId)).toEqual([...ids, ...later]);
    // A copy keeps the headers and body; only the broker's count starts again.
    expect(all[0]?.properties.headers?.[HEADER.errorClass]).toBe('HttpError');
    expect(JSON.parse(all[0]?.content.toString() ?? 'null')).toEqual({ n: 1 });
  });

  it('puts back a large read in order', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(600));
    const result = await listParked(conn, billing, { limit: 450 });
    expect(result.messages.map((m) => m.messageId)).toEqual(ids.slice(0, 450));
    expect((await takeAll(conn, billing.parkedQueue)).map((m) => m.properties.messageId)).toEqual(ids);
  });

  it('counts the other readers of the queue: what they hold is not in its total', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(6));
    const other = await conn.createChannel();
    await other.prefetch(2);
    let held = 0;
    await other.consume(billing.parkedQueue, () => void (held += 1), { noAck: false });
    while (held < 2) await new Promise((r) => setTimeout(r, 5));
    const seen = await listParked(conn, billing);
    expect(seen).toMatchObject({ total: 4, scanned: 4, readers: 1, stopReason: 'end' });
    expect(seen.messages.map((m) => m.messageId)).toEqual(ids.slice(2));
    await other.close();
    // A quorum queue drops a closed channel's consumer, and takes back what it held, some
    // time after the close-ok (1 in 40 runs listed 4 messages and 1 reader here).
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).consumers === 0, 'the queue to drop the other reader');
    expect(await listParked(conn, billing)).toMatchObject({ total: 6, readers: 0 });
  });

  it('counts the messages another consumer took while it ran: they were not seen', async () => {
    const topology = topologyOf(queueType);
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    await publishParked(conn, topology, billing, failures(6));
    const other = await conn.createChannel();
    let held = 0;
    const seen: string[] = [];
    // Read one at a time, so that the other consumer, started at the first message, finds some left.
    const result = await browseParked(conn, billing, {
      readAhead: 1,
      onMessage: async (m) => {
        seen.push(m.messageId ?? '');
        if (seen.length === 1) {
          await other.prefetch(2);
          await other.consume(billing.parkedQueue, () => void (held += 1), { noAck: false });
          await waitFor(() => held === 2, 'the other consumer to hold 2 messages');
        }
      },
    });
    // A classic walk holds what it read, so the other consumer took two it had not reached.
    // A quorum walk puts each copy at the back as it goes: the other consumer may take two
    // of those instead, and then the walk saw all six. Either way none goes uncounted.
    if (queueType === 'classic') expect(result).toMatchObject({ total: 6, scanned: 4, missed: 2, notExamined: 0, readers: 0 });
    else {
      expect(result).toMatchObject({ total: 6, notExamined: 0, readers: 0 });
      expect(result.scanned + result.missed).toBe(6);
    }
    await other.close();
    await waitFor(async () => (await queueCounts(conn, billing.parkedQueue)).consumers === 0, 'the queue to drop the other consumer');
    expect(await listParked(conn, billing)).toMatchObject({ total: 6, scanned: 6, missed: 0 });
  });

  it('names a missing parked queue', async () => {
    const topology = topologyOf(queueType);
    const conn = await declared(topology);
    await expect(walkParked(conn, 'wt.no-such-queue.parked', () => ({ action: 'keep' }))).rejects.toThrow(QueueNotFoundError);
    // The connection is still usable afterwards.
    expect(await peekIds(conn, topology.consumer('billing').parkedQueue)).toEqual([]);
  });
});

describe('a walk of a classic queue holding many messages', () => {
  it('stops at maxHeld, says how many it did not examine, and keeps the order', async () => {
    const topology = topologyOf('classic');
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    const ids = await publishParked(conn, topology, billing, failures(20));
    const seen: string[] = [];
    const result = await browseParked(conn, billing, { maxHeld: 5, onMessage: (m) => void seen.push(m.messageId ?? '') });
    expect(result).toMatchObject({ stopReason: 'max-held', scanned: 5, notExamined: 15 });
    expect(seen).toEqual(ids.slice(0, 5));
    // Replaying everything holds nothing, so maxHeld does not stop it.
    const replay = await replayParked(conn, billing, { maxHeld: 5 });
    expect(replay).toMatchObject({ replayed: 20, stopReason: 'end' });
  });

  it('a walk started at once after another counts every message the first put back', async () => {
    const topology = topologyOf('classic');
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    await publishParked(conn, topology, billing, failures(3000));
    // The first holds all 3,000 as it reads, and hands them back as it returns.
    const totals: number[] = [];
    for (let round = 0; round < 5; round++) totals.push((await listParked(conn, billing)).total);
    expect(totals).toEqual([3000, 3000, 3000, 3000, 3000]);
  });

  it('does not take a message parked again during the walk a second time', async () => {
    const topology = topologyOf('classic');
    const billing = topology.consumer('billing');
    const conn = await declared(topology);
    await publishParked(conn, topology, billing, failures(5));
    let extra = 0;
    const result = await browseParked(conn, billing, {
      onMessage: async () => {
        if (extra < 3) {
          extra += 1;
          await publishParked(conn, topology, billing, [{ id: `arrived-${extra}` }]);
        }
      },
    });
    expect(result).toMatchObject({ total: 5, scanned: 5 });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(['m-00001', 'm-00002', 'm-00003', 'm-00004', 'm-00005', 'arrived-1', 'arrived-2', 'arrived-3']);
  });
});
