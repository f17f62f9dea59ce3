/**
 * warren's parts run with an application's lifecycle, for a plain Node service (node:http,
 * Express, Fastify, Hono): the outbox relay and the retry scheduler started and stopped
 * with it, the store closed last, and one HTTP handler for the metrics, the two health
 * probes and the operator console. `import { warrenService } from 'warren/service'`.
 * prom-client and Hono load only when metrics or the console are asked for. The NestJS
 * module (`warren/nest`) runs the same parts from its own options. See docs/nest.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { nodeListener } from '../console/node.js';
import type { ConsoleOptions, WarrenConsole } from '../console/index.js';
import { ClosedError, InvalidOptionError } from '../errors.js';
import { healthOf, type HealthInput, type HealthReport } from '../health/index.js';
import type { WarrenMetrics, WarrenMetricsOptions } from '../metrics/index.js';
import type { RetryScheduler, RetrySchedulerOptions } from '../retry-table/scheduler.js';
import type { Store } from '../store/index.js';
import type { OutboxRelay, OutboxRelayOptions } from '../store/outbox-relay.js';
import type { Warren } from '../warren.js';

/** The relay's options the service does not fill in itself (it gives `publisher` and `exchange`). */
export type ServiceRelayOptions = Omit<OutboxRelayOptions, 'publisher' | 'exchange'>;
/** The scheduler's options the service does not fill in itself (it gives `publisher` and `exchange`). */
export type ServiceSchedulerOptions = Omit<RetrySchedulerOptions, 'publisher' | 'exchange'>;

/** Metrics served on a path. */
export interface ServiceMetricsOptions extends Pick<WarrenMetricsOptions, 'registry' | 'broker' | 'buckets' | 'storeCacheMs'> {
  /**
   * Where the metrics are served.
   * @default '/metrics'
   */
  path?: string;
}

/** The console, mounted at a path, behind the application's sign-in. */
export interface ServiceConsoleOptions extends Omit<ConsoleOptions, 'warren' | 'store' | 'topology' | 'url' | 'connection' | 'basePath'> {
  /** Where it is mounted, e.g. `/ops/warren`: it answers there and below. */
  path: string;
}

/** The readiness and liveness probes. */
export interface ServiceHealthOptions {
  /** @default '/readyz' */
  readyPath?: string;
  /** @default '/livez' */
  livePath?: string;
  /** More to check beside warren's own parts (a check of your own, `relayHealth(relay, { maxLagMs })`). @default [] */
  include?: readonly HealthInput[];
}

/** Options of {@link warrenService}. */
export interface ServiceOptions {
  /** The application's Warren (`Warren.create(...)` or `Warren.connect(...)`); `start()` opens it. */
  warren: Warren;
  /**
   * The application's store: the relay and the scheduler run on it, the console and the
   * metrics read it, the probes check it, and it is closed last.
   * @default none
   */
  store?: Store<unknown>;
  /**
   * Run the store's outbox relay (publishing with `warren.publisher`) from `start()` to
   * `close()`: `true`, or its options.
   * @default true with a store
   */
  outboxRelay?: boolean | ServiceRelayOptions;
  /**
   * Run the store's retry scheduler from `start()` to `close()`: `true`, or its options.
   * With the outbox relay running, the scheduler uses it instead of a relay of its own.
   * @default false
   */
  retryScheduler?: boolean | ServiceSchedulerOptions;
  /**
   * Close the store in `close()`, once nothing uses it any more.
   * @default true
   */
  closeStore?: boolean;
  /**
   * Serve Prometheus metrics (`warrenMetrics`, needs prom-client): `true` for `/metrics`, or options.
   * @default false
   */
  metrics?: boolean | ServiceMetricsOptions;
  /**
   * Mount the operator console (needs hono) at `path`, behind `authorize` (e.g.
   * `basicAuth(parseUsers(...))`, `tokenAuth({ operator })`, `trustedHeaderAuth(...)`, `anyOf(...)`).
   * @default none
   */
  console?: ServiceConsoleOptions;
  /**
   * Serve the probes: `true` for `/readyz` and `/livez`, or options; `false` for none.
   * @default true
   */
  health?: boolean | ServiceHealthOptions;
}

/** A running service's parts: see {@link warrenService}. */
export interface WarrenService {
  readonly warren: Warren;
  readonly store: Store<unknown> | undefined;
  /** The outbox relay, once started (with a store and `outboxRelay` not false). */
  readonly relay: OutboxRelay | undefined;
  /** The retry scheduler, once started (`retryScheduler`). */
  readonly scheduler: RetryScheduler | undefined;
  /** The metrics, once started (`metrics`). */
  readonly metrics: WarrenMetrics | undefined;
  /** The console, once started (`console`). */
  readonly console: WarrenConsole | undefined;
  /** Opens the Warren, then starts the relay, the scheduler, the metrics and the console. */
  start(): Promise<void>;
  /**
   * Readiness and liveness of the Warren, the store, the relay and the scheduler (and
   * `health.include`), with the reasons.
   */
  health(): Promise<HealthReport>;
  /**
   * Answers a request for the metrics, a probe or the console, or resolves `undefined`
   * for any other path (the application's own). For Hono, Bun, Deno.
   *
   * @example
   * app.use(async (c, next) => (await service.fetch(c.req.raw)) ?? next());
   */
  fetch(request: Request): Promise<Response | undefined>;
  /**
   * The same as a Node listener: for node:http, and as Express or Connect middleware.
   * Another path goes to `next`, or answers 404 without one.
   *
   * @example
   * expressApp.use(service.listener);
   * http.createServer((req, res) => service.listener(req, res, () => myApp(req, res)));
   */
  readonly listener: (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) => void;
  /**
   * True when `url` (a path, with or without a query) is one the service answers: for a
   * server that must know before it hands the request over (Fastify's `reply.hijack()`).
   *
   * @example
   * fastify.addHook('onRequest', (req, reply, done) => {
   *   if (!service.handles(req.url)) return done();
   *   reply.hijack();
   *   service.listener(req.raw, reply.raw);
   * });
   */
  handles(url: string): boolean;
  /** The paths it answers: the metrics, the probes, the console (each undefined when off). */
  readonly paths: { readonly metrics: string | undefined; readonly ready: string | undefined; readonly live: string | undefined; readonly console: string | undefined };
  /**
   * Stops taking work: the consumers drain (running handlers finish and are acked,
   * messages not started go back), then the scheduler and the relay stop. The publisher
   * stays open for what the rest of a shutdown publishes (a request still answered).
   * `close()` does this first.
   */
  drain(): Promise<void>;
  /**
   * Stops in the order that loses nothing: the consumers drain (running handlers finish
   * and are acked, messages not started go back), the scheduler and the relay stop, the
   * console and the metrics close, the Warren closes, and the store last.
   */
  close(): Promise<void>;
}

function path(value: unknown, option: string, fallback: string): string {
  const p = value ?? fallback;
  if (typeof p !== 'string' || !/^\/[A-Za-z0-9._~\-/]*$/.test(p)) throw new InvalidOptionError(option, `${JSON.stringify(p)} is not a path such as ${fallback}`);
  return p.length > 1 ? p.replace(/\/+$/, '') : p;
}

function isStore(value: unknown): value is Store<unknown> {
  const s = value as Partial<Store<unknown>> | null;
  return typeof s === 'object' && s !== null && typeof s.relay === 'function' && typeof s.idempotency === 'function' && typeof s.close === 'function';
}

/** Options for a part: `true` → {}, `false`/absent → undefined (or `fallback`), an object as it is. */
function part<T extends object>(value: boolean | T | undefined, option: string, fallback: boolean): T | undefined {
  const v = value ?? fallback;
  if (v === false) return undefined;
  if (v === true) return {} as T;
  if (typeof v !== 'object' || v === null) throw new InvalidOptionError(option, 'expected true, false or an object of options');
  return v;
}

/**
 * The parts of a warren application that live as long as it does, in the right order,
 * with one HTTP handler for what they serve. Checks the options now; `start()` opens.
 *
 * @example
 * import { warrenService } from 'warren/service';
 * import { basicAuth, parseUsers } from 'warren/console';
 *
 * const warren = Warren.create({ topology, startWithoutBroker: true });
 * const service = warrenService({
 *   warren, store, retryScheduler: true, metrics: true,
 *   console: { path: '/ops/warren', authorize: basicAuth(parseUsers(process.env.CONSOLE_USERS ?? '')) },
 * });
 * await service.start();
 * await warren.consume('billing', charge, { idempotency: store.idempotency() });
 * expressApp.use(service.listener);                      // /metrics, /readyz, /livez, /ops/warren
 * process.once('SIGTERM', () => void service.close());
 */
export function warrenService(options: ServiceOptions): WarrenService {
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError('options', 'expected { warren, store?, ... }');
  const { warren, store } = options;
  if (typeof warren !== 'object' || warren === null || typeof warren.open !== 'function' || typeof warren.listConsumers !== 'function') {
    throw new InvalidOptionError('warren', 'expected a Warren', 'Pass Warren.create({ url, topology }) (start() opens it) or what Warren.connect() returned.');
  }
  if (store !== undefined && !isStore(store)) throw new InvalidOptionError('store', 'expected a store', 'Pass what sqliteStore() (warren/sqlite) or postgresStore() (warren/postgres) returns.');
  const relayOptions = part(options.outboxRelay, 'outboxRelay', store !== undefined);
  const schedulerOptions = part(options.retryScheduler, 'retryScheduler', false);
  if ((relayOptions !== undefined || schedulerOptions !== undefined) && store === undefined) {
    throw new InvalidOptionError(relayOptions !== undefined ? 'outboxRelay' : 'retryScheduler', 'needs a store', 'Pass `store`, the one the outbox rows and the retry table are in.');
  }
  if (options.closeStore !== undefined && typeof options.closeStore !== 'boolean') throw new InvalidOptionError('closeStore', 'expected true or false');
  const metricsOptions = part(options.metrics, 'metrics', false);
  const metricsPath = metricsOptions === undefined ? undefined : path(metricsOptions.path, 'metrics.path', '/metrics');
  const healthOptions = part(options.health, 'health', true);
  const readyPath = healthOptions === undefined ? undefined : path(healthOptions.readyPath, 'health.readyPath', '/readyz');
  const livePath = healthOptions === undefined ? undefined : path(healthOptions.livePath, 'health.livePath', '/livez');
  const consoleOptions = options.console;
  if (consoleOptions !== undefined && (typeof consoleOptions !== 'object' || consoleOptions === null)) throw new InvalidOptionError('console', 'expected { path, authorize, ... }');
  if (consoleOptions !== undefined && typeof consoleOptions.authorize !== 'function') {
    throw new InvalidOptionError('console.authorize', 'is required', "Who may use the console: basicAuth(parseUsers(text)), tokenAuth({ operator: token }), trustedHeaderAuth({ userHeader }) or anyOf(...) from 'warren/console'.");
  }
  const consolePath = consoleOptions === undefined ? undefined : path(consoleOptions.path, 'console.path', '/ops/warren');
  if (consolePath === '/') throw new InvalidOptionError('console.path', 'is /, which would take every path of the application', 'Mount it below one, e.g. /ops/warren.');

  let relay: OutboxRelay | undefined;
  let scheduler: RetryScheduler | undefined;
  let metrics: WarrenMetrics | undefined;
  let ops: WarrenConsole | undefined;
  let opsListener: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  let starting: Promise<void> | undefined;
  let closing: Promise<void> | undefined;
  let draining: Promise<void> | undefined;
  const include = healthOptions?.include ?? [];

  const health = (): Promise<HealthReport> => healthOf([warren, ...(store ? [store] : []), ...(relay ? [relay] : []), ...(scheduler ? [scheduler] : []), ...include]);

  async function start(): Promise<void> {
    if (closing || draining) throw new ClosedError('The service');
    await warren.open();
    if (store !== undefined) {
      const exchange = warren.topology.exchange;
      if (relayOptions !== undefined) {
        relay = store.relay({ ...relayOptions, publisher: warren.publisher, exchange });
        await relay.start();
      }
      if (schedulerOptions !== undefined) {
        scheduler = store.retryTable.scheduler({ ...(relay ? { relay: false } : {}), ...schedulerOptions, publisher: warren.publisher, exchange });
        await scheduler.start();
      }
    }
    if (metricsOptions !== undefined) {
      const { warrenMetrics } = await import('../metrics/index.js');
      const { path: _path, ...rest } = metricsOptions;
      metrics = warrenMetrics({ ...rest, warren, ...(store ? { stores: [store] } : {}), ...(scheduler ? { schedulers: [scheduler] } : {}) });
    }
    if (consoleOptions !== undefined && consolePath !== undefined) {
      const { warrenConsole } = await import('../console/index.js');
      const { path: _path, ...rest } = consoleOptions;
      ops = warrenConsole({ ...rest, warren, ...(store ? { store } : {}), basePath: consolePath });
      opsListener = nodeListener(ops.fetch);
    }
  }

  /** Which of the service's paths `pathname` is, if any. */
  function route(pathname: string): 'metrics' | 'ready' | 'live' | 'console' | undefined {
    if (pathname === metricsPath) return 'metrics';
    if (pathname === readyPath) return 'ready';
    if (pathname === livePath) return 'live';
    if (consolePath !== undefined && (pathname === consolePath || pathname.startsWith(`${consolePath}/`))) return 'console';
    return undefined;
  }

  /** The answer to a metrics or probe request, as status, type and body. */
  async function answer(which: 'metrics' | 'ready' | 'live'): Promise<{ status: number; type: string; body: string }> {
    if (which === 'metrics') {
      if (metrics === undefined) return { status: 503, type: 'text/plain; charset=utf-8', body: 'starting: the metrics are not registered yet\n' };
      try {
        return { status: 200, type: metrics.registry.contentType, body: await metrics.registry.metrics() };
      } catch (error) {
        return { status: 500, type: 'text/plain; charset=utf-8', body: `collecting the metrics failed: ${error instanceof Error ? error.message : String(error)}\n` };
      }
    }
    const report = await health();
    return { status: report[which] ? 200 : 503, type: 'application/json', body: JSON.stringify({ probe: which, ...report }) };
  }

  function drain(): Promise<void> {
    draining ??= (async () => {
      await starting?.catch(() => undefined);
      // Consumers first: a handler still running may write outbox rows the relay should send.
      await Promise.all(warren.listConsumers().map((c) => c.close()));
      await scheduler?.stop();
      await relay?.stop();
    })();
    return draining;
  }

  const notStarted = (): Response => new Response('starting: the console is not mounted yet\n', { status: 503, headers: { 'content-type': 'text/plain; charset=utf-8' } });

  return {
    warren,
    store,
    get relay() {
      return relay;
    },
    get scheduler() {
      return scheduler;
    },
    get metrics() {
      return metrics;
    },
    get console() {
      return ops;
    },
    paths: Object.freeze({ metrics: metricsPath, ready: readyPath, live: livePath, console: consolePath }),
    start() {
      starting ??= start();
      return starting;
    },
    health,
    handles: (url) => route(new URL(url, 'http://localhost').pathname) !== undefined,
    async fetch(request) {
      const which = route(new URL(request.url).pathname);
      if (which === undefined) return undefined;
      if (which === 'console') return ops === undefined ? notStarted() : ops.fetch(request);
      const { status, type, body } = await answer(which);
      return new Response(request.method === 'HEAD' ? null : body, { status, headers: { 'content-type': type, 'cache-control': 'no-store' } });
    },
    listener(req, res, next) {
      // Express strips a mount path from req.url and keeps the full one in originalUrl.
      const url = (req as IncomingMessage & { originalUrl?: string }).originalUrl ?? req.url ?? '/';
      const which = route(new URL(url, 'http://localhost').pathname);
      if (which === undefined) {
        if (next) return next();
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found\n');
        return;
      }
      if (which === 'console') {
        if (opsListener === undefined) {
          res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8' }).end('starting: the console is not mounted yet\n');
          return;
        }
        return opsListener(req, res);
      }
      answer(which).then(
        ({ status, type, body }) => res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : body),
        (error: unknown) => res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(`${error instanceof Error ? error.message : String(error)}\n`),
      );
    },
    drain,
    close() {
      closing ??= (async () => {
        await drain();
        await ops?.close();
        await metrics?.close();
        await warren.close();
        if (store !== undefined && options.closeStore !== false) await store.close();
      })();
      return closing;
    },
  };
}
