/**
 * The retry table: messages that wait for a condition (a dependency back up) or a
 * person, as rows in the store's database. Operators pause and resume them by
 * dependency, tenant or error class, set their next attempt, or park them; a scheduler
 * sends due rows back to their consumer through the outbox at a steady rate; health
 * checks pause and resume a dependency's rows by themselves.
 */
import { EventEmitter } from 'node:events';
import { hostname, userInfo } from 'node:os';
import { InvalidOptionError, WarrenError } from '../errors.js';
import { HEADER } from '../headers.js';
import { toLogger, type Logger } from '../logger.js';
import type { OutboxRelay, OutboxRelayOptions } from '../store/outbox-relay.js';
import { checkFilter } from './filter.js';
import { HealthMonitor, type HealthChecks, type HealthHost, type HealthMonitorOptions } from './health.js';
import { RetryScheduler, type RetrySchedulerOptions, type SchedulerHost } from './scheduler.js';
import type { RetryTableSink } from './wait.js';
import type { ChangeOptions, ListOptions, ResumeOptions, RetryAuditEntry, RetryFilter, RetryHold, RetryRow, RetryRowInput, RetrySignals, RetryTableDriver } from './types.js';

export * from './types.js';
export { checkFilter } from './filter.js';
export { WaitForConditionError, isWaitForCondition, decideWait, DEFAULT_WAIT_MS, DEFAULT_WAIT_ATTEMPTS, type WaitOptions, type WaitRule, type RetryTablePolicy, type RetryTableSink, type WaitDecision, type ErrorClass } from './wait.js';
export { RetryScheduler, type RetrySchedulerOptions, type SchedulerHost, type SchedulerStats } from './scheduler.js';
export { HealthMonitor, dependencyChecks, type HealthCheck, type HealthChecks, type HealthHost, type HealthMonitorOptions, type HealthState, type HealthStats } from './health.js';

/** A dependency no row, hold, rule or health check names: probably a typo. */
export class UnknownDependencyError extends WarrenError {
  readonly dependency: string;
  readonly known: readonly string[];
  constructor(dependency: string, known: readonly string[]) {
    super(
      'UNKNOWN_DEPENDENCY',
      `Unknown dependency '${dependency}': no row, pause, or rule or health check of this process names it. Known: ${known.length ? known.join(', ') : '(none yet)'}. Check the spelling; to pause a dependency before any row names it, pass { allowUnknown: true } (--allow-unknown on the command line).`,
    );
    this.dependency = dependency;
    this.known = known;
  }
}

/** What a store gives its retry table. */
export interface RetryTableDeps {
  readonly driver: RetryTableDriver;
  /** Makes a relay for the store's outbox (the scheduler runs one). */
  readonly relay: (options: OutboxRelayOptions) => OutboxRelay;
  readonly logger?: Logger;
}

/** Who is at the keyboard, for the audit. */
export function defaultActor(): string {
  let user = 'unknown';
  try {
    user = userInfo().username || user;
  } catch {
    // No passwd entry (some containers): keep 'unknown'.
  }
  return `${user}@${hostname()}`;
}

function checkActor(actor: unknown): string {
  if (actor === undefined) return defaultActor();
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > 200) throw new InvalidOptionError('actor', `${JSON.stringify(actor)} is not a name of 1 to 200 characters`);
  return actor;
}

/**
 * A store's retry table: `store.retryTable`. Each change is one transaction, returns
 * how many rows it touched, and is recorded with who made it ({@link history}).
 *
 * Events: `changed` (`{ action, rows }`) after a change in this process; the scheduler
 * listens to start draining at once after a resume.
 *
 * @example
 * await store.retryTable.pause({ tenant: '42' }, { actor: 'alice' });
 * await store.retryTable.resume({ dependency: 'carrier' }, { dueNow: true });
 * console.log(await store.retryTable.signals());
 */
export class RetryTable extends EventEmitter implements RetryTableSink, HealthHost, SchedulerHost {
  readonly backend: RetryTableDriver['backend'];
  private readonly driver: RetryTableDriver;
  private readonly makeRelay: RetryTableDeps['relay'];
  readonly logger: Logger;
  /** Dependencies named in this process by consumers' rules and health checks. */
  private readonly named = new Set<string>();

  constructor(deps: RetryTableDeps) {
    super();
    this.driver = deps.driver;
    this.backend = deps.driver.backend;
    this.makeRelay = deps.relay;
    this.logger = toLogger(deps.logger);
  }

  /** Records that something in this process waits on `dependency` (rules and checks do), so commands accept it. */
  nameDependency(dependency: string): void {
    this.named.add(dependency);
  }

  /**
   * Stores a waiting message; the consumer calls this and acks the original once it
   * resolves. Paused at once when a hold matches it.
   */
  insert(row: RetryRowInput): Promise<{ readonly id: string; readonly paused: boolean }> {
    return this.driver.insert(row);
  }

  /** Rows matching `filter`, next attempt first (rows with none last), then by id. */
  async list(filter?: RetryFilter, options: ListOptions = {}): Promise<RetryRow[]> {
    const limit = options.limit ?? 100;
    const offset = options.offset ?? 0;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100_000) throw new InvalidOptionError('limit', `${JSON.stringify(limit)} is not a whole number from 1 to 100000`);
    if (!Number.isInteger(offset) || offset < 0) throw new InvalidOptionError('offset', `${JSON.stringify(offset)} is not a whole number of 0 or more`);
    return this.driver.list(checkFilter(filter), limit, offset);
  }

  /** How many rows match. */
  async count(filter?: RetryFilter): Promise<number> {
    return this.driver.count(checkFilter(filter));
  }

  /**
   * Pauses matching rows: the scheduler skips them. A pause by consumer, dependency,
   * tenant or error class is also kept as a hold, so rows added later that match are
   * paused too, until {@link resume}.
   */
  async pause(filter: RetryFilter, options: ChangeOptions = {}): Promise<number> {
    const f = await this.checkChange(filter, options);
    return this.changed('pause', await this.driver.update({ action: 'pause' }, f, checkActor(options.actor)));
  }

  /**
   * Unpauses matching rows and lifts the holds the filter names; rows that another
   * hold still covers stay paused. With `dueNow`, their next attempt becomes now.
   */
  async resume(filter: RetryFilter, options: ResumeOptions = {}): Promise<number> {
    const f = await this.checkChange(filter, options);
    if (options.dueNow !== undefined && typeof options.dueNow !== 'boolean') throw new InvalidOptionError('dueNow', 'expected true or false');
    if (options.ownPausesOnly !== undefined && typeof options.ownPausesOnly !== 'boolean') throw new InvalidOptionError('ownPausesOnly', 'expected true or false');
    const change = { action: 'resume', dueNow: options.dueNow ?? false, ownPausesOnly: options.ownPausesOnly ?? false } as const;
    return this.changed('resume', await this.driver.update(change, f, checkActor(options.actor)));
  }

  /**
   * Sets the next attempt of matching rows: `'now'`, a time (one in the past means
   * now), or `null` for none (they wait until someone sets one).
   */
  async schedule(filter: RetryFilter, at: Date | 'now' | null, options: ChangeOptions = {}): Promise<number> {
    // "Now" is the database's clock, the one due rows are picked by.
    let when: Date | 'now' | null;
    if (at === 'now' || at === null) when = at;
    else if (at instanceof Date && !Number.isNaN(at.getTime())) when = at.getTime() <= Date.now() ? 'now' : at;
    else throw new InvalidOptionError('at', `${JSON.stringify(at)} is not 'now', a valid Date or null`);
    const f = await this.checkChange(filter, options);
    return this.changed('schedule', await this.driver.update({ action: 'schedule', at: when }, f, checkActor(options.actor)));
  }

  /**
   * Sends matching rows to their consumer's parked queue, with their last failure,
   * through the outbox (the relay publishes them), and deletes them from the table.
   */
  async park(filter: RetryFilter, options: ChangeOptions = {}): Promise<number> {
    const f = await this.checkChange(filter, options);
    const headers = { [HEADER.parkedReason]: 'operator', [HEADER.parkedAt]: new Date().toISOString() };
    return this.changed('park', await this.driver.park(f, checkActor(options.actor), headers));
  }

  /** Pauses in force (by consumer, dependency, tenant or error class). */
  holds(): Promise<RetryHold[]> {
    return this.driver.holds();
  }

  /** Dependencies named by rows, holds, consumers' rules and health checks in this process. */
  async dependencies(): Promise<string[]> {
    const stored = await this.driver.dependencies();
    return [...new Set([...stored, ...this.named])].sort();
  }

  /** Rows due, paused, waiting for a person, the age of the oldest due row, by dependency. */
  signals(): Promise<RetrySignals> {
    return this.driver.signals();
  }

  /** Recorded changes, newest first. */
  async history(limit = 100): Promise<RetryAuditEntry[]> {
    if (!Number.isInteger(limit) || limit < 1 || limit > 100_000) throw new InvalidOptionError('limit', `${JSON.stringify(limit)} is not a whole number from 1 to 100000`);
    return this.driver.history(limit);
  }

  /**
   * A scheduler that sends due rows back to their consumers at `ratePerSecond`; call
   * `start()` on it.
   *
   * @example
   * const scheduler = store.retryTable.scheduler({ publisher: warren.publisher, exchange: warren.topology.exchange, ratePerSecond: 50 });
   * await scheduler.start();
   */
  scheduler(options: RetrySchedulerOptions): RetryScheduler {
    return new RetryScheduler(this, this.driver, options);
  }

  /**
   * Health checks that pause a dependency's rows after consecutive failures and resume
   * them (due now) when the check passes again; call `start()` on it.
   */
  health(checks: HealthChecks, options: HealthMonitorOptions = {}): HealthMonitor {
    return new HealthMonitor(this, checks, options);
  }

  /** @internal The scheduler's relay. */
  relay(options: OutboxRelayOptions): OutboxRelay {
    return this.makeRelay(options);
  }

  private async checkChange(filter: RetryFilter, options: ChangeOptions): Promise<RetryFilter> {
    if (filter === undefined) throw new InvalidOptionError('filter', 'expected a filter; pass {} to mean every row');
    const f = checkFilter(filter);
    if (options.allowUnknown !== undefined && typeof options.allowUnknown !== 'boolean') throw new InvalidOptionError('allowUnknown', 'expected true or false');
    if (f.dependency !== undefined && options.allowUnknown !== true) {
      const known = await this.dependencies();
      if (!known.includes(f.dependency)) throw new UnknownDependencyError(f.dependency, known);
    }
    return f;
  }

  private changed(action: string, rows: number): number {
    this.emit('changed', { action, rows });
    return rows;
  }
}
