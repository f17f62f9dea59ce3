/** Retry-table rows for tests: due a second ago, carrier down, unless `over` says otherwise. */
import type { RetryRowInput } from '../types.js';

let seq = 0;

export function retryRowFixture(over: Partial<RetryRowInput> = {}): RetryRowInput {
  seq++;
  return {
    messageId: `m-${seq}`,
    correlationId: null,
    consumer: 'shipping',
    queue: 'shipping.q',
    parkedQueue: 'shipping.parked',
    exchange: 'events',
    routingKey: 'order.created',
    content: JSON.stringify({ n: seq }),
    properties: JSON.stringify({ contentType: 'application/json', timestamp: 1, headers: { 'warren-waits': 1 } }),
    attempt: 1,
    nextAttemptAt: new Date(Date.now() - 1000),
    lastError: 'carrier answered 503',
    errorClass: 'CarrierDownError',
    dependency: 'carrier',
    tenant: null,
    ...over,
  };
}
