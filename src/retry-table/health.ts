import { EventEmitter } from 'node:events';
import { InvalidOptionError } from '../errors.js';
import { toLogger, type Logger } from '../logger.js';
import type { ChangeOptions, ResumeOptions, RetryFilter, RetryHold } from './types.js';

/** What a health monitor needs of its retry table (`store.retryTable` is one). */
export interface HealthHost {
  readonly logger: Logger;
  /** Makes a checked dependency known, so pausing it is no typo. */
  nameDependency(dependency: string): void;
  /** The pauses in force. */
  holds(): Promise<RetryHold[]>;
  /** Pauses matching rows (and later ones); how many rows it paused. */
  pause(filter: RetryFilter, options?: ChangeOptions): Promise<number>;
  /** Lifts pauses; how many rows it resumed. */
  resume(filter: RetryFilter, options?: ResumeOptions): Promise<number>;
}

/**
 * A health check: a function that resolves (anything but `false`) when the dependency
 * works and throws or resolves `false` when it does not; or an HTTP(S) URL that must
 * answer 2xx; or either with settings of its own.
 */
export type HealthCheck =
  | string
  | (() => unknown)
  | {
      /** The check itself: a URL or a function, as above. */
      readonly check: string | (() => unknown);
      readonly intervalMs?: number;
      readonly failuresToPause?: number;
      readonly timeoutMs?: number;
    };

/** Checks by dependency name. */
export type HealthChecks = Readonly<Record<string, HealthCheck>>;

/** Options of `store.retryTable.health(checks, options)`; each check may override them. */
export interface HealthMonitorOptions {
  /**
   * Time between two runs of a check.
   * @default 5000
   */
  intervalMs?: number;
  /**
   * Consecutive failures after which the dependency's rows pause.
   * @default 3
   */
  failuresToPause?: number;
  /**
   * A check still running after this has failed.
   * @default 2000
   */
  timeoutMs?: number;
  /** @default the table's logger */
  logger?: Logger;
}

/** What the monitor knows of one dependency. */
export interface HealthState {
  readonly dependency: string;
  /** The last check passed. */
  readonly healthy: boolean | undefined;
  readonly consecutiveFailures: number;
  /** Consecutive failures at which the dependency counts as down (its rows pause, a consumer's breaker opens). */
  readonly failuresToPause: number;
  /** The monitor paused the dependency's rows and has not resumed them yet. */
  readonly paused: boolean;
  readonly lastError: string | undefined;
  readonly lastCheckAt: Date | undefined;
}

/** Running totals of a monitor. */
export interface HealthStats {
  checks: number;
  failures: number;
  /** Times a dependency's rows were paused by a failing check. */
  paused: number;
  /** Times they were resumed by a passing one. */
  resumed: number;
}

interface Check {
  readonly dependency: string;
  readonly run: (signal: AbortSignal) => Promise<void>;
  readonly intervalMs: number;
  readonly failuresToPause: number;
  readonly timeoutMs: number;
  state: { -readonly [K in keyof HealthState]: HealthState[K] };
  timer: NodeJS.Timeout | undefined;
  running: Promise<void> | undefined;
}

function int(value: unknown, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number from ${min} to ${max}`);
  return v;
}

function urlCheck(url: string, option: string): (signal: AbortSignal) => Promise<void> {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidOptionError(option, `${JSON.stringify(url)} is not a URL`, 'Give an http(s) URL that answers 2xx when the dependency works, or a function.');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new InvalidOptionError(option, `${JSON.stringify(url)} is not an http(s) URL`);
  return async (signal) => {
    const res = await fetch(parsed, { signal, redirect: 'follow' });
    await res.body?.cancel().catch(() => undefined);
    if (res.status < 200 || res.status > 299) throw new Error(`${parsed.origin}${parsed.pathname} answered ${res.status}`);
  };
}

function functionCheck(fn: () => unknown): (signal: AbortSignal) => Promise<void> {
  return async () => {
    if ((await fn()) === false) throw new Error('the check returned false');
  };
}

/**
 * Runs a health check per dependency. After `failuresToPause` consecutive failures it
 * pauses that dependency's rows (and rows added later, through a hold); when a check
 * passes again it resumes them with their next attempt set to now, and the scheduler
 * drains them at its rate. Both transitions are logged, counted and recorded in the
 * table's history as `health-check:<dependency>`. A check that fails or hangs never
 * touches the consumers; they go on (their failures go to the table, paused).
 *
 * Events: `pause` and `resume` (`{ dependency, rows }`), `check` ({@link HealthState}).
 */
export class HealthMonitor extends EventEmitter {
  readonly stats: HealthStats = { checks: 0, failures: 0, paused: 0, resumed: 0 };
  private readonly checks: Check[] = [];
  private readonly logger: Logger;
  private running = false;
  /** False until the pauses in force were read, so each check knows whether its dependency is paused. */
  private synced = false;

  /**
   * @param table the retry table whose rows the checks pause and resume; `undefined` for
   * checks that only report (what {@link dependencyChecks} makes: a consumer's breaker
   * listens to them without a store).
   */
  constructor(
    private readonly table: HealthHost | undefined,
    checks: HealthChecks,
    options: HealthMonitorOptions = {},
  ) {
    super();
    if (typeof checks !== 'object' || checks === null || Object.keys(checks).length === 0) {
      throw new InvalidOptionError('checks', 'expected at least one check, e.g. { carrier: "http://carrier.internal/health" }');
    }
    this.logger = options.logger === undefined && table !== undefined ? table.logger : toLogger(options.logger);
    const intervalMs = int(options.intervalMs, 5000, 'intervalMs', 1, 86_400_000);
    const failuresToPause = int(options.failuresToPause, 3, 'failuresToPause', 1, 1000);
    const timeoutMs = int(options.timeoutMs, 2000, 'timeoutMs', 1, 600_000);
    for (const [dependency, given] of Object.entries(checks)) {
      if (dependency.length === 0 || dependency.length > 255) throw new InvalidOptionError('checks', `${JSON.stringify(dependency)} is not a dependency name of 1 to 255 characters`);
      const spec = typeof given === 'object' && given !== null ? given : { check: given };
      const option = `checks.${dependency}`;
      let run: Check['run'];
      if (typeof spec.check === 'string') run = urlCheck(spec.check, option);
      else if (typeof spec.check === 'function') run = functionCheck(spec.check);
      else throw new InvalidOptionError(option, 'expected a function, an http(s) URL, or { check, intervalMs?, failuresToPause?, timeoutMs? }');
      const own = int(spec.failuresToPause, failuresToPause, `${option}.failuresToPause`, 1, 1000);
      this.checks.push({
        dependency,
        run,
        intervalMs: int(spec.intervalMs, intervalMs, `${option}.intervalMs`, 1, 86_400_000),
        failuresToPause: own,
        timeoutMs: int(spec.timeoutMs, timeoutMs, `${option}.timeoutMs`, 1, 600_000),
        state: { dependency, healthy: undefined, consecutiveFailures: 0, failuresToPause: own, paused: false, lastError: undefined, lastCheckAt: undefined },
        timer: undefined,
        running: undefined,
      });
      table?.nameDependency(dependency);
    }
  }

  /** The state of each dependency. */
  states(): HealthState[] {
    return this.checks.map((c) => ({ ...c.state }));
  }

  /**
   * Starts checking. A dependency that a health check paused before (in another process,
   * or before a restart) counts as paused here, so its first passing check resumes it.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    await this.sync();
    for (const c of this.checks) this.schedule(c, 0);
  }

  /** Reads which dependencies a health check holds paused; tried again by each check until it works. */
  private async sync(): Promise<void> {
    if (this.table === undefined) {
      this.synced = true;
      return;
    }
    try {
      const holds = await this.table.holds();
      for (const c of this.checks) c.state.paused = holds.some((h) => isOwnHold(h, c.dependency));
      this.synced = true;
    } catch (error) {
      this.logger.warn('health checks could not read the pauses in force; trying again at the next check', { error: error instanceof Error ? error.message : String(error) });
    }
  }

  /** Stops checking and waits for checks in progress. */
  async stop(): Promise<void> {
    this.running = false;
    for (const c of this.checks) clearTimeout(c.timer);
    await Promise.all(this.checks.map((c) => c.running ?? Promise.resolve()));
  }

  /** Runs every check once now (or the one for `dependency`), acting on the results. */
  async checkNow(dependency?: string): Promise<HealthState[]> {
    const chosen = dependency === undefined ? this.checks : this.checks.filter((c) => c.dependency === dependency);
    if (dependency !== undefined && chosen.length === 0) throw new InvalidOptionError('dependency', `no health check for '${dependency}'`, `Checks: ${this.checks.map((c) => c.dependency).join(', ')}.`);
    await Promise.all(chosen.map((c) => this.runOnce(c)));
    return chosen.map((c) => ({ ...c.state }));
  }

  private schedule(c: Check, ms: number): void {
    if (!this.running) return;
    c.timer = setTimeout(() => {
      c.timer = undefined;
      void this.runOnce(c).finally(() => this.schedule(c, c.intervalMs));
    }, ms);
    c.timer.unref();
  }

  private runOnce(c: Check): Promise<void> {
    c.running ??= this.evaluate(c).finally(() => {
      c.running = undefined;
    });
    return c.running;
  }

  private async evaluate(c: Check): Promise<void> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error(`the check took longer than ${c.timeoutMs} ms`)), c.timeoutMs);
    let failure: string | undefined;
    try {
      await Promise.race([
        c.run(controller.signal),
        new Promise<never>((_, reject) => controller.signal.addEventListener('abort', () => reject(controller.signal.reason as Error), { once: true })),
      ]);
    } catch (error) {
      failure = error instanceof Error ? error.message : String(error);
    } finally {
      clearTimeout(timer);
    }
    this.stats.checks++;
    c.state.lastCheckAt = new Date();
    c.state.healthy = failure === undefined;
    c.state.lastError = failure;
    if (failure !== undefined) {
      this.stats.failures++;
      c.state.consecutiveFailures++;
    } else {
      c.state.consecutiveFailures = 0;
    }
    this.emit('check', { ...c.state });
    if (!this.synced) await this.sync();
    const table = this.table;
    if (table === undefined) return;
    try {
      if (failure !== undefined && c.state.paused && c.state.consecutiveFailures >= c.failuresToPause) {
        // Still failing: make sure the pause is still there (an operator's resume, or another
        // process's monitor, may have lifted it); if not, pause again.
        const holds = await table.holds();
        if (!holds.some((h) => isOwnHold(h, c.dependency))) c.state.paused = false;
      }
      if (failure !== undefined && !c.state.paused && c.state.consecutiveFailures >= c.failuresToPause) {
        const rows = await table.pause({ dependency: c.dependency }, { actor: actorOf(c.dependency), allowUnknown: true });
        c.state.paused = true;
        this.stats.paused++;
        this.logger.warn('dependency failing its health check: its retry rows are paused', { dependency: c.dependency, failures: c.state.consecutiveFailures, rows, error: failure });
        this.emit('pause', { dependency: c.dependency, rows });
      } else if (failure === undefined && c.state.paused) {
        const rows = await table.resume({ dependency: c.dependency }, { actor: actorOf(c.dependency), allowUnknown: true, dueNow: true, ownPausesOnly: true });
        c.state.paused = false;
        this.stats.resumed++;
        this.logger.info('dependency passing its health check again: its retry rows are resumed, due now', { dependency: c.dependency, rows });
        this.emit('resume', { dependency: c.dependency, rows });
      }
    } catch (error) {
      // The database is down: the state stays as it was and the next check tries again.
      this.logger.warn('health check could not change the retry table; trying at the next check', { dependency: c.dependency, error: error instanceof Error ? error.message : String(error) });
    }
  }
}

/**
 * Health checks that only report: each dependency's state and a `check` event per run,
 * pausing no retry-table rows (there is no table). What a consumer's breaker listens to
 * in an application without a store; with one, `store.retryTable.health(checks)` serves both.
 *
 * @example
 * const checks = dependencyChecks({ carrier: 'http://carrier.internal/health' }, { intervalMs: 2000 });
 * await checks.start();
 * await warren.consume('shipping', ship, { breaker: { health: checks, dependencies: ['carrier'] } });
 */
export function dependencyChecks(checks: HealthChecks, options: HealthMonitorOptions = {}): HealthMonitor {
  return new HealthMonitor(undefined, checks, options);
}

/** The audit actor of a health check. */
export function actorOf(dependency: string): string {
  return `health-check:${dependency}`;
}

/** The hold a health check keeps on its dependency. */
function isOwnHold(h: { consumer: string | null; dependency: string | null; tenant: string | null; errorClass: string | null; actor: string }, dependency: string): boolean {
  return h.dependency === dependency && h.actor === actorOf(dependency) && h.consumer === null && h.tenant === null && h.errorClass === null;
}
