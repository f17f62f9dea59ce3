import { Inject, Injectable } from '@nestjs/common';
import type pg from 'pg';
import type { MessageContext } from '../../src/index.js';
import { WarrenConsumer } from '../../src/nest/index.js';
import { MailClient, type Mailer } from './mail.js';
import type { OrderPlaced } from './topology.js';

/**
 * Billing: charges each order once. It runs under the store's idempotency guard (the
 * module's `store`): the charge row commits with the message's `(messageId, billing)`
 * row, so a redelivered copy is acked without charging again.
 */
@Injectable()
export class BillingHandlers {
  @WarrenConsumer<OrderPlaced>('billing', { requiresTx: true })
  async charge(order: OrderPlaced, ctx: MessageContext<pg.PoolClient>): Promise<void> {
    await ctx.tx.query('INSERT INTO charges (order_id, amount_cents) VALUES ($1, $2)', [order.orderId, order.amountCents]);
  }
}

/**
 * Email: confirms each order through the mail provider. The provider being down is
 * retried on the delay ladder; a refusal parks the message, to be replayed after a fix.
 * The message id is the provider's idempotency key: a retry never sends twice.
 */
@Injectable()
export class EmailHandlers {
  constructor(@Inject(MailClient) private readonly mail: Mailer) {}

  @WarrenConsumer<OrderPlaced>('email')
  async confirm(order: OrderPlaced, ctx: MessageContext): Promise<void> {
    const data = { orderId: order.orderId, amount: (order.amountCents / 100).toFixed(2) };
    await this.mail.send({ to: order.email, template: 'order-confirmation', data }, ctx.messageId ?? order.orderId, ctx.signal);
  }
}
