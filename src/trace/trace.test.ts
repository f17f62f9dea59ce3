/**
 * Tracing against a real broker, with the OpenTelemetry SDK's in-memory exporter: one
 * trace per message across publish, retries, parking, replay, the outbox relay and the
 * retry table; the spans of one message's attempts linked in order; and a trace sampled
 * out at its root passed on unrecorded.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { context, propagation, trace, ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags } from '@opentelemetry/api';
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
  it('stored in the outbox, relayed, consumed: the relay span is a child of the code that added the row, the consumer span its child', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { audit: { queue: name('audit'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const outcomes: Outcome[] = [];
    await warren.consume('audit', async () => undefined, { onOutcome: (o) => outcomes.push(o) });
    const { traceId, spanId, messageId } = await appTracer().startActiveSpan('place order', async (span) => {
      const receipt = await store.transaction((tx) => store.outbox.add(tx, 'order.created', { orderId: 3 }));
      span.end();
      return { ...span.spanContext(), messageId: receipt.messageId };
    });
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    await relay.start();
    try {
      await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'the relayed row is consumed');
    } finally {
      await relay.stop();
    }
    await waitFor(() => consumerSpans(traceId).length === 1, 'the consumer span to end');
    const relayed = spansOf(traceId).filter((s) => s.kind === SpanKind.PRODUCER);
    expect(relayed).toHaveLength(1);
    const [relaySpan] = relayed;
    expect(relaySpan?.name).toBe(`relay ${topology.exchange}`);
    expect(relaySpan?.parentSpanContext?.spanId).toBe(spanId);
    expect(relaySpan?.attributes).toMatchObject({
      'messaging.system': 'rabbitmq',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'publish',
      'messaging.destination.name': topology.exchange,
      'messaging.rabbitmq.destination.routing_key': 'order.created',
      'messaging.message.id': messageId,
      'warren.relay.source': 'outbox',
      'warren.relay.outcome': 'sent',
      'warren.outbox.attempts': 0,
    });
    expect(typeof relaySpan?.attributes['warren.outbox.id']).toBe('string');
    expect(relaySpan?.status.code).toBe(SpanStatusCode.UNSET);
    const [consumed] = consumerSpans(traceId);
    expect(consumed?.parentSpanContext?.spanId).toBe(relaySpan?.spanContext().spanId);
  });

  it('a row the broker cannot route: its relay span ends in error with the outcome flagged', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { audit: { queue: name('audit'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const traceId = await appTracer().startActiveSpan('place order', async (span) => {
      await store.transaction((tx) => store.outbox.add(tx, 'nobody.listens', { orderId: 4 }));
      span.end();
      return span.spanContext().traceId;
    });
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    const pass = await relay.runOnce();
    expect(pass.flagged).toBe(1);
    const [relaySpan] = spansOf(traceId).filter((s) => s.kind === SpanKind.PRODUCER);
    expect(relaySpan?.attributes).toMatchObject({ 'warren.relay.source': 'outbox', 'warren.relay.outcome': 'flagged', 'messaging.rabbitmq.destination.routing_key': 'nobody.listens' });
    expect(relaySpan?.status.code).toBe(SpanStatusCode.ERROR);
    expect(relaySpan?.status.message).toMatch(/NO_ROUTE|unroutable/i);
  });

  it('a row added in a context sampled out: no span is recorded, and the relayed message carries the same trace, unsampled', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { audit: { queue: name('audit'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const conn = await rawConnection();
    const unsampled = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex'), traceFlags: TraceFlags.NONE, isRemote: true };
    await context.with(trace.setSpanContext(ROOT_CONTEXT, unsampled), () => store.transaction((tx) => store.outbox.add(tx, 'order.created', { orderId: 5 })));
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    expect((await relay.runOnce()).published).toBe(1);
    const queue = topology.consumer('audit').queue;
    await waitFor(async () => (await depth(conn, queue)) === 1, 'the relayed message is routed');
    const [msg] = await drain(conn, queue);
    const traceparent = String(msg?.properties.headers?.['traceparent']);
    expect(traceparent).toMatch(new RegExp(`^00-${unsampled.traceId}-[0-9a-f]{16}-00$`));
    // The relay's own (unrecorded) span, not the stored one: the context moved on a step.
    expect(traceparent).not.toContain(unsampled.spanId);
    expect(spansOf(unsampled.traceId)).toEqual([]);
  });
});

describe.each(BACKENDS)('tracing through the retry table: %s', (backend) => {
  it('waited in the retry table, released, consumed: the release span is in the same trace, linked to the attempt that made it wait', async () => {
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
      const producer = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId && s.name.startsWith('publish '));
      const traceId = producer?.spanContext().traceId as string;
      const releaseSpans = () => spansOf(traceId).filter((s) => s.kind === SpanKind.PRODUCER && s !== producer);
      // The release span ends when the relay has the confirm, which can come after the consumer acked.
      await waitFor(() => consumerSpans(traceId).length === 2 && releaseSpans().length > 0, 'both consumer spans and the release span to end');
      const [waited, handled] = consumerSpans(traceId);
      expect(waited?.attributes).toMatchObject({ 'warren.outcome': 'waiting', 'warren.wait.dependency': 'ledger', 'warren.wait.tenant': 'acme' });
      expect(waited?.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
      const releases = releaseSpans();
      expect(releases).toHaveLength(1);
      const [release] = releases;
      const queue = topology.consumer('billing').queue;
      expect(release?.name).toBe(`release ${queue}`);
      expect(release?.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
      expect(release?.attributes).toMatchObject({
        'messaging.system': 'rabbitmq',
        'messaging.operation.type': 'send',
        'messaging.destination.name': 'amq.default',
        'messaging.rabbitmq.destination.routing_key': queue,
        'messaging.message.id': messageId,
        'warren.relay.source': 'retry-table',
        'warren.relay.outcome': 'sent',
        'warren.consumer': 'billing',
        'warren.wait.dependency': 'ledger',
        'warren.wait.tenant': 'acme',
      });
      expect(release?.links.map((l) => [l.attributes?.['warren.link'], l.context.spanId])).toEqual([['previous-attempt', waited?.spanContext().spanId]]);
      expect(handled?.attributes).toMatchObject({ 'warren.outcome': 'acked' });
      expect(handled?.parentSpanContext?.spanId).toBe(release?.spanContext().spanId);
      expect(handled?.links.map((l) => l.context.spanId)).toEqual([waited?.spanContext().spanId]);
    } finally {
      await scheduler.stop();
    }
  });

  it('waiting in the retry table, parked by an operator: the park span is labelled as a parked retry-table row, in the same trace, linked to the attempt that made it wait', async () => {
    const h = await harness(backend);
    const store = h.store();
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const warren = await connectWarren(topology);
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async () => {
        // Due in an hour: only the operator's park takes it out of the table.
        throw new WaitForConditionError('ledger', { tenant: 'acme', delayMs: 3_600_000 });
      },
      { retryTable: { table: store.retryTable }, onOutcome: (o) => outcomes.push(o) },
    );
    const { messageId } = await warren.publish('order.created', { orderId: 6 });
    await waitFor(() => outcomes.some((o) => o.kind === 'waiting'), 'the message to wait in the retry table');
    expect(await store.retryTable.park({ consumer: 'billing' }, { actor: 'dana' })).toBe(1);
    const relay = store.relay({ publisher: warren.publisher, exchange: topology.exchange });
    expect(await relay.runOnce()).toMatchObject({ published: 1, flagged: 0, failed: 0 });
    const { parkedQueue } = topology.consumer('billing');
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, parkedQueue)) === 1, 'the parked row to reach the parked queue');
    const producer = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.PRODUCER && s.attributes['messaging.message.id'] === messageId && s.name.startsWith('publish '));
    const traceId = producer?.spanContext().traceId as string;
    const [waited] = consumerSpans(traceId);
    expect(waited?.attributes).toMatchObject({ 'warren.outcome': 'waiting' });
    const parks = spansOf(traceId).filter((s) => s.kind === SpanKind.PRODUCER && s !== producer);
    expect(parks).toHaveLength(1);
    const [park] = parks;
    expect(park?.name).toBe(`park ${parkedQueue}`);
    expect(park?.parentSpanContext?.spanId).toBe(producer?.spanContext().spanId);
    expect(park?.attributes).toMatchObject({
      'messaging.destination.name': 'amq.default',
      'messaging.rabbitmq.destination.routing_key': parkedQueue,
      'messaging.message.id': messageId,
      'warren.relay.source': 'retry-table-park',
      'warren.relay.outcome': 'sent',
      'warren.consumer': 'billing',
      'warren.wait.dependency': 'ledger',
      'warren.wait.tenant': 'acme',
    });
    expect(park?.links.map((l) => [l.attributes?.['warren.link'], l.context.spanId])).toEqual([['previous-attempt', waited?.spanContext().spanId]]);
    // The parked copy carries the park span's context.
    const [copy] = await drain(conn, parkedQueue);
    expect(String(copy?.properties.headers?.['traceparent'])).toBe(`00-${traceId}-${park?.spanContext().spanId}-01`);
  });
});

describe('tracing a trace sampled out at its root', () => {
  it('records no span, yet the handler, the retry and the next attempt all carry the same unsampled trace', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 3 },
      consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
    }));
    const warren = await connectWarren(topology);
    const seen: Array<{ traceparent: unknown; previous: unknown; handler: string | undefined; recording: boolean | undefined }> = [];
    const outcomes: Outcome[] = [];
    await warren.consume(
      'billing',
      async (_p: unknown, ctx: MessageContext) => {
        const active = trace.getActiveSpan();
        seen.push({ traceparent: ctx.headers['traceparent'], previous: ctx.headers[TRACE_HEADER.previous], handler: active?.spanContext().traceId, recording: active?.isRecording() });
        if (ctx.attempt === 1) throw new Error('once');
      },
      { onOutcome: (o) => outcomes.push(o) },
    );
    const unsampled = { traceId: randomBytes(16).toString('hex'), spanId: randomBytes(8).toString('hex'), traceFlags: TraceFlags.NONE, isRemote: true };
    await context.with(trace.setSpanContext(ROOT_CONTEXT, unsampled), () => warren.publish('order.created', { orderId: 6 }));
    // The first attempt's outcome is counted after its move's confirm, which can come after the copy was handled.
    await waitFor(() => outcomes.length === 2, 'the retry and the second attempt to reach their outcomes');
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['acked', 'retried']);
    expect(seen).toHaveLength(2);
    const [first, second] = seen;
    // The publish's own (unrecorded) span is the parent of both attempts.
    expect(String(first?.traceparent)).toMatch(new RegExp(`^00-${unsampled.traceId}-[0-9a-f]{16}-00$`));
    expect(second?.traceparent).toBe(first?.traceparent);
    expect(first?.previous).toBeUndefined();
    expect(parseSpanContext(second?.previous)).toMatchObject({ traceId: unsampled.traceId, traceFlags: TraceFlags.NONE });
    for (const s of seen) expect(s).toMatchObject({ handler: unsampled.traceId, recording: false });
    expect(spansOf(unsampled.traceId)).toEqual([]);
  });
});
