/**
 * What the overview shows, read once per interval and shared by every viewer: the
 * broker's figures (one management API request, cached like the metrics exporter's),
 * the database's (retry table and outbox), the problems `warren status` reports, and
 * an hour of samples per consumer kept in memory by the console process.
 */
import type * as amqp from 'amqplib';
import type { Archive } from '../archive/archive.js';
import type { ArchiveIngestState } from '../archive/types.js';
import type { ManagementClient } from '../management/client.js';
import { BrokerReader, type BrokerSnapshot, type QueueFigures } from '../metrics/broker.js';
import type { RetrySignals } from '../retry-table/index.js';
import { findBindingProblems, findProblems, type ConsumerState, type QueueState, type StatusProblem } from '../status/index.js';
import type { ConsumerPauseRow } from '../breaker/control.js';
import type { BreakerStateRow } from '../breaker/share.js';
import type { ArchiveCounts, OutboxLag, Store } from '../store/index.js';
import type { Topology } from '../topology/declaration.js';
import type { BrokerBinding } from '../topology/plan.js';
import { redactText } from './redact.js';

/** One queue on the overview. */
export interface QueueView {
  readonly queue: string;
  readonly exists: boolean;
  /** Ready plus unacknowledged; null when unknown. */
  readonly depth: number | null;
  readonly ready: number | null;
  readonly unacked: number | null;
}

/** One consumer's four signals and its queues. */
export interface ConsumerView {
  readonly name: string;
  readonly work: QueueView;
  readonly parked: QueueView;
  /** Consumers attached to the work queue; null when unknown. */
  readonly consumers: number | null;
  /** Redeliveries per second over the last sample interval; null until two samples exist (management API only). */
  readonly redeliverRate: number | null;
  readonly tiers: readonly (QueueView & { readonly delay: string })[];
  /** With an archive: its rows of this consumer by state; null without one, or when it could not be read. */
  readonly archive: { readonly open: number; readonly replayed: number; readonly resolved: number; readonly oldestOpenAt: string | null } | null;
  /**
   * The parked signal: with an archive, its open failures plus what is still in the parked
   * queue (not ingested yet); without one, the parked queue's depth.
   */
  readonly openFailures: number | null;
  /** With an ingester: `running`, `behind` (the database does not take its batches), `connecting` or `stopped`. */
  readonly ingest: ArchiveIngestState['status'] | null;
  /**
   * The hand pause in the database (`store.control`), followed by every running consumer given
   * `control: store.control`; null when there is none, or without a database.
   */
  readonly pause: { readonly reason: string; readonly actor: string; readonly since: string } | null;
  /**
   * The breaker shared through the database (`breaker: { share: store.breakers }`), while
   * open: every process of the consumer that shares it takes no messages. Null otherwise.
   */
  readonly breaker: { readonly reason: string; readonly openedBy: string; readonly since: string } | null;
}

function breakerView(r: BreakerStateRow | undefined): ConsumerView['breaker'] {
  return r === undefined ? null : { reason: r.reason, openedBy: r.openedBy, since: r.since.toISOString() };
}

function pauseView(r: ConsumerPauseRow | undefined): ConsumerView['pause'] {
  return r === undefined ? null : { reason: r.reason, actor: r.actor, since: r.since.toISOString() };
}

/** Something to look at, with the kinds `warren status` uses. */
export interface Problem {
  readonly consumer: string;
  readonly kind: StatusProblem['kind'] | 'outbox-flagged' | 'retry-overdue' | 'unreadable' | 'archive-behind' | 'paused' | 'breaker-open';
  readonly message: string;
}

/** Everything the overview shows, JSON-friendly. */
export interface Overview {
  /** When the broker figures were read (ISO time). */
  readonly at: string;
  /** `management`, `amqp` (passive declares: no unacknowledged counts, rates or bindings) or `none`. */
  readonly source: BrokerSnapshot['source'];
  /** Why a source was not used. */
  readonly sourceError: string | null;
  readonly consumers: readonly ConsumerView[];
  /** Null without a store. */
  readonly retryTable: Omit<RetrySignals, 'byDependency'> | null;
  readonly outbox: OutboxLag | null;
  /** Why the database could not be read, when it could not. */
  readonly databaseError: string | null;
  /** Null without an archive. `behind`: an ingester says it cannot store what is parked; `error`: why the archive could not be read. */
  readonly archive: { readonly behind: boolean; readonly error: string | null } | null;
  readonly problems: readonly Problem[];
  readonly ok: boolean;
  /** How often the console samples, and how much history it keeps. */
  readonly sampleIntervalMs: number;
  readonly historyMs: number;
}

/** The samples of one consumer, oldest first, as parallel arrays (what the chart takes). */
export interface ConsumerHistory {
  readonly t: number[];
  readonly work: (number | null)[];
  readonly parked: (number | null)[];
  readonly consumers: (number | null)[];
  readonly redeliverRate: (number | null)[];
}

/** Options of {@link ConsoleData}. */
export interface ConsoleDataOptions {
  readonly topology: Topology;
  readonly connection: () => Promise<amqp.ChannelModel>;
  readonly management: ManagementClient | undefined;
  readonly store: Store<unknown> | undefined;
  readonly archive?: Archive | undefined;
  readonly ingester?: { state(): readonly ArchiveIngestState[] } | undefined;
  readonly cacheMs: number;
  readonly sampleIntervalMs: number;
  readonly historyMs: number;
  readonly maxDueAgeMs: number;
}

interface Sample {
  readonly t: number;
  readonly perConsumer: ReadonlyMap<string, { work: number | null; parked: number | null; consumers: number | null; redelivered: number | null }>;
}

function depthOf(q: QueueFigures | undefined): number | null {
  if (!q || !q.exists || q.ready === undefined) return null;
  return q.ready + (q.unacked ?? 0);
}

function view(q: QueueFigures | undefined, name: string): QueueView {
  return { queue: name, exists: q?.exists ?? false, depth: depthOf(q), ready: q?.ready ?? null, unacked: q?.unacked ?? null };
}

function message(error: unknown): string {
  return redactText(error instanceof Error ? error.message : String(error));
}

/**
 * Reads and caches the overview's figures, and samples them every `sampleIntervalMs`
 * into a bounded ring (an hour by default): the charts' history lives in this process
 * only, and starts empty when it starts.
 */
export class ConsoleData {
  private readonly reader: BrokerReader;
  private readonly ring: Sample[] = [];
  private readonly capacity: number;
  private timer: NodeJS.Timeout | undefined;
  private bindings: { at: number; value: Promise<BrokerBinding[] | undefined> } | undefined;
  private database: { at: number; value: Promise<{ retry: RetrySignals; outbox: OutboxLag; pauses: ConsumerPauseRow[]; breakers: BreakerStateRow[] } | { error: string }> } | undefined;
  private sampling: Promise<void> | undefined;
  private archiveCounts: { at: number; value: Promise<Map<string, ArchiveCounts> | { error: string }> } | undefined;

  constructor(private readonly options: ConsoleDataOptions) {
    this.reader = new BrokerReader(options.topology, { management: options.management, connection: options.connection, cacheMs: options.cacheMs });
    this.capacity = Math.ceil(options.historyMs / options.sampleIntervalMs) + 1;
  }

  /** Starts sampling (the first sample at once). */
  start(): void {
    if (this.timer) return;
    this.sampling = this.sample();
    this.timer = setInterval(() => {
      this.sampling ??= this.sample();
    }, this.options.sampleIntervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.sampling?.catch(() => undefined);
    await this.reader.close();
  }

  /** Forgets cached readings (after an action, so the next page shows its effect). */
  invalidate(): void {
    this.reader.invalidate();
    this.database = undefined;
    this.archiveCounts = undefined;
  }

  private async sample(): Promise<void> {
    try {
      const snap = await this.reader.read();
      if (snap.source === 'none') return;
      const perConsumer = new Map<string, { work: number | null; parked: number | null; consumers: number | null; redelivered: number | null }>();
      for (const c of this.options.topology.consumers.values()) perConsumer.set(c.name, { work: null, parked: null, consumers: null, redelivered: null });
      for (const q of snap.queues) {
        const s = perConsumer.get(q.consumer);
        if (!s) continue;
        if (q.role === 'work') {
          s.work = depthOf(q);
          s.consumers = q.exists ? (q.consumers ?? null) : null;
          s.redelivered = q.redelivered ?? null;
        } else if (q.role === 'parked') s.parked = depthOf(q);
      }
      // With an archive, the chart's parked line is the parked signal: open failures in the archive plus the queue's.
      const archived = await this.readArchive();
      if (archived !== undefined) {
        for (const [name, s] of perConsumer) s.parked = 'error' in archived ? null : ((archived as Map<string, ArchiveCounts>).get(name)?.open ?? 0) + (s.parked ?? 0);
      }
      const last = this.ring.at(-1);
      // Two readings served from one cached snapshot are one sample.
      if (last && last.t === snap.at) return;
      this.ring.push({ t: snap.at, perConsumer });
      if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
    } catch {
      // A failed reading leaves a gap in the charts; the overview says why.
    } finally {
      this.sampling = undefined;
    }
  }

  /** Redeliveries per second between the last two samples, per consumer. */
  private rates(): Map<string, number | null> {
    const out = new Map<string, number | null>();
    const [a, b] = this.ring.slice(-2);
    if (!a || !b) return out;
    const dt = (b.t - a.t) / 1000;
    for (const [name, s] of b.perConsumer) {
      const before = a.perConsumer.get(name)?.redelivered;
      out.set(name, dt > 0 && s.redelivered !== null && before !== null && before !== undefined ? Math.max(0, (s.redelivered - before) / dt) : null);
    }
    return out;
  }

  /** The samples kept, per consumer. */
  history(): Record<string, ConsumerHistory> {
    const out: Record<string, ConsumerHistory> = {};
    const samples = this.ring;
    for (const name of this.options.topology.consumers.keys()) {
      const h: ConsumerHistory = { t: [], work: [], parked: [], consumers: [], redeliverRate: [] };
      samples.forEach((s, i) => {
        const v = s.perConsumer.get(name);
        const prev = i > 0 ? samples[i - 1]?.perConsumer.get(name) : undefined;
        const dt = i > 0 ? (s.t - (samples[i - 1] as Sample).t) / 1000 : 0;
        h.t.push(Math.round(s.t / 1000));
        h.work.push(v?.work ?? null);
        h.parked.push(v?.parked ?? null);
        h.consumers.push(v?.consumers ?? null);
        h.redeliverRate.push(v && prev && v.redelivered !== null && prev.redelivered !== null && dt > 0 ? Math.max(0, (v.redelivered - prev.redelivered) / dt) : null);
      });
      out[name] = h;
    }
    return out;
  }

  private readBindings(): Promise<BrokerBinding[] | undefined> {
    const api = this.options.management;
    if (!api) return Promise.resolve(undefined);
    if (this.bindings && Date.now() - this.bindings.at < Math.max(this.options.cacheMs, 10_000)) return this.bindings.value;
    const value = api.exchangeBindings(this.options.topology.exchange).then(
      (b) => b ?? [],
      () => undefined,
    );
    this.bindings = { at: Date.now(), value };
    return value;
  }

  private readDatabase(): Promise<{ retry: RetrySignals; outbox: OutboxLag; pauses: ConsumerPauseRow[]; breakers: BreakerStateRow[] } | { error: string }> | undefined {
    const store = this.options.store;
    if (!store) return undefined;
    if (this.database && Date.now() - this.database.at < this.options.cacheMs) return this.database.value;
    const value = Promise.all([store.retryTable.signals(), store.outbox.lag(), store.control.read(), store.breakers.read()]).then(
      ([retry, outbox, pauses, breakers]) => ({ retry, outbox, pauses, breakers }),
      (error: unknown) => ({ error: message(error) }),
    );
    this.database = { at: Date.now(), value };
    return value;
  }

  /** The archive's counts per consumer (one query over its group counts), cached like the rest. */
  readArchive(): Promise<Map<string, ArchiveCounts> | { error: string }> | undefined {
    const archive = this.options.archive;
    if (!archive) return undefined;
    if (this.archiveCounts && Date.now() - this.archiveCounts.at < this.options.cacheMs) return this.archiveCounts.value;
    const value = archive.counts().then(
      (rows) => new Map(rows.map((r) => [r.consumer, r])),
      (error: unknown) => ({ error: message(error) }),
    );
    this.archiveCounts = { at: Date.now(), value };
    return value;
  }

  /** Each consumer's ingestion, by consumer; empty without an ingester. */
  ingestion(): Map<string, ArchiveIngestState> {
    const out = new Map<string, ArchiveIngestState>();
    try {
      for (const s of this.options.ingester?.state() ?? []) out.set(s.consumer, s);
    } catch {
      // An ingester that cannot say is not shown as behind.
    }
    return out;
  }

  /** The overview: cached readings, problems as `warren status` finds them. */
  async overview(): Promise<Overview> {
    const topology = this.options.topology;
    const [snap, bindings, db, archived] = await Promise.all([this.reader.read(), this.readBindings(), this.readDatabase(), this.readArchive()]);
    const counts = archived !== undefined && !('error' in archived) ? (archived as Map<string, ArchiveCounts>) : undefined;
    const ingestion = this.ingestion();
    const pauses = new Map(db !== undefined && !('error' in db) ? db.pauses.filter((r) => r.paused).map((r) => [r.consumer, r]) : []);
    const breakers = new Map(db !== undefined && !('error' in db) ? db.breakers.filter((r) => r.open).map((r) => [r.consumer, r]) : []);
    if (this.ring.length === 0 || (this.ring.at(-1) as Sample).t < snap.at - this.options.sampleIntervalMs) this.sampling ??= this.sample();
    const byQueue = new Map(snap.queues.map((q) => [q.queue, q]));
    const rates = this.rates();
    const consumers: ConsumerView[] = [];
    const states: ConsumerState[] = [];
    for (const c of topology.consumers.values()) {
      const work = byQueue.get(c.queue);
      const parked = byQueue.get(c.parkedQueue);
      const parkedView = view(parked, c.parkedQueue);
      const a = counts?.get(c.name);
      const archiveView = counts === undefined ? null : { open: a?.open ?? 0, replayed: a?.replayed ?? 0, resolved: a?.resolved ?? 0, oldestOpenAt: a?.oldestOpenAt?.toISOString() ?? null };
      consumers.push({
        name: c.name,
        work: view(work, c.queue),
        parked: parkedView,
        archive: archiveView,
        openFailures: this.options.archive === undefined ? parkedView.depth : archiveView === null ? null : archiveView.open + (parkedView.depth ?? 0),
        ingest: ingestion.get(c.name)?.status ?? null,
        pause: pauseView(pauses.get(c.name)),
        breaker: breakerView(breakers.get(c.name)),
        consumers: work?.exists ? (work.consumers ?? null) : null,
        redeliverRate: rates.get(c.name) ?? null,
        tiers: c.retryQueues.map((q, i) => ({ ...view(byQueue.get(q), q), delay: byQueue.get(q)?.delay ?? `${c.delaysMs[i]}ms` })),
      });
      const state = (name: string, q: QueueFigures | undefined): QueueState => ({
        name,
        exists: q?.exists ?? false,
        ready: q?.ready,
        unacked: q?.unacked,
        consumers: q?.consumers,
        redeliverRate: undefined,
      });
      states.push({
        consumer: c.name,
        work: state(c.queue, work),
        retries: c.retryQueues.map((q, i) => ({ ...state(q, byQueue.get(q)), delayMs: c.delaysMs[i] as number })),
        parked: state(c.parkedQueue, parked),
      });
    }
    const problems: Problem[] = [];
    if (snap.source === 'none') problems.push({ consumer: 'broker', kind: 'unreadable', message: `the broker could not be read: ${redactText(snap.error ?? 'unknown error')}` });
    else {
      // With an archive, parked messages drain into it: the parked problem is its open failures plus what the queue still holds.
      problems.push(...findProblems(states).filter((p) => !(this.options.archive !== undefined && p.kind === 'parked')));
      if (this.options.archive !== undefined) {
        for (const v of consumers) {
          const inQueue = v.parked.depth ?? 0;
          const open = v.archive?.open ?? 0;
          if (open + inQueue === 0) continue;
          const parts = [v.archive !== null ? `${open} in the archive` : 'the archive could not be read', ...(inQueue > 0 ? [`${inQueue} still in ${v.parked.queue}`] : [])];
          problems.push({ consumer: v.name, kind: 'parked', message: `${open + inQueue} open failure${open + inQueue === 1 ? '' : 's'} (${parts.join(', ')}); see the console's parked page` });
        }
      }
      for (const v of consumers) {
        if (v.breaker === null) continue;
        const waiting = v.work.depth ?? 0;
        problems.push({ consumer: v.name, kind: 'breaker-open', message: `breaker open since ${v.breaker.since} (shared through the database; opened by ${v.breaker.openedBy}): ${v.breaker.reason}; ${waiting} message${waiting === 1 ? '' : 's'} wait in ${v.work.queue} until a probe succeeds` });
      }
      for (const v of consumers) {
        if (v.pause === null) continue;
        const waiting = v.work.depth ?? 0;
        problems.push({ consumer: v.name, kind: 'paused', message: `paused by hand by ${v.pause.actor} since ${v.pause.since}: ${v.pause.reason}; ${waiting} message${waiting === 1 ? '' : 's'} wait in ${v.work.queue}` });
      }
      if (snap.source === 'management' && bindings !== undefined) problems.push(...findBindingProblems(topology, states, bindings, this.options.management?.vhost ?? '/'));
    }
    let retryTable: Overview['retryTable'] = null;
    let outbox: OutboxLag | null = null;
    let databaseError: string | null = null;
    if (db) {
      if ('error' in db) {
        databaseError = db.error;
        problems.push({ consumer: 'database', kind: 'unreadable', message: `the database could not be read: ${db.error}` });
      } else {
        const { byDependency: _, ...signals } = db.retry;
        retryTable = signals;
        outbox = db.outbox;
        if (outbox.failed > 0) problems.push({ consumer: 'database', kind: 'outbox-flagged', message: `${outbox.failed} outbox row${outbox.failed === 1 ? ' is' : 's are'} flagged: the relay could not publish ${outbox.failed === 1 ? 'it' : 'them'}` });
        if (signals.due > 0 && signals.oldestDueAgeMs > this.options.maxDueAgeMs) {
          problems.push({ consumer: 'database', kind: 'retry-overdue', message: `the oldest due retry-table row has been due for ${Math.round(signals.oldestDueAgeMs / 1000)} s, over ${Math.round(this.options.maxDueAgeMs / 1000)} s: is a scheduler draining the table?` });
        }
      }
    }
    let archive: Overview['archive'] = null;
    if (this.options.archive !== undefined) {
      const behind = [...ingestion.values()].filter((s) => s.status === 'behind');
      for (const s of behind) problems.push({ consumer: s.consumer, kind: 'archive-behind', message: `archive behind: the database has not taken the parked messages of ${s.queue} since ${s.behindSince?.toISOString() ?? 'a moment'} (${s.lastError ?? 'no error given'}); they wait in the queue` });
      const error = archived !== undefined && 'error' in archived ? (archived as { error: string }).error : null;
      if (error !== null) problems.push({ consumer: 'database', kind: 'unreadable', message: `the archive could not be read: ${error}` });
      archive = { behind: behind.length > 0, error };
    }
    return {
      at: new Date(snap.at).toISOString(),
      source: snap.source,
      sourceError: snap.error === undefined ? null : redactText(snap.error),
      consumers,
      retryTable,
      outbox,
      databaseError,
      archive,
      problems: problems.map((p) => ({ ...p, message: redactText(p.message) })),
      ok: problems.length === 0,
      sampleIntervalMs: this.options.sampleIntervalMs,
      historyMs: this.options.historyMs,
    };
  }
}
