/**
 * Health for probes: readiness (send this process work) and liveness (this process is
 * stuck; only a restart helps), each with the reasons it fails. See docs/health.md.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { InvalidOptionError } from '../errors.js';
import { RetryScheduler } from '../retry-table/scheduler.js';
import type { Store } from '../store/index.js';
import { OutboxRelay } from '../store/outbox-relay.js';

/**
 * One thing that is wrong (or worth knowing) and which probe it fails.
 *
 * - `ready`: readiness fails (the broker or a database is down, a consumer is not
 *   attached); liveness does not, because restarting the process does not fix a broker.
 * - `live`: both fail: the process is stuck and only a restart helps. warren's own parts
 *   never report this (they reconnect, re-attach and retry by themselves, and a part that
 *   was stopped or closed is a process shutting down); it is there for checks of your own.
 * - `none`: fails neither; reported so a person reading the probe's body sees it
 *   (a dependency the retry table holds paused, rows the relay flagged).
 */
export interface HealthReason {
  /** What it is about: `connection`, `publish connection`, `topology`, `consumer billing`, `store (postgres)`, `outbox relay`, `retry scheduler`, `dependency carrier`. */
  readonly component: string;
  readonly fails: 'ready' | 'live' | 'none';
  /** What is wrong, with the values that matter. */
  readonly message: string;
}

/** Readiness and liveness, and why. */
export interface HealthReport {
  /** True when no reason fails readiness (nor liveness). */
  readonly ready: boolean;
  /** True when no reason fails liveness. */
  readonly live: boolean;
  readonly reasons: readonly HealthReason[];
}

/** Anything with a `health()`: a Warren, or what {@link storeHealth}, {@link relayHealth} and {@link schedulerHealth} return. */
export interface HealthSource {
  /** The current report: healthy or not, and why. */
  health(): Promise<HealthReport>;
}

/** What {@link storeHealth} needs of a store: its backend, and a transaction to run. */
export interface CheckableStore {
  readonly backend: Store<unknown>['backend'];
  /** Runs `work` in a transaction: an empty one proves the database answers. */
  transaction(work: () => undefined): Promise<unknown>;
}

/** What {@link healthOf} takes: a source with `health()`, or a store, an outbox relay or a retry scheduler as they are (with default options). */
export type HealthInput = HealthSource | CheckableStore | OutboxRelay | RetryScheduler;

/** A report from reasons: ready when none fails readiness or liveness, live when none fails liveness. */
export function healthReport(reasons: readonly HealthReason[]): HealthReport {
  return Object.freeze({
    ready: reasons.every((r) => r.fails === 'none'),
    live: reasons.every((r) => r.fails !== 'live'),
    reasons: Object.freeze([...reasons]),
  });
}

/** Options of the asynchronous checks (store, relay, scheduler). */
export interface CheckOptions {
  /**
   * How long a check may take (a query, a lag count) before it counts as failed: a probe
   * must answer even when a database hangs.
   * @default 2000
   */
  timeoutMs?: number;
}

/** Options of {@link relayHealth}. */
export interface RelayHealthOptions extends CheckOptions {
  /**
   * The oldest pending outbox row may be this old before the relay counts as behind
   * (readiness fails). Set it above the slowest the relay is allowed to be, e.g. a few
   * times its `pollMs` plus the time a broker alarm may last before someone must act.
   * @default 60000
   */
  maxLagMs?: number;
}

function checkMs(value: number | undefined, fallback: number, option: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 3_600_000) throw new InvalidOptionError(option, `expected whole milliseconds from 1 to 3600000, got ${String(value)}`);
  return value;
}

/** Settles with `work`, or rejects after `ms` naming `what`; the timer never holds the process open. */
async function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    timer.unref();
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function formatMs(ms: number): string {
  return ms >= 10_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms)} ms`;
}

/**
 * A store's health: reachable when an empty transaction commits within `timeoutMs`.
 * A database that is down fails readiness only.
 *
 * @example
 * const h = await healthOf([warren, storeHealth(store, { timeoutMs: 1000 })]);
 */
export function storeHealth(store: CheckableStore, options: CheckOptions = {}): HealthSource {
  const timeoutMs = checkMs(options.timeoutMs, 2000, 'timeoutMs');
  const component = `store (${store.backend})`;
  return {
    async health() {
      try {
        await within(
          store.transaction(() => undefined),
          timeoutMs,
          `the ${store.backend} database`,
        );
        return healthReport([]);
      } catch (error) {
        return healthReport([{ component, fails: 'ready', message: `the database is unreachable: ${messageOf(error)}` }]);
      }
    },
  };
}

/**
 * An outbox relay's health: running (not started, or stopped: readiness fails), and the
 * oldest pending row younger than `maxLagMs` (readiness fails when it is older, or when
 * the lag cannot be read). Rows flagged as unpublishable are reported without failing
 * either probe: they wait for a person.
 */
export function relayHealth(relay: Pick<OutboxRelay, 'started' | 'lag'>, options: RelayHealthOptions = {}): HealthSource {
  const timeoutMs = checkMs(options.timeoutMs, 2000, 'timeoutMs');
  const maxLagMs = checkMs(options.maxLagMs, 60_000, 'maxLagMs');
  const component = 'outbox relay';
  return {
    async health() {
      if (!relay.started) return healthReport([{ component, fails: 'ready', message: 'not running: it publishes no outbox row until started' }]);
      const reasons: HealthReason[] = [];
      try {
        const lag = await within(relay.lag(), timeoutMs, 'the outbox lag query');
        if (lag.oldestPendingAgeMs > maxLagMs) {
          reasons.push({ component, fails: 'ready', message: `behind: the oldest of ${lag.pending} pending rows is ${formatMs(lag.oldestPendingAgeMs)} old (bound: maxLagMs ${maxLagMs})` });
        }
        if (lag.failed > 0) reasons.push({ component, fails: 'none', message: `${lag.failed} rows flagged as unpublishable wait for a person (see outbox.failed())` });
      } catch (error) {
        reasons.push({ component, fails: 'ready', message: `cannot read the outbox lag: ${messageOf(error)}` });
      }
      return healthReport(reasons);
    },
  };
}

/**
 * A retry-table scheduler's health: running (not started, or stopped: readiness fails),
 * and the state of its health checks. A dependency its checks found down is reported
 * without failing either probe: holding that dependency's rows is the retry table doing
 * its job, and taking this process out of service would not bring the dependency back.
 */
export function schedulerHealth(scheduler: Pick<RetryScheduler, 'started' | 'health'>): HealthSource {
  const component = 'retry scheduler';
  return {
    health() {
      if (!scheduler.started) return Promise.resolve(healthReport([{ component, fails: 'ready', message: 'not running: no due row is released until started' }]));
      const reasons: HealthReason[] = [];
      for (const s of scheduler.health?.states() ?? []) {
        if (s.healthy !== false) continue;
        const paused = s.paused ? '; its rows are paused' : '';
        reasons.push({ component: `dependency ${s.dependency}`, fails: 'none', message: `failing its health check (${s.consecutiveFailures} in a row${s.lastError === undefined ? '' : `: ${s.lastError}`})${paused}` });
      }
      return Promise.resolve(healthReport(reasons));
    },
  };
}

function isStore(value: object): value is CheckableStore {
  const v = value as Partial<Store<unknown>>;
  return typeof v.transaction === 'function' && typeof v.backend === 'string' && typeof v.outbox === 'object' && typeof v.migrate === 'function';
}

/** The source for one input of {@link healthOf}. */
export function healthSource(input: HealthInput): HealthSource {
  if (input instanceof RetryScheduler) return schedulerHealth(input);
  if (input instanceof OutboxRelay) return relayHealth(input);
  if (typeof input === 'object' && input !== null) {
    if (typeof (input as Partial<HealthSource>).health === 'function') return input as HealthSource;
    if (isStore(input)) return storeHealth(input);
  }
  throw new InvalidOptionError('healthOf', `cannot check ${input === null ? 'null' : typeof input === 'object' ? (input as object).constructor.name : typeof input}`, 'Pass a Warren, a store, an outbox relay, a retry scheduler, or an object with `health(): Promise<HealthReport>`.');
}

/**
 * Checks everything at once and combines the reports: ready when all are ready, live
 * when all are live, with every reason. A source whose check throws fails readiness
 * with the error's message.
 *
 * @example
 * import { healthOf, relayHealth } from 'warren';
 * const h = await healthOf([warren, store, relayHealth(relay, { maxLagMs: 30_000 }), scheduler]);
 * // { ready: false, live: true, reasons: [{ component: 'publish connection', fails: 'ready', message: '...' }] }
 */
export async function healthOf(inputs: readonly HealthInput[]): Promise<HealthReport> {
  const sources = inputs.map(healthSource);
  const reports = await Promise.all(
    sources.map((s) =>
      s.health().catch((error: unknown): HealthReport => healthReport([{ component: 'health check', fails: 'ready', message: `a health check threw: ${messageOf(error)}` }])),
    ),
  );
  return healthReport(reports.flatMap((r) => r.reasons));
}

/** Options of {@link healthHandler} and {@link healthFetchHandler}. */
export interface HealthHandlerOptions {
  /**
   * The path of the readiness probe.
   * @default '/readyz'
   */
  readyPath?: string;
  /**
   * The path of the liveness probe.
   * @default '/livez'
   */
  livePath?: string;
}

interface Answer {
  readonly status: number;
  readonly body: string;
}

function answerer(inputs: readonly HealthInput[], options: HealthHandlerOptions): (path: string) => Promise<Answer> {
  const sources = inputs.map(healthSource);
  const readyPath = options.readyPath ?? '/readyz';
  const livePath = options.livePath ?? '/livez';
  return async (path) => {
    const probe = path === readyPath ? 'ready' : path === livePath ? 'live' : undefined;
    if (probe === undefined) return { status: 404, body: JSON.stringify({ error: `no probe at ${path}; try ${readyPath} or ${livePath}` }) };
    const report = await healthOf(sources);
    return { status: report[probe] ? 200 : 503, body: JSON.stringify({ probe, ...report }) };
  };
}

/**
 * A node:http request handler for the two probes: `GET <readyPath>` answers 200 when
 * everything is ready and 503 when not, `GET <livePath>` the same for liveness; the body
 * is the {@link HealthReport} as JSON (with `probe`). Other paths get 404.
 *
 * @example
 * import http from 'node:http';
 * http.createServer(healthHandler([warren, store, relay])).listen(9090);
 */
export function healthHandler(inputs: readonly HealthInput[], options: HealthHandlerOptions = {}): (req: IncomingMessage, res: ServerResponse) => void {
  const answer = answerer(inputs, options);
  return (req, res) => {
    const path = new URL(req.url ?? '/', 'http://probe').pathname;
    answer(path).then(
      ({ status, body }) => res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(body),
      (error: unknown) => res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: messageOf(error) })),
    );
  };
}

/**
 * The same probes as {@link healthHandler}, as a fetch-style handler (Bun, Deno, Hono, undici).
 *
 * @example
 * Bun.serve({ port: 9090, fetch: healthFetchHandler([warren, store]) });
 */
export function healthFetchHandler(inputs: readonly HealthInput[], options: HealthHandlerOptions = {}): (req: Request) => Promise<Response> {
  const answer = answerer(inputs, options);
  return async (req) => {
    const { status, body } = await answer(new URL(req.url).pathname);
    return new Response(body, { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store' } });
  };
}
