/**
 * Tracing with `@opentelemetry/api` installed but no SDK registered (the default for an
 * application that does not trace): nothing is injected, and consuming works as before.
 */
import { describe, expect, it } from 'vitest';
import { PermanentError } from '../errors.js';
import type { MessageContext, Outcome } from '../consume/types.js';
import { connectWarren, testTopology, waitFor } from '../../test/helpers.js';
import { listParked } from '../park/operations.js';
import { fastConnection } from '../park/testing/fixtures.js';
import { TRACE_HEADER } from './index.js';

const TRACE_HEADERS = ['traceparent', 'tracestate', TRACE_HEADER.previous, TRACE_HEADER.replay];

describe('tracing without an SDK', () => {
  it('writes no trace header on publish, retry or park, and every delivery reaches its outcome', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 3 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } },
    }));
    const warren = await connectWarren(topology);
    const seen: Array<Record<string, unknown>> = [];
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async (p: { kind: string }, ctx: MessageContext) => {
        seen.push({ ...ctx.headers });
        if (p.kind === 'bad') throw new PermanentError('never works');
        if (ctx.attempt === 1) throw new Error('once');
      },
      { onOutcome: (o) => outcomes.push(o) },
    );
    await warren.publish('order.created', { kind: 'good' });
    await warren.publish('order.created', { kind: 'bad' });
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => outcomes.some((o) => o.kind === 'acked') && (await listParked(conn, billing)).messages.length === 1, 'one acked after a retry, one parked');
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['acked', 'parked', 'retried']);
    const parked = (await listParked(conn, billing)).messages[0];
    for (const headers of [...seen, parked?.headers ?? {}]) {
      for (const name of TRACE_HEADERS) expect(headers[name], name).toBeUndefined();
    }
  });
});
