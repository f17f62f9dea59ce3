/**
 * Tracing against a real broker, with the OpenTelemetry SDK's in-memory exporter: one
 * trace per message across publish, retries, parking, replay and the outbox; the spans of
 * one message's attempts linked in order.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { context, propagation, trace, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { PermanentError } from '../errors.js';
import type { MessageContext, Outcome } from '../consume/types.js';
import { connectWarren, depth, drain, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { listParked, replayParked } from '../park/operations.js';
import { fastConnection } from '../park/testing/fixtures.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { WaitForConditionError } from '../retry-table/wait.js';
import { parseSpanContext, TRACE_HEADER } from './index.js';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(contextManager.enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
  propagation.disable();
});
beforeEach(() => exporter.reset());

const appTracer = () => trace.getTracer('app');
const spansOf = (traceId: string): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
const consumerSpans = (traceId: string) =>
  spansOf(traceId)
    .filter((s) => s.kind === SpanKind.CONSUMER)
    .sort((a, b) => Number(a.attributes['warren.attempt']) - Number(b.attributes['warren.attempt']) || a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1]);

describe('tracing with an SDK registered', () => {
  it('publish, fail twice, succeed: one trace, a producer span and three linked consumer spans, the handler spans inside', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20, 40], maxAttempts: 5 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
    }));
    const warren = await connectWarren(topology);
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async (_p: unknown, ctx: MessageContext) => {
        appTracer().startSpan(`charge attempt ${ctx.attempt}`).end();
        if (ctx.attempt < 3) throw new Error(`carrier down (attempt ${ctx.attempt})`);
      },
      { onOutcome: (o) => outcomes.push(o) },
    );
    const { messageId } = await warren.publish('order.created', { orderId: 7 });
    await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'the third attempt succeeds');

    const producer = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId);
    expect(producer).toBeDefined();
    const traceId = producer?.spanContext().traceId as string;
    expect(producer?.attributes).toMatchObject({
      'messaging.system': 'rabbitmq',
      'messaging.operation.type': 'send',
      'messaging.destination.name': topology.exchange,
      'messaging.rabbitmq.destination.routing_key': 'order.created',
    });
    const consumers = consumerSpans(traceId);
    expect(spansOf(traceId).filter((s) => s.kind === SpanKind.PRODUCER)).toHaveLength(1);
    expect(consumers).toHaveLength(3);
    const billing = topology.consumer('billing');
    consumers.forEach((span, i) => {
      expect(span.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
      expect(span.attributes).toMatchObject({
        'messaging.system': 'rabbitmq',
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'process',
        'messaging.destination.name': topology.exchange,
        'messaging.rabbitmq.destination.routing_key': 'order.created',
        'messaging.message.id': messageId,
        'messaging.consumer.group.name': 'billing',
        'warren.consumer': 'billing',
        'warren.attempt': i + 1,
      });
      // Each attempt links to the one before it.
      if (i === 0) expect(span.links).toEqual([]);
      else expect(span.links.map((l) => l.context.spanId)).toEqual([consumers[i - 1]?.spanContext().spanId]);
      // The handler's own span is a child of its attempt's span.
      const child = spansOf(traceId).find((s) => s.name === `charge attempt ${i + 1}`);
      expect(child?.parentSpanContext?.spanId).toBe(span.spanContext().spanId);
    });
    expect(consumers.map((s) => s.attributes['warren.outcome'])).toEqual(['retried', 'retried', 'acked']);
    expect(consumers.map((s) => s.attributes['warren.retry.tier'])).toEqual([0, 1, undefined]);
    expect(consumers.map((s) => s.status.code)).toEqual([SpanStatusCode.ERROR, SpanStatusCode.ERROR, SpanStatusCode.UNSET]);
    expect(consumers[0]?.status.message).toBe('Error: carrier down (attempt 1)');
    expect(consumers[0]?.events.map((e) => e.name)).toEqual(['exception']);
    expect(billing.retryQueues).toHaveLength(2);
  });

  it('a publish inside an application span is its child, and the context it stamps is the producer span', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { audit: { queue: name('audit'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const conn = await rawConnection();
    const traceId = await appTracer().startActiveSpan('checkout', async (span) => {
      await warren.publish('order.created', { i: 1 });
      span.end();
      return span.spanContext().traceId;
    });
    const queue = topology.consumer('audit').queue;
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the message is routed');
    const [msg] = await drain(conn, queue);
    const producer = spansOf(traceId).find((s) => s.kind === SpanKind.PRODUCER);
    const checkout = spansOf(traceId).find((s) => s.name === 'checkout');
    expect(producer?.parentSpanContext?.spanId).toBe(checkout?.spanContext().spanId);
    expect(msg?.properties.headers?.['traceparent']).toBe(`00-${traceId}-${producer?.spanContext().spanId}-01`);
  });

  it('a publish made inside a handler is a child of its delivery, and its consumer a grandchild', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] }, shipping: { queue: name('shipping'), bindings: ['order.billed'] } },
    }));
    const warren = await connectWarren(topology);
    const shipped: Outcome[] = [];
    await warren.consume('billing', async () => {
      await warren.publish('order.billed', { orderId: 1 });
    });
    await warren.consume('shipping', async () => undefined, { onOutcome: (o) => shipped.push(o) });
    const { messageId } = await warren.publish('order.created', { orderId: 1 });
    await waitFor(() => shipped.some((o) => o.kind === 'acked'), 'the follow-up event is consumed');
    // billing's span ends when its ack is counted, which can come after shipping handled the follow-up.
    await waitFor(() => exporter.getFinishedSpans().some((s) => s.attributes['warren.consumer'] === 'billing'), "billing's span to end");
    const first = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId);
    const spans = spansOf(first?.spanContext().traceId as string);
    const billing = spans.find((s) => s.attributes['warren.consumer'] === 'billing');
    const followUp = spans.find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.rabbitmq.destination.routing_key'] === 'order.billed');
    const shipping = spans.find((s) => s.attributes['warren.consumer'] === 'shipping');
    expect(billing?.parentSpanContext?.spanId).toBe(first?.spanContext().spanId);
    expect(followUp?.parentSpanContext?.spanId).toBe(billing?.spanContext().spanId);
    expect(shipping?.parentSpanContext?.spanId).toBe(followUp?.spanContext().spanId);
  });

  it('parked, then replayed by alice: the replayed copy links to the replay span and to the parked attempt', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 3 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
    }));
    const warren = await connectWarren(topology);
    let broken = true;
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async () => {
        if (broken) throw new PermanentError('bad tax code');
      },
      { onOutcome: (o) => outcomes.push(o) },
    );
    const { messageId } = await warren.publish('order.created', { orderId: 9 });
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 1, 'the message is parked');
    const parked = (await listParked(conn, billing)).messages[0];
    broken = false;
    const result = await replayParked(conn, billing, { actor: 'alice' });
    expect(result.replayed).toBe(1);
    await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'the replayed message succeeds');

    const producer = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId);
    const traceId = producer?.spanContext().traceId as string;
    const [first, second] = consumerSpans(traceId);
    expect(consumerSpans(traceId)).toHaveLength(2);
    expect(first?.attributes).toMatchObject({ 'warren.outcome': 'parked', 'warren.parked.reason': 'permanent-error', 'warren.attempt': 1 });
    expect(first?.status.code).toBe(SpanStatusCode.ERROR);
    expect(second?.attributes).toMatchObject({ 'warren.outcome': 'acked', 'warren.attempt': 1 });
    expect(second?.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
    // The parked copy carries the parked attempt's span context.
    expect(parseSpanContext(parked?.headers[TRACE_HEADER.previous])?.spanId).toBe(first?.spanContext().spanId);
    const replay = exporter.getFinishedSpans().find((s) => s.name === `replay ${billing.parkedQueue}`);
    expect(replay?.attributes).toMatchObject({ 'warren.replay.actor': 'alice', 'warren.replay.count': 1, 'warren.consumer': 'billing' });
    expect(second?.links.map((l) => [l.attributes?.['warren.link'], l.context.spanId])).toEqual([
      ['previous-attempt', first?.spanContext().spanId],
      ['replay', replay?.spanContext().spanId],
    ]);
  });
});

describe.each(BACKENDS)('tracing through the outbox: %s', (backend) => {
  it('a relayed row carries the context of the code that added it', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { audit: { queue: name('audit'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const outcomes: Outcome[] = [];
    await warren.consume('audit', async () => undefined, { onOutcome: (o) => outcomes.push(o) });
    const { traceId, spanId } = await appTracer().startActiveSpan('place order', async (span) => {
      await store.transaction((tx) => store.outbox.add(tx, 'order.created', { orderId: 3 }));
      span.end();
      return span.spanContext();
    });
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    await relay.start();
    try {
      await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'the relayed row is consumed');
    } finally {
      await relay.stop();
    }
    const [consumed] = consumerSpans(traceId);
    expect(consumerSpans(traceId)).toHaveLength(1);
    expect(consumed?.parentSpanContext?.spanId).toBe(spanId);
  });
});

describe.each(BACKENDS)('tracing through the retry table: %s', (backend) => {
  it('a message back from the retry table is in the same trace, linked to the attempt that made it wait', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async (_p: unknown, ctx: MessageContext) => {
        if (ctx.headers['warren-waits'] === undefined) throw new WaitForConditionError('ledger', { tenant: 'acme', delayMs: 0 });
      },
      { retryTable: { table: store.retryTable }, onOutcome: (o) => outcomes.push(o) },
    );
    const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: topology.exchange, ratePerSecond: 1000, pollMs: 20, relay: { pollMs: 20 } });
    await scheduler.start();
    try {
      const { messageId } = await warren.publish('order.created', { orderId: 5 });
      await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'the message is back from the retry table and handled');
      const producer = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId);
      const [waited, handled] = consumerSpans(producer?.spanContext().traceId as string);
      expect(consumerSpans(producer?.spanContext().traceId as string)).toHaveLength(2);
      expect(waited?.attributes).toMatchObject({ 'warren.outcome': 'waiting', 'warren.wait.dependency': 'ledger', 'warren.wait.tenant': 'acme' });
      expect(handled?.attributes).toMatchObject({ 'warren.outcome': 'acked' });
      expect(handled?.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
      expect(handled?.links.map((l) => l.context.spanId)).toEqual([waited?.spanContext().spanId]);
    } finally {
      await scheduler.stop();
    }
  });
});
