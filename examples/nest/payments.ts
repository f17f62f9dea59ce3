import { Inject, Injectable } from '@nestjs/common';
import { PermanentError } from '../../src/index.js';
import { ShopConfig } from './config.js';
import type { OrderPlaced } from './topology.js';

/** The payment provider refused the card: trying again will not help, so the message is parked. */
export class PaymentDeclinedError extends PermanentError {}

/**
 * The payment provider's HTTP API, a dependency that fails now and then. Any failure but
 * a refusal is thrown as it is, so warren retries it later on the delay ladder.
 */
@Injectable()
export class PaymentGateway {
  constructor(@Inject(ShopConfig) private readonly config: ShopConfig) {}

  /**
   * Charges an order once per `idempotencyKey` (the message id: the same across retries
   * and redeliveries, so the provider never charges twice). Returns the charge's id.
   */
  async charge(order: OrderPlaced, idempotencyKey: string, signal: AbortSignal): Promise<string> {
    const res = await fetch(`${this.config.paymentsUrl}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify({ orderId: order.orderId, amount: order.amount }),
      signal: AbortSignal.any([signal, AbortSignal.timeout(10_000)]),
    });
    const text = await res.text();
    if (res.status === 402) throw new PaymentDeclinedError(`payment declined for order ${order.orderId}: ${text}`);
    if (!res.ok) throw new Error(`payments answered ${res.status} for order ${order.orderId}: ${text}`);
    return (JSON.parse(text) as { chargeId: string }).chargeId;
  }
}
