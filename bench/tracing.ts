/**
 * Tracing benchmark: what OpenTelemetry tracing costs, in one run on this machine's broker.
 * "on" registers the SDK (BasicTracerProvider, a batch span processor, a no-op exporter
 * that counts what it gets, the async-hooks context manager and the W3C propagator): every
 * publish gets a producer span and a traceparent, every delivery a consumer span.
 * "off" is `@opentelemetry/api` installed with no SDK registered, the default.
 *
 * - consume: messages/s drained from a backlog published through warren (so each one
 *   carries a traceparent when on); rounds alternate, the median is reported.
 * - publish: confirmed publishes/s through warren.publish, `WINDOW` in flight.
 *
 * WARREN_BENCH_TRACING_MESSAGES and WARREN_BENCH_ROUNDS change the sizes;
 * WARREN_BENCH_TRACING_CONTEXT=none leaves out the context manager, to see its share.
 */
import { randomBytes } from 'node:crypto';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator, ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { defineTopology, Warren } from '../src/index.js';
import { AMQP_URL, deleteTopology, type BenchRow } from './report.js';

const MESSAGES = Number(process.env['WARREN_BENCH_TRACING_MESSAGES'] ?? 20_000);
const ROUNDS = Number(process.env['WARREN_BENCH_ROUNDS'] ?? 3);
const PREFETCH = 50;
const WINDOW = 256;
const PAYLOAD = { orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(120) };

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

/** Registers the SDK; returns what turns it off again and the spans it exported. */
function tracingOn(): { off: () => Promise<number> } {
  const exporter = new CountingExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 65_536, maxExportBatchSize: 2048 })] });
  trace.setGlobalTracerProvider(provider);
  if (process.env['WARREN_BENCH_TRACING_CONTEXT'] !== 'none') context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  let spans: number | undefined;
  return {
    off: async () => {
      if (spans !== undefined) return spans;
      spans = 0;
      await provider.forceFlush();
      await provider.shutdown();
      trace.disable();
      context.disable();
      propagation.disable();
      spans = exporter.spans;
      return spans;
    },
  };
}

function prefix(label: string): string {
  return `bench.tracing.${label}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
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

/** Publishes `MESSAGES`, then drains them; returns publishes/s and messages/s consumed. */
async function round(on: boolean): Promise<{ publish: number; consume: number }> {
  const p = prefix('round');
  const name = `${p}.work`;
  const topology = defineTopology({ exchange: `${p}.events`, consumers: { [name]: { bindings: ['bench.#'] } } });
  const tracing = on ? tracingOn() : undefined;
  const warren = await Warren.connect({ url: AMQP_URL, topology });
  try {
    let t = performance.now();
    await publishAll(warren);
    const publish = MESSAGES / ((performance.now() - t) / 1000);
    let done = 0;
    let resolve!: () => void;
    const finished = new Promise<void>((r) => (resolve = r));
    t = 0;
    await warren.consume(name, async () => {
      if (t === 0) t = performance.now();
    }, {
      prefetch: PREFETCH,
      onOutcome: () => {
        if (++done === MESSAGES) resolve();
      },
    });
    await finished;
    const consume = MESSAGES / ((performance.now() - t) / 1000);
    await warren.close();
    if (tracing) {
      // The figures are real: a producer and a consumer span per message.
      const spans = await tracing.off();
      if (spans !== 2 * MESSAGES) throw new Error(`expected ${2 * MESSAGES} spans, the exporter got ${spans}`);
    }
    return { publish, consume };
  } finally {
    await warren.close();
    await deleteTopology(topology);
    await tracing?.off();
  }
}

export async function benchTracing(): Promise<BenchRow[]> {
  const consume: { on: number[]; off: number[] } = { on: [], off: [] };
  const publish: { on: number[]; off: number[] } = { on: [], off: [] };
  for (let r = 0; r < ROUNDS; r++) {
    // Alternate which goes first, so neither always meets a warmer broker.
    for (const on of r % 2 === 0 ? [true, false] : [false, true]) {
      const figures = await round(on);
      (on ? consume.on : consume.off).push(figures.consume);
      (on ? publish.on : publish.off).push(figures.publish);
    }
  }
  return [
    { group: `consume with tracing (${MESSAGES.toLocaleString('en-US')} backlog, prefetch ${PREFETCH})`, metric: 'msg/s', warren: median(consume.on), baseline: median(consume.off), baselineName: 'no SDK', goal: '≥ 0.95' },
    { group: `confirmed publish with tracing (window ${WINDOW})`, metric: 'msg/s', warren: median(publish.on), baseline: median(publish.off), baselineName: 'no SDK', goal: '≥ 0.95' },
  ];
}
