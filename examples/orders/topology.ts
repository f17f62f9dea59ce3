import { defineTopology, type Duration } from '../../src/index.js';
import { OrdersConfig } from './config.js';

/**
 * Billing charges each placed order, email confirms it. Each consumer's `queue` names
 * its work queue; its retry queues (`<queue>.retry.<delay>`) and its parked queue
 * (`<queue>.parked`) are named after it.
 */
export const ordersTopology = (prefix: string, emailRetry: readonly string[]) => defineTopology({
  exchange: `${prefix}.events`,
  consumers: {
    billing: { queue: `${prefix}.billing`, bindings: ['order.placed'] },
    email: { queue: `${prefix}.email`, bindings: ['order.placed'], retry: { delays: emailRetry as Duration[], maxAttempts: emailRetry.length + 1 } },
  },
});

/** The topology as the service's environment configures it: what the `warren` CLI reads (`-t examples/orders/topology.ts`). */
export const topology = ordersTopology(OrdersConfig.fromEnv().prefix, OrdersConfig.fromEnv().emailRetry);

/** What `order.placed` carries. */
export interface OrderPlaced {
  readonly orderId: string;
  readonly email: string;
  /** In cents. */
  readonly amountCents: number;
}
