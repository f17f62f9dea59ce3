/**
 * The consumer's connection cut again and again while successes wait for their coalesced
 * ack and failures are being moved (copy confirmed, original not yet acked), against the
 * real broker: no message is lost (each reaches the ack or the parked queue), and what
 * comes twice is a redelivery, never a message left in a queue or unacked.
 */
import { describe, expect, it, vi } from 'vitest';
import { AMQP_URL, connectWarren, drain, rawConnection, sleep, testTopology, waitFor } from '../../test/helpers.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import type { MessageContext } from './types.js';

vi.setConfig({ testTimeout: 120_000 });

describe('connection cuts while acks and moves are on their way', () => {
  it('loses no message', async () => {
    const N = 300;
    const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 3 }, consumers: { c: { queue: name('c'), bindings: ['k'] } } }));
    const warren0 = await connectWarren(topology);
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    const warren = await connectWarren(topology, { url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    const acked = new Map<string, number>();
    const runs = new Map<string, number>();
    const ids = new Map<number, string>();
    await warren.consume('c', async (p: { n: number }, ctx: MessageContext<unknown>) => {
      const id = ctx.messageId as string;
      ids.set(p.n, id);
      runs.set(id, (runs.get(id) ?? 0) + 1);
      await sleep(Math.random() * 5);
      if (p.n % 3 === 0) throw new Error('always fails');
    }, { concurrency: 10, prefetch: 20, onOutcome: (o) => { if (o.kind === 'acked' && o.messageId) acked.set(o.messageId, (acked.get(o.messageId) ?? 0) + 1); } });
    const receipts = await Promise.all(Array.from({ length: N }, (_, n) => warren0.publish('k', { n })));
    for (let i = 0; i < 8; i++) {
      await sleep(100 + Math.random() * 100);
      await proxy.cut();
      await sleep(50);
      await proxy.restore();
    }
    const raw = await rawConnection();
    const c = topology.consumer('c');
    const parked = new Map<string, number>();
    const everyId = receipts.map((r) => r.messageId);
    const failing = new Set(receipts.filter((_, n) => n % 3 === 0).map((r) => r.messageId));
    await waitFor(async () => {
      for (const m of await drain(raw, c.parkedQueue)) parked.set(String(m.properties.messageId), (parked.get(String(m.properties.messageId)) ?? 0) + 1);
      return everyId.every((id) => (failing.has(id) ? parked.has(id) : acked.has(id)));
    }, () => `every message acked or parked (${acked.size} acked, ${parked.size} parked)`, 60_000);
    await sleep(500);
    const counts = { lostSucceeding: everyId.filter((id) => !failing.has(id) && !acked.has(id)).length, lostFailing: [...failing].filter((id) => !parked.has(id)).length };

    expect(counts).toEqual({ lostSucceeding: 0, lostFailing: 0 });
    await warren.close();
    await proxy.close();
  });
});
