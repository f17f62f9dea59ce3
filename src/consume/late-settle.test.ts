/**
 * User code that settles late, against the real broker: a codec that throws at once, one
 * whose promise rejects after the handler's time, and a handler that resolves after its
 * timeout. Each message reaches exactly one final outcome per delivery, nothing stays in
 * the work queue or unacked, and nothing settling late adds an outcome or a copy.
 */
import { describe, expect, it, vi } from 'vitest';
import { connectWarren, depth, rawConnection, sleep, testTopology, waitFor } from '../../test/helpers.js';
import type { Codec } from './decode.js';
import type { Outcome } from './types.js';

vi.setConfig({ testTimeout: 60_000 });

const N = 20;

async function run(codec: Codec | undefined, handler: (p: unknown) => Promise<void>): Promise<{ outcomes: Outcome[]; parked: number; work: number }> {
  const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 2 }, consumers: { c: { queue: name('c'), bindings: ['k'] } } }));
  const warren = await connectWarren(topology);
  const outcomes: Outcome[] = [];
  await warren.consume('c', handler, { timeoutMs: 100, ...(codec ? { decoder: codec } : {}), onOutcome: (o) => void outcomes.push(o) });
  await Promise.all(Array.from({ length: N }, (_, n) => warren.publish('k', { n })));
  const final = () => outcomes.filter((o) => o.kind === 'parked' || o.kind === 'acked').length;
  await waitFor(() => final() >= N, () => `every message reaches a final outcome (${final()} of ${N})`, 30_000);
  // Whatever settles late has had time to do so.
  await sleep(800);
  const conn = await rawConnection();
  const c = topology.consumer('c');
  return { outcomes, parked: await depth(conn, c.parkedQueue), work: await depth(conn, c.queue) };
}

function kinds(outcomes: Outcome[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const o of outcomes) out[o.kind] = (out[o.kind] ?? 0) + 1;
  return out;
}

describe('user code that settles late', () => {
  it('a codec that throws at once: parked once each', async () => {
    const r = await run({ name: 'bad', decode: () => { throw new Error('cannot read'); } }, async () => undefined);
    expect({ kinds: kinds(r.outcomes), parked: r.parked, work: r.work }).toEqual({ kinds: { parked: N }, parked: N, work: 0 });
  });

  it('a codec whose promise rejects after the handler time: retried then parked, one outcome per delivery', async () => {
    const r = await run({ name: 'slow', decode: () => new Promise((_, reject) => setTimeout(() => reject(new Error('late')), 300)) }, async () => undefined);
    expect({ kinds: kinds(r.outcomes), parked: r.parked, work: r.work }).toEqual({ kinds: { retried: N, parked: N }, parked: N, work: 0 });
  });

  it('a handler that resolves after its timeout: retried then parked, nothing acked late', async () => {
    let runs = 0;
    const r = await run(undefined, async () => {
      runs++;
      await sleep(300);
    });
    expect({ kinds: kinds(r.outcomes), parked: r.parked, work: r.work, runs }).toEqual({ kinds: { retried: N, parked: N }, parked: N, work: 0, runs: 2 * N });
  });
});
