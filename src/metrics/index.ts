/**
 * Prometheus metrics for warren, on prom-client (an optional peer dependency: only this
 * entry point, `warren/metrics`, loads it). Names, labels and help of every metric are in
 * ./catalog.ts and docs/metrics.md.
 */
import { createRequire } from 'node:module';
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { BrokerConnection } from '../connection/index.js';
import type { Consumer } from '../consume/consumer.js';
import type { Outcome } from '../consume/types.js';
import { BrokerUnreachableError, ClosedError, InvalidOptionError, PublishNackedError, PublishNotConfirmedError, PublishNotSentError, UnroutableError } from '../errors.js';
import type { ParkReason } from '../headers.js';
import { ManagementClient, type ManagementOptions } from '../management/client.js';
import { PUBLISH_KINDS, type Publisher, type PublishKind, type PublishObserver } from '../publish/publisher.js';
import { formatDuration } from '../retry/ladder.js';
import type { HealthMonitor } from '../retry-table/health.js';
import type { RetryScheduler } from '../retry-table/scheduler.js';
import type { RetrySignals } from '../retry-table/types.js';
import type { ArchiveIngestState } from '../archive/types.js';
import type { ArchiveCounts } from '../store/archive.js';
import type { OutboxLag } from '../store/index.js';
import type { Topology } from '../topology/declaration.js';
import type { Warren } from '../warren.js';
import { BrokerReader, type BrokerSnapshot } from './broker.js';
import { METRICS, type MetricSpec } from './catalog.js';

export { ALL_METRICS, METRICS, type MetricSpec, type MetricSource } from './catalog.js';
export { BrokerReader, declaredQueues, type BrokerSnapshot, type QueueFigures, type QueueRole, type BrokerReaderOptions, type Declared } from './broker.js';
export { serveMetrics, type MetricsServer, type ServeOptions } from './server.js';

/** What the metrics read of a store: its outbox lag and its retry table's signals. `warren/sqlite` and `warren/postgres` stores fit. */
export interface MetricsStore {
  readonly backend: string;
  readonly outbox: {
    /** Pending rows and the age of the oldest. */
    lag(): Promise<OutboxLag>;
  };
  readonly retryTable: {
    /** Rows, due rows and paused rows by dependency. */
    signals(): Promise<RetrySignals>;
  };
}

/** A store, optionally with the name its figures are labelled with. */
export type NamedStore = MetricsStore | { readonly store: MetricsStore; readonly name: string };

/**
 * The failure archive whose counts are read on scrape: a store with archive tables
 * (`sqliteStore()`, `postgresStore()`), and the ingester of this process, if it runs one.
 */
export interface ArchiveMetricsSource {
  readonly store: {
    readonly archive: {
      /** Rows per consumer, state and failure group, from the counts table (never a scan of the rows). */
      counts(consumer?: string): Promise<ArchiveCounts[]>;
    };
  };
  /** Its `state()` gives `warren_archive_behind` and `warren_archive_ingest_held`. @default the Warren's `archive` ingester */
  readonly ingester?: {
    /** Per consumer: whether ingestion keeps up, and what it holds. */
    state(): readonly ArchiveIngestState[];
  };
}

/** A scheduler, optionally with the name its figures are labelled with. */
export type NamedScheduler = RetryScheduler | { readonly scheduler: RetryScheduler; readonly name: string };

/** Options of the broker-side figures. */
export interface BrokerMetricsOptions {
  /**
   * The management API to read queue figures from (one request per reading). `false`:
   * passive declares over AMQP only (no unacknowledged counts, no redelivery counters).
   * @default a client of WARREN_MANAGEMENT_URL, or http://guest:guest@127.0.0.1:15672, on the AMQP URL's vhost
   */
  management?: ManagementClient | ManagementOptions | false;
  /**
   * How long a reading of the broker is reused; scrapes within it cost the broker nothing.
   * @default 5000
   */
  cacheMs?: number;
}

/** Options of {@link warrenMetrics}. */
export interface WarrenMetricsOptions {
  /**
   * The application's Warren: its consumers (those made before and after this call),
   * its publisher and its connections are instrumented, and its topology's queues are
   * read from the broker on scrape.
   */
  warren?: Warren;
  /**
   * A topology whose queues are read on scrape, without a Warren (an exporter). Needs
   * `connection` or a management API.
   */
  topology?: Topology;
  /** For `topology` without a Warren: the AMQP connection for passive declares. */
  connection?: () => Promise<import('amqplib').ChannelModel>;
  /**
   * The registry to register on: the application's own, so one /metrics serves both.
   * @default a new Registry
   */
  registry?: Registry;
  /** Stores whose outbox and retry table are read on scrape (labelled by `name`, default the backend). */
  stores?: readonly NamedStore[];
  /**
   * The failure archive: open failures, rows and the oldest row per consumer, read on
   * scrape with one query over the per-group counts (cached for `storeCacheMs`), and
   * whether this process's ingester keeps up.
   */
  archive?: ArchiveMetricsSource;
  /** Retry schedulers: their counters, and the health checks they run. */
  schedulers?: readonly NamedScheduler[];
  /** Health monitors run without a scheduler (`store.retryTable.health()`). */
  health?: readonly HealthMonitor[];
  /**
   * Read the broker's queue figures on scrape. `false` turns it off (e.g. when one
   * `warren metrics` exporter serves them for every instance).
   * @default {} when `warren` or `topology` is given
   */
  broker?: BrokerMetricsOptions | false;
  /**
   * How long a reading of a store is reused.
   * @default 5000
   */
  storeCacheMs?: number;
  /**
   * Histogram buckets, in seconds.
   * @default handler: 0.005 to 60 s; confirm: 0.001 to 10 s
   */
  buckets?: { handler?: readonly number[]; confirm?: readonly number[] };
}

/** What {@link warrenMetrics} returns. */
export interface WarrenMetrics {
  /** The registry the metrics are on: serve `await registry.metrics()` with `registry.contentType`. */
  readonly registry: Registry;
  /** Instruments a consumer made elsewhere (those of the Warren are instrumented already). */
  consumer(consumer: Consumer<never, never> | Consumer<unknown, unknown>): void;
  /**
   * Counts a publish made outside the Warren's publishers: pass it as a replay's
   * `onPublished`, so replayed copies count as `kind="replay"`.
   * @example await replayParked(model, topology.consumer('billing'), { onPublished: metrics.observePublish });
   */
  readonly observePublish: PublishObserver;
  /** The broker reader, when broker figures are on. */
  readonly broker: BrokerReader | undefined;
  /** Removes every listener and the metrics from the registry, and closes the broker reader's channel. */
  close(): Promise<void>;
}

const HANDLER_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const CONFIRM_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
const OUTCOMES: ReadonlyArray<Outcome['kind']> = ['acked', 'duplicate', 'retried', 'parked', 'waiting', 'requeued', 'redelivery-moved'];
const PARK_REASONS: readonly ParkReason[] = ['permanent-error', 'max-attempts', 'invalid-json', 'invalid-payload', 'missing-message-id', 'crash-loop'];
const PUBLISH_OUTCOMES = ['confirmed', 'returned', 'nacked', 'timed_out', 'not_confirmed', 'not_sent'] as const;
type PublishOutcome = (typeof PUBLISH_OUTCOMES)[number];

function checkCacheMs(value: unknown, option: string): number {
  const v = value ?? 5000;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 3_600_000) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number of milliseconds from 0 to 3600000`);
  return v;
}

function checkBuckets(value: unknown, option: string, fallback: readonly number[]): number[] {
  if (value === undefined) return [...fallback];
  if (!Array.isArray(value) || value.length === 0 || !value.every((b, i) => typeof b === 'number' && Number.isFinite(b) && b > 0 && (i === 0 || b > (value[i - 1] as number)))) {
    throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a list of increasing positive numbers of seconds`, 'For example [0.01, 0.1, 1, 10].');
  }
  return [...(value as number[])];
}

/**
 * prom-client, loaded on the first {@link warrenMetrics} call rather than on import, so
 * that importing `warren/metrics` without it fails with what to do instead of Node's
 * bare "Cannot find package". prom-client is CommonJS: a synchronous require loads it.
 */
function promClient(): typeof import('prom-client') {
  try {
    return createRequire(import.meta.url)('prom-client') as typeof import('prom-client');
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== 'MODULE_NOT_FOUND') throw error;
    throw new Error('warrenMetrics() needs prom-client, an optional peer dependency of warren: npm install prom-client', { cause: error });
  }
}

function isRegistry(value: unknown): value is Registry {
  return typeof value === 'object' && value !== null && typeof (value as Registry).registerMetric === 'function' && typeof (value as Registry).metrics === 'function';
}

function isStore(value: unknown): value is MetricsStore {
  const s = value as MetricsStore;
  return typeof value === 'object' && value !== null && typeof s.outbox?.lag === 'function' && typeof s.retryTable?.signals === 'function';
}

function named<T, K extends string>(list: readonly unknown[] | undefined, key: K, option: string, is: (v: unknown) => v is T, defaultName: (item: T, i: number) => string, what: string): Array<{ item: T; name: string }> {
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new InvalidOptionError(option, `expected a list of ${what}`);
  const out: Array<{ item: T; name: string }> = [];
  list.forEach((entry: unknown, i) => {
    let item: unknown = entry;
    let name: string | undefined;
    if (typeof entry === 'object' && entry !== null && key in entry && 'name' in entry) {
      item = (entry as Record<string, unknown>)[key];
      name = (entry as { name: unknown }).name as string;
      if (typeof name !== 'string' || name === '') throw new InvalidOptionError(`${option}[${i}].name`, `${JSON.stringify(name)} is not a non-empty name`);
    }
    if (!is(item)) throw new InvalidOptionError(`${option}[${i}]`, `expected ${what}, or { ${key}, name }`);
    out.push({ item, name: name ?? defaultName(item, i) });
  });
  const names = out.map((o) => o.name);
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice !== undefined) throw new InvalidOptionError(option, `two entries are named ${JSON.stringify(twice)}`, `Give each one a name of its own: { ${key}, name: 'orders' }.`);
  return out;
}

function isScheduler(value: unknown): value is RetryScheduler {
  return typeof value === 'object' && value !== null && typeof (value as RetryScheduler).stats?.moved === 'number' && typeof (value as RetryScheduler).on === 'function';
}

function isMonitor(value: unknown): value is HealthMonitor {
  return typeof value === 'object' && value !== null && typeof (value as HealthMonitor).states === 'function';
}

/** Reuses a promise's result for `cacheMs`; callers that arrive while one is under way share it. */
function cached<T>(cacheMs: number, load: () => Promise<T>): () => Promise<T> {
  let value: { at: number; result: T } | undefined;
  let inFlight: Promise<T> | undefined;
  return () => {
    if (value && Date.now() - value.at < cacheMs) return Promise.resolve(value.result);
    inFlight ??= load().then(
      (result) => {
        value = { at: Date.now(), result };
        inFlight = undefined;
        return result;
      },
      (error: unknown) => {
        inFlight = undefined;
        throw error;
      },
    );
    return inFlight;
  };
}

function publishOutcome(error: Error | undefined): PublishOutcome {
  if (error === undefined) return 'confirmed';
  if (error instanceof UnroutableError) return 'returned';
  if (error instanceof PublishNackedError) return 'nacked';
  // Never written: the deadline passed while it waited, the connection did not come
  // back within connectTimeoutMs, or the publisher closed first.
  if (error instanceof PublishNotSentError || error instanceof BrokerUnreachableError || error instanceof ClosedError) return 'not_sent';
  if (error instanceof PublishNotConfirmedError && /no confirm from the broker within/.test(error.message)) return 'timed_out';
  return 'not_confirmed';
}

function managementOf(option: BrokerMetricsOptions['management'], amqpUrl: string | undefined): ManagementClient | undefined {
  if (option === false) return undefined;
  if (option instanceof ManagementClient) return option;
  if (option !== undefined && (typeof option !== 'object' || option === null)) throw new InvalidOptionError('broker.management', 'expected a ManagementClient, ManagementOptions ({ url, vhost }) or false');
  let vhost = '/';
  try {
    const path = amqpUrl ? new URL(amqpUrl).pathname : '';
    if (path.length > 1) vhost = decodeURIComponent(path.slice(1));
  } catch {
    // the connection reports a bad URL
  }
  try {
    return new ManagementClient({ vhost, ...option });
  } catch (error) {
    throw new InvalidOptionError('broker.management.url', error instanceof Error ? error.message : String(error));
  }
}

/**
 * Prometheus metrics for a warren application: deliveries by outcome, handler duration,
 * in-flight handlers, publishes and confirm latency, reconnects and cancellations from the
 * application's own events; outbox lag and retry-table signals read from its stores on
 * scrape; and, for every queue of the topology, depth, unacknowledged, consumers and the
 * broker's redelivery and publish counters, read from the broker on scrape (cached, so a
 * scrape every second costs the broker one reading per `cacheMs`).
 *
 * Loads prom-client, which the application installs (`npm install prom-client`).
 *
 * @example
 * import { warrenMetrics } from 'warren/metrics';
 * const metrics = warrenMetrics({ warren, stores: [store], schedulers: [scheduler] });
 * http.createServer(async (req, res) => {
 *   res.setHeader('content-type', metrics.registry.contentType);
 *   res.end(await metrics.registry.metrics());
 * }).listen(9464);
 */
export function warrenMetrics(options: WarrenMetricsOptions = {}): WarrenMetrics {
  const { Counter, Gauge, Histogram, Registry } = promClient();
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError('options', 'expected an object');
  const { warren } = options;
  if (warren !== undefined && (typeof warren !== 'object' || warren === null || typeof warren.listConsumers !== 'function')) {
    throw new InvalidOptionError('warren', 'expected a Warren (from Warren.connect)');
  }
  if (options.registry !== undefined && !isRegistry(options.registry)) throw new InvalidOptionError('registry', "expected a prom-client Registry (new Registry(), or prom-client's `register`)");
  const registry = options.registry ?? new Registry();
  const topology = options.topology ?? warren?.topology;
  if (options.topology !== undefined && (typeof options.topology?.consumer !== 'function' || !(options.topology.consumers instanceof Map))) {
    throw new InvalidOptionError('topology', 'expected a topology from defineTopology()');
  }
  if (options.connection !== undefined && typeof options.connection !== 'function') throw new InvalidOptionError('connection', 'expected a function that returns an amqplib ChannelModel');
  const stores = named(options.stores, 'store', 'stores', isStore, (s) => s.backend, 'a store (sqliteStore or postgresStore)');
  const schedulers = named(options.schedulers, 'scheduler', 'schedulers', isScheduler, (_s, i) => String(i + 1), 'a RetryScheduler (store.retryTable.scheduler())');
  if (options.health !== undefined && (!Array.isArray(options.health) || !options.health.every(isMonitor))) {
    throw new InvalidOptionError('health', 'expected a list of HealthMonitor (store.retryTable.health())');
  }
  const storeCacheMs = checkCacheMs(options.storeCacheMs, 'storeCacheMs');
  const archive = options.archive;
  if (archive !== undefined && typeof archive?.store?.archive?.counts !== 'function') {
    throw new InvalidOptionError('archive.store', 'expected a store with archive tables, such as sqliteStore() or postgresStore()');
  }
  if (archive?.ingester !== undefined && typeof archive.ingester?.state !== 'function') throw new InvalidOptionError('archive.ingester', 'expected an ArchiveIngester (warren.archive, or new ArchiveIngester())');
  const ingester = archive?.ingester ?? warren?.archive;
  if (options.buckets !== undefined && (typeof options.buckets !== 'object' || options.buckets === null)) throw new InvalidOptionError('buckets', 'expected { handler?, confirm? }');
  const handlerBuckets = checkBuckets(options.buckets?.handler, 'buckets.handler', HANDLER_BUCKETS);
  const confirmBuckets = checkBuckets(options.buckets?.confirm, 'buckets.confirm', CONFIRM_BUCKETS);
  const brokerOption = options.broker ?? (topology ? {} : false);
  let broker: BrokerReader | undefined;
  let brokerSources = { management: false, amqp: false };
  if (brokerOption !== false) {
    if (typeof brokerOption !== 'object' || brokerOption === null) throw new InvalidOptionError('broker', 'expected { management?, cacheMs? } or false');
    if (!topology) throw new InvalidOptionError('broker', 'reading the broker needs the topology: pass `warren` or `topology`, or set `broker: false`');
    const management = managementOf(brokerOption.management, warren?.connection.url);
    const connection = options.connection ?? (warren ? () => warren.connection.waitReady(5000) : undefined);
    if (!management && !connection) throw new InvalidOptionError('broker.management', 'with `topology` alone and no management API, nothing can read the broker', 'Pass `connection` (an AMQP connection) or a management API.');
    broker = new BrokerReader(topology, { management, connection, cacheMs: checkCacheMs(brokerOption.cacheMs, 'broker.cacheMs') });
    brokerSources = { management: management !== undefined, amqp: connection !== undefined };
  }

  const registered: string[] = [];
  const undo: Array<() => void> = [];
  // Metrics another copy of these already registered (a second warrenMetrics on one registry) are an error worth naming.
  const make = <T>(spec: MetricSpec, build: (config: { name: string; help: string; labelNames: string[]; registers: Registry[] }) => T): T => {
    if (registry.getSingleMetric(spec.name)) {
      throw new InvalidOptionError('registry', `it already has a metric named ${spec.name}`, 'Call warrenMetrics once per registry, or close() the previous one first.');
    }
    const metric = build({ name: spec.name, help: spec.help, labelNames: [...spec.labels], registers: [registry] });
    registered.push(spec.name);
    return metric;
  };

  // --- consumers ---------------------------------------------------------------------
  const deliveries = make(METRICS.deliveries, (c) => new Counter(c));
  const retries = make(METRICS.retries, (c) => new Counter(c));
  const parked = make(METRICS.parked, (c) => new Counter(c));
  const waits = make(METRICS.waits, (c) => new Counter(c));
  const handlerDuration = make(METRICS.handlerDuration, (c) => new Histogram({ ...c, buckets: handlerBuckets }));
  const cancellations = make(METRICS.cancellations, (c) => new Counter(c));
  const consumers = new Set<Consumer<unknown, unknown>>();
  make(METRICS.inFlight, (c) =>
    new Gauge({
      ...c,
      collect() {
        this.reset();
        for (const k of consumers) this.inc({ consumer: k.name }, k.stats.inFlight);
      },
    }),
  );
  make(METRICS.attached, (c) =>
    new Gauge({
      ...c,
      collect() {
        this.reset();
        const by = new Map<string, number>();
        for (const k of consumers) by.set(k.name, Math.max(by.get(k.name) ?? 0, k.attached ? 1 : 0));
        for (const [consumer, v] of by) this.set({ consumer }, v);
      },
    }),
  );

  make(METRICS.paused, (c) =>
    new Gauge({
      ...c,
      collect() {
        this.reset();
        for (const k of consumers) {
          const intake = k.intake;
          if (intake.hand !== undefined) this.set({ consumer: k.name, reason: 'hand' }, 1);
          if (intake.open !== undefined) this.set({ consumer: k.name, reason: intake.open.by === 'dependency' ? `dependency:${intake.open.dependency}` : intake.open.by }, 1);
        }
      },
    }),
  );
  make(METRICS.breakerOpen, (c) =>
    new Gauge({
      ...c,
      collect() {
        this.reset();
        for (const k of consumers) {
          const intake = k.intake;
          if (intake.breaker !== 'off') this.inc({ consumer: k.name }, intake.openMs / 1000);
        }
      },
    }),
  );
  const probes = make(METRICS.breakerProbes, (c) => new Counter(c));

  const instrument = (consumer: Consumer<unknown, unknown>): void => {
    if (consumers.has(consumer)) return;
    consumers.add(consumer);
    const name = consumer.name;
    // Children made once per consumer: the outcome path does a map lookup, not label hashing.
    const counts = new Map<string, Counter.Internal>();
    const durations = new Map<string, Histogram.Internal<string>>();
    for (const kind of OUTCOMES) {
      counts.set(kind, deliveries.labels({ consumer: name, outcome: kind }));
      durations.set(kind, handlerDuration.labels({ consumer: name, outcome: kind }));
      deliveries.inc({ consumer: name, outcome: kind }, 0);
    }
    const tiers = new Map<string, Counter.Internal>();
    consumer.declaration.retryQueues.forEach((queue, i) => {
      const child = retries.labels({ consumer: name, tier: String(i + 1), delay: formatDuration(consumer.declaration.delaysMs[i] as number) });
      child.inc(0);
      tiers.set(queue, child);
    });
    const inQueue = consumer.declaration.inQueue;
    if (inQueue !== undefined) {
      // A retry inside the queue reports the work queue: one child, its schedule as the delay.
      const child = retries.labels({ consumer: name, tier: 'in-queue', delay: `${formatDuration(inQueue.minMs)}..${formatDuration(inQueue.maxMs)}` });
      child.inc(0);
      tiers.set(consumer.declaration.queue, child);
    }
    for (const reason of PARK_REASONS) parked.inc({ consumer: name, reason }, 0);
    cancellations.inc({ consumer: name }, 0);
    const onOutcome = (outcome: Outcome) => {
      counts.get(outcome.kind)?.inc();
      if (outcome.durationMs !== undefined) durations.get(outcome.kind)?.observe(outcome.durationMs / 1000);
      if (outcome.kind === 'retried') tiers.get(outcome.queue)?.inc();
      else if (outcome.kind === 'parked') parked.inc({ consumer: name, reason: outcome.reason });
      else if (outcome.kind === 'waiting') waits.inc({ consumer: name, dependency: outcome.dependency });
    };
    const onCancelled = () => cancellations.inc({ consumer: name });
    const onProbe = (p: { result: string }) => probes.inc({ consumer: name, result: p.result });
    consumer.on('outcome', onOutcome);
    consumer.on('cancelled', onCancelled);
    consumer.on('probe', onProbe);
    undo.push(() => {
      consumer.off('outcome', onOutcome);
      consumer.off('cancelled', onCancelled);
      consumer.off('probe', onProbe);
    });
  };

  // --- publisher and connections -------------------------------------------------------
  const publishes = make(METRICS.publishes, (c) => new Counter(c));
  const confirmDuration = make(METRICS.confirmDuration, (c) => new Histogram({ ...c, buckets: confirmBuckets }));
  const reconnects = make(METRICS.reconnects, (c) => new Counter(c));
  const connections: Array<{ label: string; connection: BrokerConnection }> = [];
  make(METRICS.connectionUp, (c) =>
    new Gauge({
      ...c,
      collect() {
        this.reset();
        for (const { label, connection } of connections) this.set({ connection: label }, connection.ready ? 1 : 0);
      },
    }),
  );
  // Children made once: a settled publish does two map lookups, not label hashing.
  const publishChildren = new Map<PublishKind, { outcomes: Map<PublishOutcome, Counter.Internal>; confirm: Histogram.Internal<string> }>();
  for (const kind of PUBLISH_KINDS) {
    const outcomes = new Map(PUBLISH_OUTCOMES.map((o) => [o, publishes.labels({ kind, outcome: o })] as const));
    for (const child of outcomes.values()) child.inc(0);
    publishChildren.set(kind, { outcomes, confirm: confirmDuration.labels({ kind }) });
  }
  let closed = false;
  const observePublish: PublishObserver = (error, ms, kind = 'publish') => {
    if (closed) return;
    const outcome = publishOutcome(error);
    const children = publishChildren.get(kind);
    children?.outcomes.get(outcome)?.inc();
    if (outcome === 'confirmed' && ms !== undefined) children?.confirm.observe(ms / 1000);
  };
  const instrumentPublisher = (publisher: Publisher): void => {
    publisher.on('settled', observePublish);
    undo.push(() => publisher.off('settled', observePublish));
  };
  const instrumentConnection = (label: string, connection: BrokerConnection): void => {
    connections.push({ label, connection });
    reconnects.inc({ connection: label }, 0);
    let seen = connection.currentGeneration;
    const onConnected = (generation: number) => {
      if (seen > 0 && generation > seen) reconnects.inc({ connection: label }, generation - seen);
      seen = generation;
    };
    connection.on('connected', onConnected);
    undo.push(() => connection.off('connected', onConnected));
  };

  if (warren) {
    for (const consumer of warren.listConsumers()) instrument(consumer);
    const onConsumer = (consumer: Consumer<unknown, unknown>) => instrument(consumer);
    warren.on('consumer', onConsumer);
    undo.push(() => warren.off('consumer', onConsumer));
    instrumentPublisher(warren.publisher);
    // The consumers' retry, park and put-back copies go through a publisher of their own.
    instrumentPublisher(warren.mover);
    instrumentConnection('consume', warren.connection);
    instrumentConnection('publish', warren.publishConnection);
  }

  // --- schedulers and health checks ---------------------------------------------------
  const monitors: HealthMonitor[] = [...(options.health ?? [])];
  for (const { item } of schedulers) if (item.health) monitors.push(item.health);
  if (schedulers.length > 0) {
    make(METRICS.schedulerMoved, (c) =>
      new Counter({
        ...c,
        collect() {
          this.reset();
          for (const { item, name } of schedulers) this.inc({ scheduler: name }, item.stats.moved);
        },
      }),
    );
    make(METRICS.schedulerFailures, (c) =>
      new Counter({
        ...c,
        collect() {
          this.reset();
          for (const { item, name } of schedulers) this.inc({ scheduler: name }, item.stats.failures);
        },
      }),
    );
  }
  if (monitors.length > 0) {
    make(METRICS.dependencyHealthy, (c) =>
      new Gauge({
        ...c,
        collect() {
          this.reset();
          for (const m of monitors) for (const s of m.states()) if (s.healthy !== undefined) this.set({ dependency: s.dependency }, s.healthy ? 1 : 0);
        },
      }),
    );
    make(METRICS.dependencyPaused, (c) =>
      new Gauge({
        ...c,
        collect() {
          this.reset();
          for (const m of monitors) for (const s of m.states()) this.set({ dependency: s.dependency }, s.paused ? 1 : 0);
        },
      }),
    );
  }

  // --- stores, read on scrape -----------------------------------------------------------
  if (stores.length > 0) {
    const readers = stores.map(({ item, name }) => ({
      name,
      read: cached(storeCacheMs, async () => {
        try {
          const [lag, signals] = await Promise.all([item.outbox.lag(), item.retryTable.signals()]);
          return { lag, signals };
        } catch {
          return undefined;
        }
      }),
    }));
    const readAll = () => Promise.all(readers.map(async (r) => ({ name: r.name, figures: await r.read() })));
    const storeGauge = (spec: MetricSpec, fill: (g: Gauge, store: string, f: { lag: OutboxLag; signals: RetrySignals }) => void) =>
      make(spec, (c) =>
        new Gauge({
          ...c,
          async collect() {
            const all = await readAll();
            this.reset();
            for (const { name, figures } of all) if (figures) fill(this, name, figures);
          },
        }),
      );
    storeGauge(METRICS.outboxPending, (g, store, f) => g.set({ store }, f.lag.pending));
    storeGauge(METRICS.outboxOldestAge, (g, store, f) => g.set({ store }, f.lag.oldestPendingAgeMs / 1000));
    storeGauge(METRICS.outboxFlagged, (g, store, f) => g.set({ store }, f.lag.failed));
    const byDependency = (pick: (d: { rows: number; paused: number; due: number }) => number) => (g: Gauge, store: string, f: { signals: RetrySignals }) => {
      for (const [dependency, d] of Object.entries(f.signals.byDependency)) g.set({ store, dependency }, pick(d));
    };
    storeGauge(METRICS.retryRows, byDependency((d) => d.rows));
    storeGauge(METRICS.retryDue, byDependency((d) => d.due));
    storeGauge(METRICS.retryPaused, byDependency((d) => d.paused));
    storeGauge(METRICS.retryUntimed, (g, store, f) => g.set({ store }, f.signals.waiting));
    storeGauge(METRICS.retryOldestDue, (g, store, f) => g.set({ store }, f.signals.oldestDueAgeMs / 1000));
    make(METRICS.storeUp, (c) =>
      new Gauge({
        ...c,
        async collect() {
          const all = await readAll();
          this.reset();
          for (const { name, figures } of all) this.set({ store: name }, figures ? 1 : 0);
        },
      }),
    );
  }

  // --- the failure archive, read on scrape ------------------------------------------------
  if (archive !== undefined) {
    const source = archive.store.archive;
    const read = cached(storeCacheMs, async () => {
      const started = Date.now();
      try {
        return { counts: await source.counts(), ms: Date.now() - started };
      } catch {
        return { counts: undefined, ms: Date.now() - started };
      }
    });
    // Every consumer of the topology has a series (0 with no rows), so alert expressions that add the parked queue's depth find both sides.
    const names = () => new Set([...(topology ? topology.consumers.keys() : []), ...(ingester ? ingester.state().map((s) => s.consumer) : [])]);
    const archiveGauge = (spec: MetricSpec, pick: (c: ArchiveCounts, now: number) => number) =>
      make(spec, (c) =>
        new Gauge({
          ...c,
          async collect() {
            const { counts } = await read();
            this.reset();
            if (counts === undefined) return;
            const now = Date.now();
            const by = new Map(counts.map((k) => [k.consumer, k]));
            for (const name of new Set([...names(), ...by.keys()])) {
              const k = by.get(name) ?? { consumer: name, open: 0, replayed: 0, resolved: 0, bytes: 0, oldestOpenAt: null, oldestAt: null };
              this.set({ consumer: name }, pick(k, now));
            }
          },
        }),
      );
    const age = (at: Date | null, now: number) => (at === null ? 0 : Math.max(0, (now - at.getTime()) / 1000));
    archiveGauge(METRICS.archiveOpen, (k) => k.open);
    archiveGauge(METRICS.archiveRows, (k) => k.open + k.replayed + k.resolved);
    archiveGauge(METRICS.archiveOldest, (k, now) => age(k.oldestAt, now));
    archiveGauge(METRICS.archiveOldestOpen, (k, now) => age(k.oldestOpenAt, now));
    make(METRICS.archiveUp, (c) =>
      new Gauge({
        ...c,
        async collect() {
          this.set((await read()).counts === undefined ? 0 : 1);
        },
      }),
    );
    make(METRICS.archiveReadDuration, (c) =>
      new Gauge({
        ...c,
        async collect() {
          this.set((await read()).ms / 1000);
        },
      }),
    );
  }
  if (ingester !== undefined) {
    const ingest = ingester;
    const stateGauge = (spec: MetricSpec, pick: (s: ArchiveIngestState) => number) =>
      make(spec, (c) =>
        new Gauge({
          ...c,
          collect() {
            this.reset();
            for (const s of ingest.state()) this.set({ consumer: s.consumer }, pick(s));
          },
        }),
      );
    stateGauge(METRICS.archiveBehind, (s) => (s.behindSince !== undefined ? 1 : 0));
    stateGauge(METRICS.archiveHeld, (s) => s.held);
  }

  // --- the broker, read on scrape -------------------------------------------------------
  if (broker) {
    const reader = broker;
    const queueMetric = <M extends Gauge | Counter>(spec: MetricSpec, Kind: 'gauge' | 'counter', pick: (q: BrokerSnapshot['queues'][number]) => number | undefined) =>
      make(spec, (c) => {
        const collect = async function (this: M) {
          const snapshot = await reader.read();
          this.reset();
          for (const q of snapshot.queues) {
            const v = pick(q);
            if (v === undefined) continue;
            const labels = { consumer: q.consumer, role: q.role, queue: q.queue };
            if (this instanceof Gauge) this.set(labels, v);
            else (this as Counter).inc(labels, v);
          }
        };
        return Kind === 'gauge' ? new Gauge({ ...c, collect: collect as (this: Gauge) => Promise<void> }) : new Counter({ ...c, collect: collect as (this: Counter) => Promise<void> });
      });
    queueMetric(METRICS.queueReady, 'gauge', (q) => q.ready);
    queueMetric(METRICS.queueUnacked, 'gauge', (q) => q.unacked);
    queueMetric(METRICS.queueConsumers, 'gauge', (q) => q.consumers);
    queueMetric(METRICS.queueRedelivered, 'counter', (q) => q.redelivered);
    queueMetric(METRICS.queuePublished, 'counter', (q) => q.published);
    queueMetric(METRICS.queueExists, 'gauge', (q) => (q.exists ? 1 : 0));
    make(METRICS.brokerUp, (c) =>
      new Gauge({
        ...c,
        async collect() {
          const snapshot = await reader.read();
          this.reset();
          // A source is reported once it was tried: AMQP stands in only when the management
          // API did not answer, so while it does, AMQP has no series (it was not read, not down).
          if (brokerSources.management) this.set({ source: 'management' }, snapshot.source === 'management' ? 1 : 0);
          if (brokerSources.amqp && snapshot.source !== 'management') this.set({ source: 'amqp' }, snapshot.source === 'amqp' ? 1 : 0);
        },
      }),
    );
    make(METRICS.brokerReadDuration, (c) =>
      new Gauge({
        ...c,
        async collect() {
          this.set((await reader.read()).durationMs / 1000);
        },
      }),
    );
  }

  return {
    registry,
    broker,
    observePublish,
    consumer(consumer) {
      if (closed) return;
      if (typeof consumer !== 'object' || consumer === null || typeof (consumer as Consumer<unknown, unknown>).on !== 'function' || !('declaration' in consumer)) {
        throw new InvalidOptionError('consumer', 'expected a Consumer (what warren.consume() returns)');
      }
      instrument(consumer as Consumer<unknown, unknown>);
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const fn of undo.splice(0)) fn();
      for (const name of registered) registry.removeSingleMetric(name);
      await broker?.close();
    },
  };
}
