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
 * The rest of warren calls in at six places: {@link stampTrace} (publisher and outbox),
 * {@link tracePublish} (the producer span), {@link traceDelivery} (one consumer span per
 * delivery, ended with its outcome), {@link traceRelay} (the producer span of a row the
 * outbox relay publishes: an application's outbox row or a retry-table row sent back),
 * {@link traceReplay} (a parked-queue replay).
 *
 * Cost: with no SDK registered each call returns after one lookup of the global tracer
 * provider. With an SDK, a span the sampler drops (`isRecording()` false) gets no
 * attributes, events or error text beyond those a sampler is given at its start, but its
 * context is still passed on (to the handler, onto retries and moves, into relayed
 * rows), so a trace sampled out at its root stays sampled out all the way through.
 */
import { createRequire } from 'node:module';
import type * as Otel from '@opentelemetry/api';
import { HEADER } from '../headers.js';
import type { RelaySource } from '../store/relay-source.js';

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

/** The provider the API hands out while no SDK is registered (a singleton of the API's). */
const NOOP_PROVIDER: unknown = api === undefined ? undefined : new api.ProxyTracerProvider().getDelegate();
let tracerOf: { readonly provider: unknown; readonly tracer: Otel.Tracer | undefined } = { provider: undefined, tracer: undefined };

/**
 * The registered SDK's tracer, or undefined when no SDK is registered. Called once per
 * message, so it only looks the provider up: the tracer is fetched again when an
 * application registers (or removes) a provider.
 */
function tracer(): Otel.Tracer | undefined {
  if (api === undefined) return undefined;
  const global = api.trace.getTracerProvider() as Otel.TracerProvider & { getDelegate?: () => Otel.TracerProvider };
  const provider = typeof global.getDelegate === 'function' ? global.getDelegate() : global;
  if (provider !== tracerOf.provider) tracerOf = { provider, tracer: provider === NOOP_PROVIDER ? undefined : provider.getTracer(TRACER_NAME) };
  return tracerOf.tracer;
}

/** True when an OpenTelemetry SDK is registered: spans would be made. Cheap enough to ask per message. */
export function tracing(): boolean {
  return tracer() !== undefined;
}

/** At most this many cached start-attribute objects per consumer (one per exchange seen). */
const MAX_CACHED_EXCHANGES = 32;

/** `amq.default` for the default exchange, as the semantic conventions name it. */
function destinationName(exchange: string): string {
  return exchange === '' ? 'amq.default' : exchange;
}

/**
 * Frozen attribute objects per key, built once: what a span is started with is what a
 * sampler sees, and the SDK copies it, so the same object serves every message.
 */
class AttributeCache {
  private readonly byKey = new Map<string, Otel.Attributes>();
  constructor(private readonly build: (key: string) => Otel.Attributes) {}
  get(key: string): Otel.Attributes {
    let attributes = this.byKey.get(key);
    if (attributes === undefined) {
      attributes = Object.freeze(this.build(key));
      if (this.byKey.size < MAX_CACHED_EXCHANGES) this.byKey.set(key, attributes);
    }
    return attributes;
  }
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
  if (api !== undefined && tracer() !== undefined) api.propagation.inject((traceContext as Otel.Context | undefined) ?? api.context.active(), headers, headerSetter);
  return headers;
}

const PUBLISH_ATTRIBUTES = new AttributeCache((exchange) => ({
  'messaging.system': 'rabbitmq',
  'messaging.operation.type': 'send',
  'messaging.destination.name': destinationName(exchange),
}));

/**
 * Runs a publish in a PRODUCER span, ended when `send` settles (at the broker's confirm,
 * or with its error). `send` gets the context to stamp into the message. A span the
 * sampler dropped is only passed on: nothing waits for `send` to settle to end it.
 */
export function tracePublish<R extends { readonly messageId: string }>(exchange: string, routingKey: string, send: (traceContext: unknown) => Promise<R>): Promise<R> {
  const t = tracer();
  if (t === undefined) return send(undefined);
  const o = api as Api;
  const span = t.startSpan(`publish ${destinationName(exchange)}`, { kind: 3 /* SpanKind.PRODUCER */, attributes: PUBLISH_ATTRIBUTES.get(exchange) });
  const ctx = o.trace.setSpan(o.context.active(), span);
  // A span that records nothing (no SDK, or not sampled) still carries its context into
  // the headers, but has nothing to end: no second promise per publish for it.
  if (!span.isRecording()) return send(ctx);
  span.setAttribute('messaging.operation.name', 'publish');
  span.setAttribute('messaging.rabbitmq.destination.routing_key', routingKey);
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

/** True when `trace` is a span of an SDK's, not the stand-in used without one. */
export function traced(trace: DeliveryTrace | undefined): boolean {
  return trace !== undefined && trace !== NO_DELIVERY_TRACE;
}

/** What a consumer's spans share, built once per consumer. */
interface ConsumerConstants {
  readonly spanName: string;
  /** The attributes a span starts with (those the semantic conventions give samplers), by exchange. */
  readonly start: AttributeCache;
  readonly retryQueues: readonly string[];
}

const CONSUMERS = new WeakMap<TracedConsumer, ConsumerConstants>();

function constantsOf(consumer: TracedConsumer): ConsumerConstants {
  let c = CONSUMERS.get(consumer);
  if (c === undefined) {
    c = {
      spanName: `process ${consumer.queue}`,
      start: new AttributeCache((exchange) => ({
        'messaging.system': 'rabbitmq',
        'messaging.operation.type': 'process',
        'messaging.destination.name': destinationName(exchange),
        'messaging.consumer.group.name': consumer.name,
        'messaging.destination.subscription.name': consumer.queue,
      })),
      retryQueues: consumer.retryQueues,
    };
    CONSUMERS.set(consumer, c);
  }
  return c;
}

/** A consumer span, recording or not: either way its context is passed on. */
class ConsumerSpan implements DeliveryTrace {
  private ended = false;
  private readonly context: Otel.Context;

  constructor(
    private readonly span: Otel.Span,
    parent: Otel.Context,
    private readonly retryQueues: readonly string[],
    private readonly recording: boolean,
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
    if (!this.recording) {
      span.end();
      return;
    }
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

/** The links to warren's own link headers, or undefined when there is none (a first delivery). */
function linksOf(headers: Readonly<Record<string, unknown>>): Otel.Link[] | undefined {
  if (headers[TRACE_HEADER.previous] === undefined && headers[TRACE_HEADER.replay] === undefined) return undefined;
  const links: Otel.Link[] = [];
  const previous = parseSpanContext(headers[TRACE_HEADER.previous]);
  if (previous) links.push({ context: previous, attributes: { 'warren.link': 'previous-attempt' } });
  const replay = parseSpanContext(headers[TRACE_HEADER.replay]);
  if (replay) links.push({ context: replay, attributes: { 'warren.link': 'replay' } });
  return links;
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
  const c = constantsOf(consumer);
  const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
  const parent = o.propagation.extract(o.ROOT_CONTEXT, headers, headerGetter);
  const exchange = stringHeader(headers, HEADER.exchange) ?? msg.fields.exchange;
  const links = linksOf(headers);
  const span = t.startSpan(c.spanName, links === undefined ? { kind: 4 /* SpanKind.CONSUMER */, attributes: c.start.get(exchange) } : { kind: 4, attributes: c.start.get(exchange), links }, parent);
  const recording = span.isRecording();
  if (recording) {
    span.setAttribute('messaging.operation.name', 'process');
    span.setAttribute('messaging.rabbitmq.destination.routing_key', stringHeader(headers, HEADER.routingKey) ?? msg.fields.routingKey);
    span.setAttribute('messaging.rabbitmq.message.delivery_tag', msg.fields.deliveryTag);
    span.setAttribute('messaging.message.body.size', msg.content.length);
    span.setAttribute('warren.consumer', consumer.name);
    span.setAttribute('warren.attempt', attempt);
    if (typeof msg.properties.messageId === 'string') span.setAttribute('messaging.message.id', msg.properties.messageId);
  }
  return new ConsumerSpan(span, parent, c.retryQueues, recording);
}

export type { RelaySource };

/** What the outbox relay did with a row it published; recorded on its span. */
export type RelayOutcome =
  | { readonly status: 'sent' }
  /** Confirmed, but behind a row that was not (strict order): it stays pending and goes again. */
  | { readonly status: 'held-back' }
  | { readonly status: 'flagged' | 'failed'; readonly error: string };

/** The producer span of one relayed row. */
export interface RelayTrace {
  /** The headers to publish: the stored ones, with this span's context in place of the stored context. */
  readonly headers: Record<string, unknown>;
  /** Ends the span with what became of the row. Idempotent. */
  end(outcome: RelayOutcome): void;
}

const RELAY_ATTRIBUTES = new AttributeCache((exchange) => ({
  'messaging.system': 'rabbitmq',
  'messaging.operation.type': 'send',
  'messaging.destination.name': destinationName(exchange),
}));

/**
 * Starts the PRODUCER span of a row the outbox relay publishes: a child of the context
 * stored in the row (that of the code that added it, or, for a retry-table row, of the
 * message's last publish), linked to the attempt that made a retry-table row wait
 * (whether it goes back to its queue or, parked by an operator, to the parked queue). The
 * message goes out with this span's context, so its consumer span is the relay span's
 * child. Without an SDK the headers are handed back as they are.
 */
export function traceRelay(source: RelaySource, row: { readonly id: string; readonly messageId: string; readonly attempts: number }, message: { readonly exchange: string; readonly routingKey: string; readonly headers: Record<string, unknown> }): RelayTrace {
  const t = tracer();
  if (t === undefined) return { headers: message.headers, end: () => undefined };
  const o = api as Api;
  const stored = message.headers;
  const parent = o.propagation.extract(o.ROOT_CONTEXT, stored, headerGetter);
  const fromRetryTable = source !== 'outbox';
  const links = fromRetryTable ? linksOf(stored) : undefined;
  const name = source === 'retry-table' ? `release ${message.routingKey}` : source === 'retry-table-park' ? `park ${message.routingKey}` : `relay ${destinationName(message.exchange)}`;
  const start = RELAY_ATTRIBUTES.get(message.exchange);
  const span = t.startSpan(name, links === undefined ? { kind: 3 /* SpanKind.PRODUCER */, attributes: start } : { kind: 3, attributes: start, links }, parent);
  // The stored context gives way to this span's, whatever propagator wrote it.
  const headers: Record<string, unknown> = { ...stored };
  for (const field of o.propagation.fields()) delete headers[field];
  o.propagation.inject(o.trace.setSpan(parent, span), headers, headerSetter);
  if (!span.isRecording()) return { headers, end: () => span.end() };
  span.setAttributes({
    'messaging.operation.name': 'publish',
    'messaging.rabbitmq.destination.routing_key': message.routingKey,
    'messaging.message.id': row.messageId,
    'warren.relay.source': source,
    'warren.outbox.id': row.id,
    'warren.outbox.attempts': row.attempts,
  });
  if (fromRetryTable) {
    const consumer = stringHeader(stored, HEADER.consumer);
    if (consumer !== undefined) span.setAttribute('warren.consumer', consumer);
    const dependency = stringHeader(stored, HEADER.dependency);
    if (dependency !== undefined) span.setAttribute('warren.wait.dependency', dependency);
    const tenant = stringHeader(stored, HEADER.tenant);
    if (tenant !== undefined) span.setAttribute('warren.wait.tenant', tenant);
    const waits = stored[HEADER.waits];
    if (typeof waits === 'number') span.setAttribute('warren.wait.count', waits);
  }
  let ended = false;
  return {
    headers,
    end: (outcome) => {
      if (ended) return;
      ended = true;
      span.setAttribute('warren.relay.outcome', outcome.status);
      if (outcome.status === 'flagged' || outcome.status === 'failed') span.setStatus({ code: 2, message: bounded(outcome.error) });
      span.end();
    },
  };
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
