import { EventEmitter } from 'node:events';
import { backoffDelay } from '../connection/index.js';
import { InvalidOptionError } from '../errors.js';
import { toLogger, type Logger } from '../logger.js';
import type { OutboxPublisher, OutboxRelay, OutboxRelayOptions } from '../store/outbox-relay.js';
import type { HealthChecks, HealthMonitor, HealthMonitorOptions } from './health.js';
import type { DrainResult, RetryTableDriver } from './types.js';
import { Sleeper } from '../sleeper.js';

/** Options of `store.retryTable.scheduler(options)`. */
export interface RetrySchedulerOptions {
  /** Publishes with confirms and `mandatory`, for the scheduler's outbox relay: `warren.publisher`. */
  publisher: OutboxPublisher;
  /** The relay's exchange for outbox rows added without one: `warren.topology.exchange`. */
  exchange: string;
  /**
   * Rows sent back per second, by this scheduler (several schedulers add up). `Infinity`
   * sends as fast as the database and broker go.
   * @default 50
   */
  ratePerSecond?: number;
  /**
   * Rows moved per transaction. Smaller batches make a smoother stream.
   * @default ratePerSecond / 20, at least 1, at most 500 (200 when the rate is Infinity)
   */
  batchSize?: number;
  /**
   * How often to look for due rows when none was due (a resume in this process wakes it at once).
   * @default 500
   */
  pollMs?: number;
  /**
   * Rows sent back wait in the outbox until the relay publishes them; while this many
   * are unsent (the broker is down, say), the scheduler moves no more, so rows stay in
   * the table and a broker outage does not end in a burst.
   * @default twice the batch size, at least 20
   */
  maxPending?: number;
  /**
   * Run an outbox relay with `publisher` (stopped with the scheduler). Pass `false` when
   * the application runs a relay on this store already, or options for the relay.
   * @default true
   */
  relay?: boolean | Omit<OutboxRelayOptions, 'publisher' | 'exchange'>;
  /** Health checks run beside the scheduler (see `store.retryTable.health()`). */
  checks?: HealthChecks;
  /** Options of those health checks. */
  health?: HealthMonitorOptions;
  /**
   * Wait after a failed pass (database down): doubling from the first to the longest.
   * @default { initialDelayMs: 100, maxDelayMs: 5000 }
   */
  retry?: { initialDelayMs?: number; maxDelayMs?: number };
  /** @default the table's logger */
  logger?: Logger;
}

/** Running totals of a scheduler. */
export interface SchedulerStats {
  /** Rows moved to the outbox (sent back to their consumer). */
  moved: number;
  /** Drain transactions run. */
  passes: number;
  /** Passes that failed (database unavailable). */
  failures: number;
}

/** The longest delay setTimeout takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

function positiveInt(value: number | undefined, fallback: number, option: string, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number from 1 to ${max}`);
  return v;
}

/** What a scheduler needs of its retry table (`store.retryTable` is one). */
export interface SchedulerHost {
  readonly logger: Logger;
  /** A relay for the store's outbox, which publishes what the scheduler moves. */
  relay(options: OutboxRelayOptions): OutboxRelay;
  /** Health checks that pause and resume dependencies. */
  health(checks: HealthChecks, options?: HealthMonitorOptions): HealthMonitor;
  /** Listens for changes made in this process (a resume wakes the scheduler). */
  on(event: 'changed', listener: (change: { action: string; rows: number }) => void): unknown;
  /** Stops listening. */
  off(event: 'changed', listener: (change: { action: string; rows: number }) => void): unknown;
}

/**
 * Sends due, unpaused rows back to their consumer's queue, oldest next attempt first,
 * through the outbox: each pass moves a batch from the table into the outbox in one
 * transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL, so several schedulers never move
 * a row twice), and the relay publishes it with the original message and correlation
 * ids. A token bucket keeps the stream at `ratePerSecond`. While the broker is down the
 * outbox fills to `maxPending` and the rest stays in the table. With an OpenTelemetry SDK
 * registered, the relay publishes each row in a `release <queue>` span, in the message's
 * trace and linked to the attempt that made it wait (see docs/tracing.md).
 *
 * Events: `drained` (`{ rows }`) after each pass that moved rows.
 *
 * @example
 * const scheduler = store.retryTable.scheduler({
 *   publisher: warren.publisher, exchange: warren.topology.exchange, ratePerSecond: 50,
 *   checks: { carrier: 'http://carrier.internal/health' },
 * });
 * await scheduler.start();
 * // on shutdown, before warren.close():
 * await scheduler.stop();
 */
export class RetryScheduler extends EventEmitter {
  readonly stats: SchedulerStats = { moved: 0, passes: 0, failures: 0 };
  readonly ratePerSecond: number;
  readonly batchSize: number;
  /** The health checks this scheduler runs, when `checks` was given. */
  readonly health: HealthMonitor | undefined;
  private readonly pollMs: number;
  private readonly maxPending: number;
  private readonly initialDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly logger: Logger;
  private readonly relay: OutboxRelay | undefined;
  private running = false;
  private readonly sleeper = new Sleeper(() => this.running);
  private loopDone: Promise<void> | undefined;
  private readonly onRelayPass = () => this.wake();
  private readonly onChanged = (change: { action: string; rows: number }) => {
    if (change.rows > 0 && (change.action === 'resume' || change.action === 'schedule')) this.wake();
  };

  constructor(
    private readonly table: SchedulerHost,
    private readonly driver: RetryTableDriver,
    options: RetrySchedulerOptions,
  ) {
    super();
    if (typeof options !== 'object' || options === null) throw new InvalidOptionError('options', 'expected { publisher, exchange, ratePerSecond? }');
    const rate = options.ratePerSecond ?? 50;
    if (typeof rate !== 'number' || Number.isNaN(rate) || rate <= 0) {
      throw new InvalidOptionError('ratePerSecond', `${JSON.stringify(rate)} is not a rate: give messages per second, more than 0 (Infinity for no limit)`);
    }
    this.ratePerSecond = rate;
    const defaultBatch = rate === Infinity ? 200 : Math.min(500, Math.max(1, Math.ceil(rate / 20)));
    this.batchSize = positiveInt(options.batchSize, defaultBatch, 'batchSize', 10_000);
    this.pollMs = positiveInt(options.pollMs, 500, 'pollMs', 3_600_000);
    this.maxPending = positiveInt(options.maxPending, Math.max(20, 2 * this.batchSize), 'maxPending', 1_000_000);
    this.initialDelayMs = positiveInt(options.retry?.initialDelayMs, 100, 'retry.initialDelayMs', 3_600_000);
    this.maxDelayMs = positiveInt(options.retry?.maxDelayMs, 5000, 'retry.maxDelayMs', 3_600_000);
    this.logger = options.logger === undefined ? table.logger : toLogger(options.logger);
    if (options.relay !== false) {
      if (typeof options.publisher?.send !== 'function') throw new InvalidOptionError('publisher', 'expected a publisher with `send(message)`, such as `warren.publisher`');
      if (typeof options.exchange !== 'string') throw new InvalidOptionError('exchange', 'expected the exchange of outbox rows added without one: `warren.topology.exchange`');
      const extra = typeof options.relay === 'object' ? options.relay : {};
      this.relay = table.relay({ logger: this.logger, ...extra, publisher: options.publisher, exchange: options.exchange });
    }
    this.health = options.checks === undefined ? undefined : table.health(options.checks, { logger: this.logger, ...options.health });
  }

  /** True between `start()` and `stop()`. */
  get started(): boolean {
    return this.running;
  }

  /** Starts the relay, the health checks and the drain loop. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.table.on('changed', this.onChanged);
    this.relay?.on('pass', this.onRelayPass);
    await this.relay?.start();
    // stop() may have been called while the relay started: start nothing more.
    if (this.running) await this.health?.start();
    if (!this.running) {
      await this.health?.stop();
      await this.relay?.stop();
      return;
    }
    this.loopDone = this.loop();
  }

  /** Finishes the pass in progress, then stops the loop, the health checks and the relay. Rows left stay in the table. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.table.off('changed', this.onChanged);
    this.sleeper.stopped();
    await this.loopDone;
    await this.health?.stop();
    this.relay?.off('pass', this.onRelayPass);
    await this.relay?.stop();
  }

  /** Moves up to `limit` due rows into the outbox now; returns how many. Throws when the database is down. */
  async drainOnce(limit = this.batchSize): Promise<number> {
    return (await this.pass(limit)).moved;
  }

  private async pass(limit: number): Promise<DrainResult> {
    const result = await this.driver.drain({ limit, maxPending: this.maxPending });
    this.stats.passes++;
    if (result.moved > 0) {
      this.stats.moved += result.moved;
      this.emit('drained', { rows: result.moved });
    }
    return result;
  }

  private wake(): void {
    this.sleeper.wake();
  }

  private async loop(): Promise<void> {
    const rate = this.ratePerSecond;
    // Pacing by a theoretical send time (`tat`): each row sent moves it on by one
    // interval, and the loop waits until a whole batch is allowed. Time spent in the
    // database counts toward the interval, so the stream holds the set rate; `tat` is
    // never more than one batch behind now, so an idle scheduler bursts one batch at most.
    const interval = rate === Infinity ? 0 : 1000 / rate;
    const burst = this.batchSize * interval;
    // One interval of credit beyond the batch keeps a late timer's lateness from being lost
    // (with batches of one row, every late wake-up would otherwise slow the stream).
    const credit = burst + interval;
    let tat = performance.now() - burst;
    let failures = 0;
    while (this.running) {
      const now = performance.now();
      if (tat < now - credit) tat = now - credit;
      const want = rate === Infinity ? this.batchSize : Math.min(this.batchSize, Math.floor((now - tat) / interval + 1e-9));
      if (want < 1) {
        await this.sleeper.sleep(Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(tat + interval - now))), false);
        continue;
      }
      let result: DrainResult;
      try {
        result = await this.pass(want);
        failures = 0;
      } catch (error) {
        failures++;
        this.stats.failures++;
        const delay = backoffDelay(failures, this.initialDelayMs, Math.max(this.initialDelayMs, this.maxDelayMs));
        this.logger.warn('retry scheduler pass failed; trying again', { attempt: failures, delayMs: delay, error: error instanceof Error ? error.message : String(error) });
        await this.sleeper.sleep(delay, false);
        continue;
      }
      tat += result.moved * interval;
      if (result.full) {
        // The outbox holds its bound of unsent rows: wait for the relay (its passes wake us).
        await this.sleeper.sleep(this.pollMs, true);
      } else if (result.moved < want) {
        // Nothing more is due: look again later (a resume in this process wakes us).
        await this.sleeper.sleep(this.pollMs, true);
      } else if (rate !== Infinity) {
        // Wait until a whole batch is allowed.
        await this.sleeper.sleep(Math.min(MAX_TIMER_MS, Math.max(1, Math.ceil(tat + burst - performance.now()))), false);
      }
    }
  }
}
