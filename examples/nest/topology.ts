import { defineTopology, type Topology } from '../../src/index.js';

/**
 * The shop's topology: billing charges each placed order, receipts records each paid
 * one. Consumer names are fixed (the handlers' decorators name them); the exchange and
 * queue names take a prefix, so tests run side by side on one broker.
 */
export function shopTopology(prefix = 'shop'): Topology {
  return defineTopology({
    exchange: `${prefix}.events`,
    consumers: {
      // Short tiers so the example is quick; production ladders are seconds to minutes.
      billing: { queue: `${prefix}.billing`, bindings: ['order.placed'], retry: { delays: ['50ms', '200ms'], maxAttempts: 3 } },
      receipts: { queue: `${prefix}.receipts`, bindings: ['order.paid'] },
    },
  });
}

/** What `order.placed` carries. */
export interface OrderPlaced {
  readonly orderId: string;
  /** In cents. */
  readonly amount: number;
}

/** What `order.paid` carries. */
export interface OrderPaid {
  readonly orderId: string;
  readonly amount: number;
  /** The payment provider's id of the charge. */
  readonly chargeId: string;
}
