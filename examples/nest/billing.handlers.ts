import { Inject, Injectable } from '@nestjs/common';
import type pg from 'pg';
import { z } from 'zod';
import { Warren, type MessageContext } from '../../src/index.js';
import { InjectWarren, WarrenConsumer } from '../../src/nest/index.js';
import { PaymentGateway } from './payments.js';
import type { OrderPaid, OrderPlaced } from './topology.js';

const orderPlaced = z.object({ orderId: z.string().min(1), amount: z.number().int().positive() });

/**
 * The shop's two consumers, on one provider. Both run under the store's idempotency
 * guard (the module's `store` option): `ctx.tx` is a `pg.PoolClient` inside the
 * transaction that also records the message as done, so a redelivered copy is acked
 * without running the method again.
 */
@Injectable()
export class BillingHandlers {
  constructor(
    @Inject(PaymentGateway) private readonly payments: PaymentGateway,
    @InjectWarren() private readonly warren: Warren,
  ) {}

  /**
   * Charges a placed order, then announces it paid. The payment provider failing (a 503,
   * a timeout) is retried on the delay ladder; a declined card is parked at once.
   */
  @WarrenConsumer<OrderPlaced>('billing', { schema: orderPlaced, concurrency: 2 })
  async charge(order: OrderPlaced, ctx: MessageContext): Promise<void> {
    const messageId = ctx.messageId ?? order.orderId; // the guard parks messages without an id
    const chargeId = await this.payments.charge(order, messageId, ctx.signal);
    // An id made from this message's: a retry after a lost ack publishes the same id,
    // and receipts' guard records it once.
    await this.warren.publish('order.paid', { ...order, chargeId } satisfies OrderPaid, { messageId: `${messageId}.paid` });
  }

  /**
   * Records the receipt in the guard's transaction: the row and the done-marker commit
   * together. `requiresTx` types `ctx.tx` and has the module refuse to start without a store.
   */
  @WarrenConsumer<OrderPaid>('receipts', { requiresTx: true })
  async record(paid: OrderPaid, ctx: MessageContext<pg.PoolClient>): Promise<void> {
    await ctx.tx.query('INSERT INTO receipts (order_id, amount, charge_id, message_id) VALUES ($1, $2, $3, $4)', [paid.orderId, paid.amount, paid.chargeId, ctx.messageId]);
  }
}
