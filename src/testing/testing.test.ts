/** runDelivery and messageContext without a broker: the copy's headers, the guard, the crash-loop guard, headers too big to carry. */
import { describe, expect, it } from 'vitest';
import { HEADER, PermanentError, StoreUnavailableError, WaitForConditionError, defineTopology, type IdempotencyGuard } from '../index.js';
import { messageContext, runDelivery } from './index.js';

const billing = defineTopology({ exchange: 'shop', consumers: { billing: { bindings: ['order.*'], retry: { delays: [10, 20], maxAttempts: 3 }, crashLimit: 3 } } }).consumer('billing');

describe('runDelivery', () => {
  it('writes the headers the consumer writes on a parked copy, keeping the producer\'s and dropping the broker\'s', async () => {
    const now = new Date('2026-01-02T03:04:05Z');
    const r = await runDelivery(billing, () => { throw new PermanentError('customer 42 does not exist'); }, {
      payload: { n: 1 }, routingKey: 'order.paid', exchange: 'shop', headers: { tenant: 'acme', 'x-death': [{ queue: 'q', reason: 'expired', count: 1 }], [HEADER.firstFailedAt]: '2026-01-01T00:00:00.000Z' },
    }, { now });
    expect(r).toMatchObject({ kind: 'parked', queue: 'billing.parked', reason: 'permanent-error', attempts: 1, ran: true });
    expect(r.headers).toMatchObject({
      tenant: 'acme', [HEADER.parkedReason]: 'permanent-error', [HEADER.attempts]: 1, [HEADER.consumer]: 'billing',
      [HEADER.exchange]: 'shop', [HEADER.routingKey]: 'order.paid', [HEADER.errorClass]: 'PermanentError', [HEADER.errorMessage]: 'customer 42 does not exist',
      [HEADER.firstFailedAt]: '2026-01-01T00:00:00.000Z', [HEADER.lastFailedAt]: now.toISOString(), [HEADER.parkedAt]: now.toISOString(),
    });
    expect(r.headers).not.toHaveProperty('x-death');
  });

  it('runs an idempotency guard as the consumer does: a duplicate is acked unrun, an outage goes to the first tier uncounted', async () => {
    const seen = new Set<string>();
    const guard: IdempotencyGuard<{ id: string }> = {
      run: async (id, _consumer, work) => {
        if (seen.has(id)) return 'duplicate';
        await work({ id });
        seen.add(id);
        return 'done';
      },
    };
    const txs: string[] = [];
    const handler = (_p: unknown, ctx: { tx: { id: string } }) => void txs.push(ctx.tx.id);
    expect((await runDelivery(billing, handler, { messageId: 'm-1' }, { idempotency: guard })).kind).toBe('acked');
    expect(await runDelivery(billing, handler, { messageId: 'm-1' }, { idempotency: guard })).toMatchObject({ kind: 'duplicate' });
    expect(txs).toEqual(['m-1']);
    expect(await runDelivery(billing, handler, { messageId: null }, { idempotency: guard })).toMatchObject({ kind: 'parked', reason: 'missing-message-id', ran: false });
    const down: IdempotencyGuard<undefined> = { run: async () => { throw new StoreUnavailableError('connection refused'); } };
    expect(await runDelivery(billing, () => undefined, { attempt: 2 }, { idempotency: down })).toMatchObject({ kind: 'retried', tier: 0, attempts: 1 });
  });

  it('applies the crash-loop guard to a redelivery: moved back with a count, then parked at crashLimit', async () => {
    let runs = 0;
    const handler = () => void runs++;
    expect(await runDelivery(billing, handler, { redelivered: true })).toMatchObject({ kind: 'redelivery-moved', queue: 'billing', headers: { [HEADER.redeliveries]: 1 } });
    expect(await runDelivery(billing, handler, { redelivered: true, headers: { [HEADER.redeliveries]: 2 } })).toMatchObject({ kind: 'parked', reason: 'crash-loop' });
    expect(runs).toBe(0);
  });

  it('parks with minimal metadata a retry whose headers would not fit the 64 KiB table', async () => {
    const r = await runDelivery(billing, () => { throw new Error('x'.repeat(1_500)); }, { headers: { big: 'y'.repeat(64_500) } });
    expect(r).toMatchObject({ kind: 'parked', reason: 'unencodable-headers', queue: 'billing.parked', attempts: 1 });
  });

  it('hands a fake transaction to a handler without a guard, and refuses an attempt that is not a run number', async () => {
    let tx: unknown;
    await runDelivery(billing, (_p, ctx) => void (tx = ctx.tx), {}, { tx: 'fake-tx' });
    expect(tx).toBe('fake-tx');
    await expect(runDelivery(billing, () => undefined, { attempt: 0 })).rejects.toThrow(/attempt: 0 is not a run number/);
  });
});

describe('runDelivery without a message-id property, asking to wait', () => {
  const table = { insert: () => Promise.reject(new Error('runDelivery inserts nothing')), nameDependency: () => undefined };
  const wait = () => { throw new WaitForConditionError('carrier'); };

  it('reports the id messageIdFrom found, gives it to the tenant function, and logs what the consumer logs', async () => {
    const r = await runDelivery(billing, wait, { messageId: null, headers: { 'x-request-id': 'req-7' } }, { messageIdFrom: { header: 'x-request-id' }, retryTable: { table, tenant: (_p, ctx) => `t-${ctx.messageId}` } });
    expect(r).toMatchObject({ kind: 'waiting', messageId: 'req-7', row: { messageId: 'req-7', tenant: 't-req-7', dependency: 'carrier' } });
    expect(r.log.map((l) => [l.level, l.message])).toEqual([['info', "message waits in the retry table for 'carrier' (WaitForConditionError: Waiting for 'carrier')"]]);
  });

  it('waits under a made-up id, with a warning, when messageIdFrom finds none', async () => {
    const r = await runDelivery(billing, wait, { messageId: null }, { messageIdFrom: { header: 'x-request-id' }, retryTable: { table } });
    expect(r.kind).toBe('waiting');
    expect(r.messageId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
    expect(r.row?.messageId).toBe(r.messageId);
    expect(r.log[0]).toMatchObject({ level: 'warn', message: expect.stringMatching(/^messageIdFrom found no id \(the header 'x-request-id' is absent\)/), fields: { messageId: r.messageId } });
  });
});

describe('messageContext', () => {
  it('builds what a handler gets, raw delivery included', () => {
    const ctx = messageContext({ messageId: 'm-9', routingKey: 'order.paid', attempt: 2, tx: 7, payload: { a: 1 } });
    expect(ctx).toMatchObject({ messageId: 'm-9', routingKey: 'order.paid', attempt: 2, tx: 7, headers: {} });
    expect(ctx.signal.aborted).toBe(false);
    expect(JSON.parse(ctx.raw.content.toString())).toEqual({ a: 1 });
    expect(ctx.raw.fields.routingKey).toBe('order.paid');
    expect(messageContext().messageId).toMatch(/^[0-9a-f-]{36}$/);
  });
});
