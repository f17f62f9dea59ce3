import * as amqp from 'amqplib';
import type { Topology } from '../src/index.js';

/** The broker the benchmarks use. */
export const AMQP_URL = process.env['WARREN_BENCH_AMQP_URL'] ?? process.env['AMQP_URL'] ?? process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';

/** Deletes a benchmark's queues and exchange (benchmarks clean up; warren never deletes). */
export async function deleteTopology(topology: Topology, url: string = AMQP_URL): Promise<void> {
  const conn = await amqp.connect(url);
  try {
    const ch = await conn.createChannel();
    for (const c of topology.consumers.values()) {
      for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q);
    }
    await ch.deleteExchange(topology.exchange);
    await ch.close();
  } finally {
    await conn.close();
  }
}

/** The brokers a benchmark runs on: the comma-separated `env` variable, default the 3.10 and 4.0 brokers of the development machine. */
export function brokerUrls(env: string): string[] {
  return (process.env[env] ?? 'amqp://guest:guest@127.0.0.1:5672,amqp://guest:guest@127.0.0.1:5673')
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
}

/** A broker's label in rows: its port, `:5672`. */
export function brokerLabel(url: string): string {
  return `:${new URL(url).port || '5672'}`;
}

/** The broker's version, as its connection announces it. */
export function brokerVersion(model: amqp.ChannelModel): string {
  return String((model.connection as unknown as { serverProperties?: { version?: string } }).serverProperties?.version ?? '?');
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Client CPU (user + system) in microseconds spent while `work` runs, per `n` messages. */
export async function cpuPer<T>(n: number, work: () => Promise<T>): Promise<{ value: T; cpuUs: number }> {
  const start = process.cpuUsage();
  const value = await work();
  const used = process.cpuUsage(start);
  return { value, cpuUs: (used.user + used.system) / n };
}

/** One measured figure, optionally beside the baseline it is compared with. */
export interface BenchRow {
  /** Which benchmark, e.g. `consume (success path)`. */
  readonly group: string;
  /** What was measured, e.g. `messages/s`. */
  readonly metric: string;
  readonly warren: number;
  /** The same figure for the baseline (bare amqplib, no guard, …), when there is one. */
  readonly baseline?: number;
  /** What the baseline is, e.g. `bare amqplib`. */
  readonly baselineName?: string;
  /** A goal for the ratio warren/baseline, printed beside it. */
  readonly goal?: string;
}

const fmt = (n: number): string => (Math.abs(n) >= 100 ? Math.round(n).toLocaleString('en-US') : n.toFixed(2));

/** Prints rows as an aligned table: figure, baseline, ratio, goal. */
export function printRows(rows: readonly BenchRow[]): void {
  const lines = rows.map((r) => [
    r.group,
    r.metric,
    fmt(r.warren),
    r.baseline === undefined ? '' : `${fmt(r.baseline)} (${r.baselineName ?? 'baseline'})`,
    r.baseline === undefined || r.baseline === 0 ? '' : (r.warren / r.baseline).toFixed(2),
    r.goal ?? '',
  ]);
  const head = ['benchmark', 'metric', 'warren', 'baseline', 'ratio', 'goal'];
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => (l[i] ?? '').length)));
  const row = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ');
  console.log(row(head));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const l of lines) console.log(row(l));
}
