/**
 * The email handler's failures, decided as the consumer would decide them, in
 * milliseconds and with no broker: `warren/testing`'s runDelivery runs the handler
 * against one message and says where the message would go.
 */
import { describe, expect, it } from 'vitest';
import { runDelivery } from '../../src/testing/index.js';
import { EmailHandlers } from './handlers.js';
import { MailRejectedError, type Mailer } from './mail.js';
import { ordersTopology, type OrderPlaced } from './topology.js';

const email = ordersTopology('orders', ['1s', '10s', '1m']).consumer('email');
const order: OrderPlaced = { orderId: 'o-1', email: 'ada@example.com', amountCents: 1250 };

/** A mail provider that answers as told and records what it was asked. */
function mailer(answer: () => void): Mailer & { calls: Array<{ to: string; data: Record<string, unknown>; key: string }> } {
  const calls: Array<{ to: string; data: Record<string, unknown>; key: string }> = [];
  return {
    calls,
    send: (message, key) => {
      calls.push({ to: message.to, data: message.data, key });
      answer();
      return Promise.resolve();
    },
  };
}

const run = (mail: Mailer, attempt = 1) => {
  const handlers = new EmailHandlers(mail);
  return runDelivery(email, (payload: OrderPlaced, ctx) => handlers.confirm(payload, ctx), { payload: order, messageId: 'm-1', attempt });
};

describe('email handler, with warren/testing', () => {
  it('sends once, keyed by the message id: acked', async () => {
    const mail = mailer(() => undefined);
    const outcome = await run(mail);
    expect(outcome.kind).toBe('acked');
    expect(mail.calls).toEqual([{ to: 'ada@example.com', data: { orderId: 'o-1', amount: '12.50' }, key: 'm-1' }]);
  });

  it('the provider down: retried on the ladder, 1 s then 10 s, parked after the last tier', async () => {
    const down = mailer(() => {
      throw new Error('the mail provider answered 503');
    });
    expect(await run(down, 1)).toMatchObject({ kind: 'retried', tier: 0, delayMs: 1000, queue: 'orders.email.retry.1s' });
    expect(await run(down, 2)).toMatchObject({ kind: 'retried', tier: 1, delayMs: 10_000, queue: 'orders.email.retry.10s' });
    expect(await run(down, 4)).toMatchObject({ kind: 'parked', reason: 'max-attempts', queue: 'orders.email.parked' });
  });

  it('a refusal: parked at once, the error in its headers, for a person to read and replay after a fix', async () => {
    const refused = mailer(() => {
      throw new MailRejectedError('the mail provider refused order-confirmation to ada@example.com: 422 no template');
    });
    const outcome = await run(refused);
    expect(outcome).toMatchObject({ kind: 'parked', reason: 'permanent-error', attempts: 1, queue: 'orders.email.parked' });
    expect(outcome.headers?.['warren-error-class']).toBe('MailRejectedError');
    expect(outcome.headers?.['warren-error-message']).toMatch(/422 no template/);
  });
});
