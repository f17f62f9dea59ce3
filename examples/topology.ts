import { defineTopology } from '../src/index.js';

/**
 * The demo's topology. An application keeps its declaration in one module like this;
 * the `warren` command line reads the same module (`--topology`).
 */
export const topology = defineTopology({
  exchange: 'warren.demo.events',
  consumers: {
    'warren.demo.billing': {
      bindings: ['order.*'],
      // Short tiers so the demo is quick; production ladders are seconds to minutes.
      retry: { delays: ['200ms', '500ms', '1s'], maxAttempts: 4 },
    },
    // The retry-table tour (examples/retry-table.ts): shipments wait for the carrier.
    'warren.demo.shipping': {
      bindings: ['shipment.*'],
      retry: { delays: ['200ms'], maxAttempts: 3 },
    },
  },
});

export default topology;
