/**
 * Tracing benchmark: what OpenTelemetry tracing costs, in one run on this machine's broker,
 * in three settings side by side:
 *
 * - no SDK: `@opentelemetry/api` installed, nothing registered (the default);
 * - ratio: the SDK with `ParentBased(TraceIdRatioBased(0.01))`, what production usually
 *   runs: one message in a hundred is traced, the rest carry an unsampled context;
 * - always on: the SDK with `AlwaysOn`: every publish and every delivery makes a span.
 *
 * Both SDK settings register what `NodeSDK` does: a BasicTracerProvider with a batch span
 * processor (its exporter counts the spans and drops them, so the figure is the cost of
 * making spans, not of shipping them), the async-hooks context manager and the W3C
 * propagator.
 *
 * - consume: messages/s drained from a backlog published through warren in the same
 *   setting (so each message carries the context its publish made); the median of the
 *   rounds, which rotate the order of the settings.
 * - publish: confirmed publishes/s through warren.publish, `WINDOW` in flight.
 * - span costs: CPU time per span in a loop, outside the broker's path: the SDK's own
 *   span (start, end), the least any consumer instrumentation does per delivery (the
 *   propagator's extract, a span, its context around the handler), warren's consumer and
 *   producer spans; and the Node CPU time of a delivery and of a publish with no SDK, to
 *   set them against.
 *
 * WARREN_BENCH_TRACING_MESSAGES and WARREN_BENCH_ROUNDS change the sizes;
 * WARREN_BENCH_TRACING_CONTEXT=none leaves out the context manager, to see its share.
 */
import { randomBytes } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { context, propagation, trace, ROOT_CONTEXT, type Context, type TextMapGetter } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator, ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type ReadableSpan, type Sampler, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { defineTopology, Warren } from '../src/index.js';
import { stampTrace, traceDelivery, tracePublish } from '../src/trace/index.js';
import { AMQP_URL, deleteTopology, type BenchRow } from './report.js';

const MESSAGES = Number(process.env['WARREN_BENCH_TRACING_MESSAGES'] ?? 20_000);
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? 3);
const SPAN_LOOPS = Number(process.env['WARREN_BENCH_TRACING_SPANS'] ?? 5000);
const RATIO = 0.01;
const PREFETCH = 50;
const WINDOW = 256;
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

type Setting = 'off' | 'ratio' | 'on';
const SETTINGS: readonly Setting[] = ['off', 'ratio', 'on'];
const LABEL: Record<Setting, string> = { off: 'no SDK', ratio: `SDK, ParentBased(TraceIdRatioBased(${RATIO}))`, on: 'SDK, AlwaysOn' };

/** Drops every span, counting them, so the figure is the cost of making spans, not of shipping them. */
class CountingExporter implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.spans += spans.length;
    done({ code: ExportResultCode.SUCCESS });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** Registers the SDK with `sampler`; returns what turns it off again and counts the spans it exported. */
function register(sampler: Sampler): { off: () => Promise<number> } {
  const exporter = new CountingExporter();
  const provider = new BasicTracerProvider({ sampler, spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 65_536, maxExportBatchSize: 2048 })] });
  trace.setGlobalTracerProvider(provider);
  if (process.env['WARREN_BENCH_TRACING_CONTEXT'] !== 'none') context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  let spans: Promise<number> | undefined;
  return {
    off: () =>
      (spans ??= (async () => {
        await provider.forceFlush();
        await provider.shutdown();
        trace.disable();
        context.disable();
        propagation.disable();
        return exporter.spans;
      })()),
  };
}

function samplerOf(setting: Exclude<Setting, 'off'>): Sampler {
  return setting === 'on' ? new AlwaysOnSampler() : new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(RATIO) });
}

function prefix(label: string): string {
  return `bench.tracing.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

/** Node CPU time (user and system) in µs since `since`. */
function cpuSince(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return used.user + used.system;
}

async function publishAll(warren: Warren): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < MESSAGES) {
      next += 1;
      await warren.publish('bench.order', { ...PAYLOAD, orderId: next });
    }
  };
  await Promise.all(Array.from({ length: WINDOW }, worker));
}

interface RoundFigures {
  /** Confirmed publishes/s. */
  publish: number;
  /** Messages/s consumed. */
  consume: number;
  /** Node CPU µs per publish and per delivery. */
  publishCpu: number;
  consumeCpu: number;
}

/** Publishes `MESSAGES`, then drains them, in one setting. */
async function round(setting: Setting): Promise<RoundFigures> {
  const p = prefix('round');
  const name = `${p}.work`;
  const topology = defineTopology({ exchange: `${p}.events`, consumers: { [name]: { bindings: ['bench.#'] } } });
  const sdk = setting === 'off' ? undefined : register(samplerOf(setting));
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    let cpu = process.cpuUsage();
    let t = performance.now();
    await publishAll(warren);
    const publish = MESSAGES / ((performance.now() - t) / 1000);
    const publishCpu = cpuSince(cpu) / MESSAGES;
    let done = 0;
    let resolve!: () => void;
    const finished = new Promise<void>((r) => (resolve = r));
    t = 0;
    await warren.consume(
      name,
      async () => {
        if (t === 0) {
          t = performance.now();
          cpu = process.cpuUsage();
        }
      },
      {
        prefetch: PREFETCH,
        onOutcome: () => {
          if (++done === MESSAGES) resolve();
        },
      },
    );
    await finished;
    const consume = MESSAGES / ((performance.now() - t) / 1000);
    const consumeCpu = cpuSince(cpu) / MESSAGES;
    await warren.close();
    if (sdk) {
      // The figures are real: a producer and a consumer span per sampled message.
      const spans = await sdk.off();
      if (setting === 'on' && spans !== 2 * MESSAGES) throw new Error(`expected ${2 * MESSAGES} spans, the exporter got ${spans}`);
      if (setting === 'ratio' && (spans % 2 !== 0 || spans > 0.1 * MESSAGES)) throw new Error(`expected a producer and a consumer span for about ${RATIO * 100}% of ${MESSAGES} messages, the exporter got ${spans} spans`);
    }
    return { publish, consume, publishCpu, consumeCpu };
  } finally {
    await warren.close();
    await deleteTopology(topology);
    await sdk?.off();
  }
}

/**
 * Least CPU µs per call of `f` over twenty passes of `SPAN_LOOPS` calls (the batch
 * processor gets a turn every thousand): the least, because other work on the machine
 * only ever adds to it.
 */
async function cpuPerCall(f: () => unknown): Promise<number> {
  for (let i = 0; i < 2000; i++) await f();
  let best = Infinity;
  for (let pass = 0; pass < 20; pass++) {
    const since = process.cpuUsage();
    for (let i = 0; i < SPAN_LOOPS; i += 1000) {
      for (let j = 0; j < 1000; j++) {
        const r = f();
        if (r instanceof Promise) await r;
      }
      await nextTurn();
    }
    best = Math.min(best, cpuSince(since) / SPAN_LOOPS);
  }
  return best;
}

const getter: TextMapGetter<Record<string, unknown>> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => (typeof carrier[key] === 'string' ? carrier[key] : undefined),
};

interface SpanCosts {
  bare: number;
  leastConsumer: number;
  consumer: number;
  leastProducer: number;
  producer: number;
}

/**
 * CPU µs per span in one setting, for a message whose context says sampled (AlwaysOn)
 * or not (ratio: 99 in 100 messages arrive so). A handler that does nothing but await.
 */
async function spanCosts(setting: Setting): Promise<SpanCosts> {
  const sdk = setting === 'off' ? undefined : register(samplerOf(setting));
  try {
    const flags = setting === 'on' ? '01' : '00';
    const headers = { 'warren-occurred-at': new Date().toISOString(), traceparent: `00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-${flags}` };
    const msg = { fields: { exchange: 'orders.events', routingKey: 'order.created', deliveryTag: 1 }, properties: { messageId: '0192d0c4-1b2a-7c3d-8e4f-5a6b7c8d9e0f', headers }, content: Buffer.alloc(200) };
    const consumer = { name: 'billing', queue: 'billing', retryQueues: ['billing.retry.0'] };
    const handler = async () => undefined;
    const tracer = trace.getTracer('bench');
    const bare = await cpuPerCall(() => tracer.startSpan('bare').end());
    const leastConsumer = await cpuPerCall(async () => {
      const parent: Context = propagation.extract(ROOT_CONTEXT, headers, getter);
      const span = tracer.startSpan('process billing', { kind: 4 }, parent);
      await context.with(trace.setSpan(parent, span), handler);
      span.end();
    });
    const consumerSpan = await cpuPerCall(async () => {
      const t = traceDelivery(consumer, msg, 1);
      await t.run(handler);
      t.end({ kind: 'acked' });
    });
    // A publish: a span in the caller's context, its context written into the headers,
    // ended once the (here immediate) confirm is in.
    const leastProducer = await cpuPerCall(async () => {
      const span = tracer.startSpan('publish orders.events', { kind: 3 });
      propagation.inject(trace.setSpan(context.active(), span), {});
      await handler();
      span.end();
    });
    const receipt = { messageId: msg.properties.messageId };
    const producer = await cpuPerCall(() =>
      tracePublish('orders.events', 'order.created', async (traceContext) => {
        stampTrace({}, traceContext);
        return receipt;
      }),
    );
    return { bare, leastConsumer, consumer: consumerSpan, leastProducer, producer };
  } finally {
    await sdk?.off();
  }
}

export async function benchTracing(): Promise<BenchRow[]> {
  const figures: Record<Setting, RoundFigures[]> = { off: [], ratio: [], on: [] };
  for (let r = 0; r < ROUNDS; r++) {
    // Rotate the order, so no setting always meets a warmer broker.
    for (let i = 0; i < SETTINGS.length; i++) {
      const setting = SETTINGS[(r + i) % SETTINGS.length] as Setting;
      figures[setting].push(await round(setting));
    }
  }
  const med = (setting: Setting, pick: (f: RoundFigures) => number) => median(figures[setting].map(pick));
  const costs: Record<Setting, SpanCosts> = { off: await spanCosts('off'), ratio: await spanCosts('ratio'), on: await spanCosts('on') };
  const rows: BenchRow[] = [];
  const backlog = `${MESSAGES.toLocaleString('en-US')} backlog, prefetch ${PREFETCH}`;
  for (const [what, pick] of [
    [`consume (${backlog})`, (f: RoundFigures) => f.consume],
    [`confirmed publish (window ${WINDOW})`, (f: RoundFigures) => f.publish],
  ] as const) {
    rows.push({ group: `${what}, ${LABEL.off}`, metric: 'msg/s', warren: med('off', pick) });
    for (const setting of ['ratio', 'on'] as const) {
      rows.push({ group: `${what}, ${LABEL[setting]}`, metric: 'msg/s', warren: med(setting, pick), baseline: med('off', pick), baselineName: LABEL.off, goal: '≥ 0.95' });
    }
  }
  // Node's CPU time per message moves less than the rates when other work shares the machine.
  for (const [what, pick] of [
    ['Node CPU per delivery', (f: RoundFigures) => f.consumeCpu],
    ['Node CPU per confirmed publish', (f: RoundFigures) => f.publishCpu],
  ] as const) {
    rows.push({ group: `${what}, ${LABEL.off}`, metric: 'µs', warren: med('off', pick) });
    for (const setting of ['ratio', 'on'] as const) {
      rows.push({ group: `${what}, ${LABEL[setting]}`, metric: 'µs', warren: med(setting, pick), baseline: med('off', pick), baselineName: LABEL.off });
    }
  }
  for (const setting of ['ratio', 'on'] as const) {
    const c = costs[setting];
    const sampled = setting === 'on' ? 'sampled' : 'sampled out';
    rows.push({ group: `SDK span, start and end (${LABEL[setting]})`, metric: 'µs CPU', warren: c.bare });
    rows.push({ group: `  consumer span by warren (${sampled})`, metric: 'µs CPU', warren: c.consumer, baseline: c.leastConsumer, baselineName: 'extract, span, context' });
    rows.push({ group: `  producer span by warren (${sampled})`, metric: 'µs CPU', warren: c.producer, baseline: c.leastProducer, baselineName: 'span, inject' });
  }
  rows.push({ group: `warren's calls per delivery (${LABEL.off})`, metric: 'µs CPU', warren: costs.off.consumer });
  rows.push({ group: `warren's calls per publish (${LABEL.off})`, metric: 'µs CPU', warren: costs.off.producer });
  if (process.env['WARREN_BENCH_VERBOSE']) console.log(JSON.stringify(figures));
  return rows;
}
