/**
 * Coalesced acks on a real broker: the deliveries that succeed in one turn are acked
 * with one `multiple` ack up to the lowest delivery still in progress, and never past
 * it. Each test closes or cuts the consumer's channel after the later deliveries were
 * acked: what the broker hands back is exactly what was not acked, so a multiple ack
 * that reached too far would show as a message that never comes back.
 */
import { describe, expect, it } from 'vitest';
import type { Logger } from '../logger.js';
import { connectWarren, depth, rawConnection, testTopology, waitFor } from '../../test/helpers.js';

/**
 * A logger that keeps the ids whose redelivery came while their first run (or move) was
 * still going: the consumer holds such a redelivery until that run ends, never running
 * it beside the first, and settles it by the first run's outcome.
 */
function heldBack(): { logger: Logger; held: string[] } {
  const held: string[] = [];
  const warn = (message: string, fields?: Record<string, unknown>) => {
    if (message.includes('a redelivery of a message still running here')) held.push(String(fields?.['messageId']));
  };
  return { logger: { debug: () => undefined, info: () => undefined, warn, error: () => undefined }, held };
}

/** A gate a handler (or a move) waits at until the test opens it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/** The consumer's channel is private; a test reaches it to close it at the moment that matters. */
function channelOf(consumer: object): { close(): Promise<void> } {
  const ch = (consumer as unknown as { channel: { close(): Promise<void> } | undefined }).channel;
  if (ch === undefined) throw new Error('the consumer has no channel');
  return ch;
}

async function setup() {
  const topology = testTopology(({ exchange, name }) => ({ exchange, queueType: 'classic', retry: { delays: [50], maxAttempts: 3 }, consumers: { [name('coalesce')]: { bindings: ['c.*'] } } }));
  const c = [...topology.consumers.values()][0]!;
  const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
  const raw = await rawConnection();
  const publish = async (ids: readonly string[]) => {
    for (const id of ids) await warren.publish('c.x', { id }, { messageId: id });
  };
  return { c, warren, raw, publish };
}

describe('coalesced acks', () => {
  it('never ack a delivery whose handler is still running, however many after it succeed', async () => {
    const { c, warren, publish } = await setup();
    const slow = gate();
    const runs: { id: string; redelivered: boolean }[] = [];
    const { logger, held } = heldBack();
    const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
      runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
      if (p.id === 'first' && !ctx.raw.fields.redelivered) await slow.wait;
    }, { prefetch: 20, concurrency: 10, logger });
    await publish(['first', 'a', 'b', 'c', 'd']);
    await waitFor(() => consumer.stats.acked === 4, 'the four after the slow one to be acked');
    // The channel's close reaches the broker after every ack written before it: what it
    // hands back is what was not acked.
    await channelOf(consumer).close();
    await waitFor(() => held.includes('first'), () => `the running one to come back: ${JSON.stringify(held)}`);
    slow.open();
    await waitFor(() => consumer.stats.acked === 5, 'the running one\'s redelivery to be acked by its outcome');
    expect(held, 'only the delivery still running comes back').toEqual(['first']);
    expect(runs.filter((r) => r.redelivered), 'no second run').toEqual([]);
  });

  it('never ack a delivery being moved before its copy is confirmed (publish-with-confirm first, ack second)', async () => {
    const { c, warren, raw, publish } = await setup();
    const held = gate();
    const realSend = warren.mover.send.bind(warren.mover);
    let copies = 0;
    // The retry's copy is held before it is written: its confirm cannot have come.
    warren.mover.send = async (message) => {
      copies += 1;
      await held.wait;
      return realSend(message);
    };
    const runs: { id: string; redelivered: boolean }[] = [];
    const back = heldBack();
    const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
      runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
      if (p.id === 'fails' && runs.length === 1) throw new Error('transient');
    }, { prefetch: 20, concurrency: 10, logger: back.logger });
    await publish(['fails', 'a', 'b', 'c']);
    await waitFor(() => copies === 1 && consumer.stats.acked === 3, 'the three after it to be acked while its copy is held');
    await channelOf(consumer).close();
    // Not acked: the broker gives it back, and it waits for its move to end.
    await waitFor(() => back.held.includes('fails'), () => `the message being moved to come back: ${JSON.stringify(back.held)}`);
    expect(back.held).toEqual(['fails']);
    // The copy, once let go, lands in the retry queue and comes back: handled there, the
    // redelivery acked by the move's outcome; never lost, never run beside the move.
    held.open();
    await waitFor(async () => runs.filter((r) => r.id === 'fails').length === 2 && consumer.stats.inFlight === 0 && (await depth(raw, c.queue)) === 0 && (await depth(raw, c.retryQueues[0]!)) === 0, () => `the copy to come back and be handled: ${JSON.stringify(runs)}`);
    expect(runs.filter((r) => r.redelivered), 'no run of the redelivery').toEqual([]);
  });

  it('lose nothing when the connection dies after a coalesced ack: what was not acked comes back', async () => {
    const { c, warren, raw, publish } = await setup();
    const slow = gate();
    const handled = new Map<string, number>();
    // All twenty in the queue first: they arrive together, and m0..m4 succeed in one turn.
    const ids = Array.from({ length: 20 }, (_, i) => `m${i}`);
    await publish(ids);
    const consumer = await warren.consume(c.name, async (p: { id: string }) => {
      handled.set(p.id, (handled.get(p.id) ?? 0) + 1);
      if (p.id === 'm5' && handled.get(p.id) === 1) await slow.wait;
    }, { prefetch: 20, concurrency: 1 });
    // m0..m4 acked with one multiple ack, m5 running, m6..m19 delivered and waiting.
    await waitFor(() => consumer.stats.acked === 5, 'the first five to be acked');
    const model = await warren.connection.waitReady(5000);
    (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
    slow.open();
    await waitFor(() => ids.every((id) => handled.has(id)) && consumer.stats.acked >= 20, () => `every message handled: ${JSON.stringify([...handled])}, stats ${JSON.stringify(consumer.stats)}`, 20_000);
    await waitFor(async () => (await depth(raw, c.queue)) === 0, 'the work queue to be empty');
    expect(consumer.stats.parked).toBe(0);
  });
});
