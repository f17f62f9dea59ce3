/**
 * OpenTelemetry tracing for warren, on `@opentelemetry/api` (an optional peer dependency,
 * loaded here if it is installed). Without it, or without an SDK registered by the
 * application, every function below hands back a no-op and costs next to nothing.
 *
 * What it writes on a message: the W3C `traceparent` / `tracestate` headers (through the
 * application's propagator, at publish and when an outbox row is added), and, on every
 * move a consumer makes, {@link TRACE_HEADER}`.previous`: the span context of the attempt
 * that moved it, so the next attempt's span links to it. A replay writes
 * {@link TRACE_HEADER}`.replay`, the replay operation's span context.
 *
 * The rest of warren calls in at five places: {@link stampTrace} (publisher and outbox),
 * {@link tracePublish} (the producer span), {@link traceDelivery} (one consumer span per
 * delivery, ended with its outcome), {@link traceReplay} (a parked-queue replay).
 */
import { createRequire } from 'node:module';
import type * as Otel from '@opentelemetry/api';

/** Header names warren writes for tracing (none starts with `x-`). */
export const TRACE_HEADER = {
  /** The span context of the attempt that moved the message (`00-<trace>-<span>-<flags>`). */
  previous: 'warren-trace-previous',
  /** The span context of the replay that sent the message back from the parked queue. */
  replay: 'warren-trace-replay',
} as const;

const TRACER_NAME = 'warren';
/** Longest error message put in a span's status (the exception event keeps the rest). */
const MAX_STATUS_CHARS = 500;
const SPAN_CONTEXT_FORMAT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

type Api = typeof Otel;

/** The API if it is installed; loaded once, synchronously, so importing warren never fails without it. */
const api: Api | undefined = (() => {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as Api;
  } catch {
    return undefined;
  }
})();

/** Reads AMQP headers for the propagator: amqplib gives strings, or Buffers for some peers. */
const headerGetter: Otel.TextMapGetter<Readonly<Record<string, unknown>>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const v = carrier[key];
    if (typeof v === 'string') return v;
    if (Buffer.isBuffer(v)) return v.toString('utf8');
    return undefined;
  },
};

const headerSetter: Otel.TextMapSetter<Record<string, unknown>> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

function tracer(): Otel.Tracer | undefined {
  return api?.trace.getTracer(TRACER_NAME);
}

/** `00-<trace>-<span>-<flags>`, the W3C form, for warren's own link headers. */
function formatSpanContext(sc: Otel.SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** A span context from one of warren's link headers; anything else (too long, malformed) is ignored. */
export function parseSpanContext(value: unknown): Otel.SpanContext | undefined {
  const text = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
  if (text === undefined || text.length !== 55) return undefined;
  const m = SPAN_CONTEXT_FORMAT.exec(text);
  if (!m || /^0+$/.test(m[1] as string) || /^0+$/.test(m[2] as string)) return undefined;
  return { traceId: m[1] as string, spanId: m[2] as string, traceFlags: parseInt(m[3] as string, 16), isRemote: true };
}

function bounded(text: string): string {
  return text.length > MAX_STATUS_CHARS ? `${text.slice(0, MAX_STATUS_CHARS)}… (${text.length - MAX_STATUS_CHARS} more characters)` : text;
}

function recordError(span: Otel.Span, error: unknown): void {
  const err = error instanceof Error ? error : new Error(String(error));
  span.recordException(err);
  span.setStatus({ code: 2 /* SpanStatusCode.ERROR */, message: bounded(`${err.name}: ${err.message}`) });
}

/**
 * Writes the trace context into a message's headers: that of `traceContext` (a producer
 * span's), else the application's active context (so an outbox row carries the context
 * of the code that added it). A no-op without an SDK's propagator. Returns `headers`.
 */
export function stampTrace(headers: Record<string, unknown>, traceContext?: unknown): Record<string, unknown> {
  if (api !== undefined) api.propagation.inject((traceContext as Otel.Context | undefined) ?? api.context.active(), headers, headerSetter);
  return headers;
}

/**
 * Runs a publish in a PRODUCER span, ended when `send` settles (at the broker's confirm,
 * or with its error). `send` gets the context to stamp into the message.
 */
export function tracePublish<R extends { readonly messageId: string }>(exchange: string, routingKey: string, send: (traceContext: unknown) => Promise<R>): Promise<R> {
  const t = tracer();
  if (t === undefined) return send(undefined);
  const destination = exchange === '' ? 'amq.default' : exchange;
  const span = t.startSpan(`publish ${destination}`, {
    kind: 3 /* SpanKind.PRODUCER */,
    attributes: {
      'messaging.system': 'rabbitmq',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'publish',
      'messaging.destination.name': destination,
      'messaging.rabbitmq.destination.routing_key': routingKey,
    },
  });
  const ctx = (api as Api).trace.setSpan((api as Api).context.active(), span);
  // A span that records nothing (no SDK, or not sampled) still carries its context into
  // the headers, but has nothing to end: no second promise per publish for it.
  if (!span.isRecording()) return send(ctx);
  return send(ctx).then(
    (receipt) => {
      span.setAttribute('messaging.message.id', receipt.messageId);
      span.end();
      return receipt;
    },
    (error: unknown) => {
      recordError(span, error);
      span.end();
      throw error;
    },
  );
}

/** What {@link traceDelivery} needs to know of the consumer. */
export interface TracedConsumer {
  readonly name: string;
  readonly queue: string;
  readonly retryQueues: readonly string[];
}

/** The consumer span of one delivery. */
export interface DeliveryTrace {
  /** Runs `work` (the handler) with the span active, so the handler's spans are its children. */
  run<R>(work: () => R): R;
  /**
   * The headers of the message's next copy (a retry, a park, a retry-table row, a
   * crash-loop move) with this span as the previous attempt. Returns a new object when
   * it adds the header; do not change the one it returns.
   */
  headers(headers: Readonly<Record<string, unknown>>): Record<string, unknown>;
  /** Ends the span with the outcome; without one, the delivery had none (its channel closed). Idempotent. */
  end(outcome?: DeliveryOutcome): void;
}

/** The parts of a consumer's outcome the span records. */
export interface DeliveryOutcome {
  readonly kind: string;
  readonly queue?: string;
  readonly reason?: string;
  readonly error?: unknown;
  readonly dependency?: string;
  readonly tenant?: string | null;
}

const NO_DELIVERY_TRACE: DeliveryTrace = {
  run: (work) => work(),
  headers: (headers) => headers as Record<string, unknown>,
  end: () => undefined,
};

class ConsumerSpan implements DeliveryTrace {
  private ended = false;
  private readonly context: Otel.Context;

  constructor(
    private readonly span: Otel.Span,
    parent: Otel.Context,
    private readonly retryQueues: readonly string[],
  ) {
    this.context = (api as Api).trace.setSpan(parent, span);
  }

  run<R>(work: () => R): R {
    return (api as Api).context.with(this.context, work);
  }

  headers(headers: Readonly<Record<string, unknown>>): Record<string, unknown> {
    const out: Record<string, unknown> = { ...headers, [TRACE_HEADER.previous]: formatSpanContext(this.span.spanContext()) };
    // The replay link belongs to the first attempt after the replay only.
    delete out[TRACE_HEADER.replay];
    return out;
  }

  end(outcome?: DeliveryOutcome): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.span;
    if (outcome === undefined) {
      span.setAttribute('warren.outcome', 'none');
      span.setStatus({ code: 2, message: 'no outcome: the channel closed before the delivery was settled; the broker delivers it again' });
      span.end();
      return;
    }
    span.setAttribute('warren.outcome', outcome.kind);
    if (outcome.kind === 'retried' && outcome.queue !== undefined) {
      const tier = this.retryQueues.indexOf(outcome.queue);
      if (tier >= 0) span.setAttribute('warren.retry.tier', tier);
      span.setAttribute('warren.retry.queue', outcome.queue);
    }
    if (outcome.kind === 'parked' && outcome.reason !== undefined) span.setAttribute('warren.parked.reason', outcome.reason);
    if (outcome.kind === 'waiting') {
      if (outcome.dependency !== undefined) span.setAttribute('warren.wait.dependency', outcome.dependency);
      if (typeof outcome.tenant === 'string') span.setAttribute('warren.wait.tenant', outcome.tenant);
    }
    if (outcome.error !== undefined) recordError(span, outcome.error);
    span.end();
  }
}

function stringHeader(headers: Readonly<Record<string, unknown>>, name: string): string | undefined {
  const v = headers[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Starts the CONSUMER span of a delivery: a child of the context its headers carry
 * (the producer's), linked to the previous attempt's span and to the replay that sent
 * it back, if any. `attempt` is this run's number, 1 on the first delivery.
 */
export function traceDelivery(consumer: TracedConsumer, msg: { readonly fields: { readonly exchange: string; readonly routingKey: string; readonly deliveryTag: number }; readonly properties: { readonly messageId?: unknown; readonly headers?: unknown }; readonly content: Buffer }, attempt: number): DeliveryTrace {
  const t = tracer();
  if (t === undefined) return NO_DELIVERY_TRACE;
  const o = api as Api;
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  const parent = o.propagation.extract(o.ROOT_CONTEXT, headers, headerGetter);
  const links: Otel.Link[] = [];
  const previous = parseSpanContext(headers[TRACE_HEADER.previous]);
  if (previous) links.push({ context: previous, attributes: { 'warren.link': 'previous-attempt' } });
  const replay = parseSpanContext(headers[TRACE_HEADER.replay]);
  if (replay) links.push({ context: replay, attributes: { 'warren.link': 'replay' } });
  const exchange = stringHeader(headers, 'warren-exchange') ?? msg.fields.exchange;
  const routingKey = stringHeader(headers, 'warren-routing-key') ?? msg.fields.routingKey;
  const attributes: Otel.Attributes = {
    'messaging.system': 'rabbitmq',
    'messaging.operation.type': 'process',
    'messaging.operation.name': 'process',
    'messaging.destination.name': exchange === '' ? 'amq.default' : exchange,
    'messaging.rabbitmq.destination.routing_key': routingKey,
    'messaging.consumer.group.name': consumer.name,
    'messaging.destination.subscription.name': consumer.queue,
    'messaging.rabbitmq.message.delivery_tag': msg.fields.deliveryTag,
    'messaging.message.body.size': msg.content.length,
    'warren.consumer': consumer.name,
    'warren.attempt': attempt,
  };
  if (typeof msg.properties.messageId === 'string') attributes['messaging.message.id'] = msg.properties.messageId;
  const span = t.startSpan(`process ${consumer.queue}`, { kind: 4 /* SpanKind.CONSUMER */, attributes, links }, parent);
  if (!span.isRecording() && !o.trace.isSpanContextValid(span.spanContext())) {
    // No SDK registered: nothing to record and nothing to pass on.
    return NO_DELIVERY_TRACE;
  }
  return new ConsumerSpan(span, parent, consumer.retryQueues);
}

/** The span of a replay from a parked queue. */
export interface ReplayTrace {
  /** The headers of a replayed copy, carrying this replay's span context for the copy's consumer span to link to. */
  headers(headers: Record<string, unknown>): Record<string, unknown>;
  /** Ends the span with the number replayed, or the error. */
  end(result: { readonly replayed: number } | { readonly error: unknown }): void;
}

const NO_REPLAY_TRACE: ReplayTrace = { headers: (headers) => headers, end: () => undefined };

/**
 * Starts the span of a replay (kind INTERNAL, in the caller's active context), with the
 * consumer and, when known, the person who asked for it.
 */
export function traceReplay(consumer: string, parkedQueue: string, actor: string | undefined): ReplayTrace {
  const t = tracer();
  if (t === undefined) return NO_REPLAY_TRACE;
  const attributes: Otel.Attributes = { 'messaging.system': 'rabbitmq', 'warren.consumer': consumer, 'warren.parked.queue': parkedQueue };
  if (actor !== undefined) attributes['warren.replay.actor'] = actor;
  const span = t.startSpan(`replay ${parkedQueue}`, { kind: 0 /* SpanKind.INTERNAL */, attributes });
  const sc = span.spanContext();
  if (!span.isRecording() && !(api as Api).trace.isSpanContextValid(sc)) return NO_REPLAY_TRACE;
  const value = formatSpanContext(sc);
  return {
    headers: (headers) => {
      headers[TRACE_HEADER.replay] = value;
      return headers;
    },
    end: (result) => {
      if ('error' in result) recordError(span, result.error);
      else span.setAttribute('warren.replay.count', result.replayed);
      span.end();
    },
  };
}
