/**
 * warren/testing agrees with the real consumer: each case runs through `runDelivery` and
 * through a Consumer on the broker, and the message must land in the same queue with
 * the same reason and attempt headers (or be acked, or become the same retry-table row).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HEADER, PermanentError, WaitForConditionError, type RetryTablePolicy, type ConsumerOptions, type ConsumerTopology, type Handler, type Outcome } from '../index.js';
import { sqliteStore } from '../store/sqlite/index.js';
import { connectWarren, drain, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { runDelivery, type TestMessage, type TestOutcome } from './index.js';

class CarrierDown extends Error {}
class Rejected extends Error {}

interface Case {
  readonly name: string;
  readonly handler: Handler<unknown>;
  readonly options?: Pick<ConsumerOptions<unknown, unknown>, 'schema' | 'classify' | 'timeoutMs' | 'retryTable'>;
  readonly message: Pick<TestMessage, 'payload' | 'body' | 'attempt'>;
  /** What the case is about, checked on the harness too, so a case cannot agree by both being wrong the same way. */
  readonly expected: string;
}

const flaky: Handler<unknown> = () => {
  throw new Error('carrier timed out');
};
const MAX_ATTEMPTS = 4;

function cases(retryTable: RetryTablePolicy): Case[] {
  return [
    { name: 'success', handler: () => undefined, message: { payload: { n: 1 } }, expected: 'acked' },
    { name: 'permanent error', handler: () => { throw new PermanentError('no such customer'); }, message: {}, expected: 'parked permanent-error 1' },
    ...[1, 2, 3].map((attempt): Case => ({ name: `transient error, run ${attempt}`, handler: flaky, message: { attempt }, expected: `retried ${attempt - 1} ${attempt}` })),
    { name: `transient error, run ${MAX_ATTEMPTS} (the cap)`, handler: flaky, message: { attempt: MAX_ATTEMPTS }, expected: `parked max-attempts ${MAX_ATTEMPTS}` },
    { name: 'invalid payload (zod)', handler: () => undefined, options: { schema: z.object({ orderId: z.number() }) }, message: { payload: { orderId: 'seven' } }, expected: 'parked invalid-payload 1' },
    { name: 'body that is not JSON', handler: () => undefined, message: { body: '{"unclosed": ' }, expected: 'parked invalid-json 1' },
    { name: 'classify says permanent', handler: () => { throw new Rejected('bad postcode'); }, options: { classify: (e) => (e instanceof Rejected ? 'permanent' : undefined) }, message: { attempt: 2 }, expected: 'parked permanent-error 2' },
    { name: 'classify says transient', handler: () => { throw new PermanentError('not really'); }, options: { classify: () => 'transient' }, message: {}, expected: 'retried 0 1' },
    { name: 'classify throws', handler: () => { throw new PermanentError('gone'); }, options: { classify: () => { throw new Error('classifier bug'); } }, message: {}, expected: 'parked permanent-error 1' },
    { name: 'asks to wait', handler: () => { throw new WaitForConditionError('carrier', { cause: new CarrierDown('503') }); }, options: { retryTable }, message: {}, expected: 'waiting carrier' },
    { name: 'a retry-table rule', handler: () => { throw new CarrierDown('503'); }, options: { retryTable: { ...retryTable, rules: [{ when: CarrierDown, dependency: 'carrier' }] } }, message: {}, expected: 'waiting carrier' },
    { name: 'asks to wait, no retry table', handler: () => { throw new WaitForConditionError('carrier'); }, message: {}, expected: 'retried 0 1' },
    {
      name: 'timeout',
      handler: (_p, ctx) => new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve())),
      options: { timeoutMs: 50 },
      message: {},
      expected: 'retried 0 1',
    },
  ];
}

/** Where a message landed, in the terms both sides can say. */
function landing(kind: Outcome['kind'] | TestOutcome['kind'], queue: string | undefined, headers: Readonly<Record<string, unknown>> | undefined, c: ConsumerTopology, dependency?: string) {
  return {
    kind,
    queue: queue === undefined ? undefined : queue === c.parkedQueue ? 'parked' : queue === c.queue ? 'work' : `tier ${c.retryQueues.indexOf(queue)}`,
    reason: headers?.[HEADER.parkedReason],
    attempts: headers?.[HEADER.attempts],
    errorClass: headers?.[HEADER.errorClass],
    dependency,
  };
}

function summary(o: TestOutcome): string {
  if (o.kind === 'parked') return `parked ${o.reason} ${o.attempts}`;
  if (o.kind === 'retried') return `retried ${o.tier} ${o.attempts}`;
  if (o.kind === 'waiting') return `waiting ${o.row?.dependency}`;
  return o.kind;
}

describe('warren/testing agrees with the consumer on the broker', () => {
  it('lands every case where the real consumer lands it, with the same reason and attempt headers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-agree-'));
    const store = sqliteStore({ filename: join(dir, 'warren.db'), pruneIntervalMs: 0 });
    onTeardown(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const all = cases({ table: store.retryTable });
    // Long tiers: a retried copy stays in its tier queue to be looked at.
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: ['10m', '20m', '30m'], maxAttempts: MAX_ATTEMPTS },
      consumers: Object.fromEntries(all.map((k, i) => [name(`agree${i}`), { bindings: [`agree.${i}`] }])),
    }));
    const consumers = [...topology.consumers.values()];
    const warren = await connectWarren(topology);
    const outcomes = new Map<string, Outcome>();

    // The harness first: no broker involved.
    const predicted = await Promise.all(all.map((k, i) => runDelivery(consumers[i]!, k.handler, { ...k.message, messageId: `agree-${i}`, routingKey: `agree.${i}`, exchange: topology.exchange }, k.options)));
    expect(all.map((k, i) => `${k.name}: ${summary(predicted[i]!)}`)).toEqual(all.map((k) => `${k.name}: ${k.expected}`));

    // Then the real consumer.
    for (const [i, k] of all.entries()) {
      await warren.consume(consumers[i]!.name, k.handler, { ...k.options, onOutcome: (o) => outcomes.set(consumers[i]!.name, o) });
    }
    const raw = await rawConnection();
    const ch = await raw.createConfirmChannel();
    for (const [i, k] of all.entries()) {
      const body = k.message.body !== undefined ? Buffer.from(k.message.body) : Buffer.from(JSON.stringify(k.message.payload ?? {}));
      const headers = (k.message.attempt ?? 1) > 1 ? { [HEADER.attempts]: (k.message.attempt ?? 1) - 1 } : {};
      ch.publish(topology.exchange, `agree.${i}`, body, { messageId: `agree-${i}`, headers, contentType: 'application/json', persistent: true });
    }
    await ch.waitForConfirms();
    await waitFor(() => outcomes.size === all.length, `an outcome for each of the ${all.length} cases`, 45_000);

    const rows = await store.retryTable.list();
    for (const [i, k] of all.entries()) {
      const c = consumers[i]!;
      const real = outcomes.get(c.name)!;
      let queue: string | undefined;
      let headers: Readonly<Record<string, unknown>> | undefined;
      for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) {
        const got = await drain(raw, q);
        if (got.length === 0) continue;
        expect(got.map((m) => m.properties.messageId), `${k.name}: one copy, in ${q}`).toEqual([`agree-${i}`]);
        expect(queue, `${k.name}: in one queue only`).toBeUndefined();
        queue = q;
        headers = got[0]!.properties.headers ?? {};
      }
      const row = rows.find((r) => r.messageId === `agree-${i}`);
      const p = predicted[i]!;
      expect(landing(real.kind, queue, headers, c, row?.dependency), k.name).toEqual(landing(p.kind, p.queue, p.headers, c, p.row?.dependency));
    }
  }, 120_000);
});
