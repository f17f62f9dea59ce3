/**
 * A consumer's breaker: when a dependency is down, the consumer stops taking messages
 * instead of failing each one (DESIGN invariant 15). It opens when a named dependency's
 * health check fails (the same checks the retry table uses) or when the consumer's
 * transient failures pass a threshold; while open, messages wait in the work queue, in
 * order, with no attempt counted. Half-open, it lets one message through at a time, at an
 * interval that backs off; a success closes it. A hand pause sits beside it, and the
 * breaker never lifts one.
 *
 * This file is the state machine and its options; the consumer does the I/O (cancelling
 * its broker consumer, taking a probe with `basic.get`) through a {@link BreakerHost}.
 */
import { hostname, userInfo } from 'node:os';
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { HealthState } from '../retry-table/health.js';
import type { ControlSettings } from './control.js';
import { checkShare, SHARE_DEFAULTS, type BreakerShare } from './share.js';

export * from './control.js';
export * from './share.js';

/** Where the breaker hears of dependencies: a `HealthMonitor` (`store.retryTable.health(checks)` or `dependencyChecks(checks)`). */
export interface DependencyHealth {
  /** The last state of every dependency checked. */
  states(): HealthState[];
  /** Tells `listener` of each check's result. */
  on(event: 'check', listener: (state: HealthState) => void): unknown;
  /** Stops telling `listener`. */
  off(event: 'check', listener: (state: HealthState) => void): unknown;
}

/** When a consumer's share of failures opens its breaker. */
export interface FailureRateOptions {
  /** The share of failed deliveries (above 0, at most 1) that opens the breaker. */
  share: number;
  /**
   * The window the share is measured over.
   * @default 30000
   */
  windowMs?: number;
  /**
   * Deliveries in the window before the share counts: two failures out of three say little.
   * @default 20
   */
  minimum?: number;
}

/** Options of a consumer's breaker (`consume(name, handler, { breaker })`). `true` takes every default. */
export interface BreakerOptions {
  /**
   * Transient failures in a row (a retry, a retry-table wait, a park at the cap) that
   * open the breaker. A success resets the count; a permanent error or a bad payload
   * counts neither way (it is the message's fault, not a dependency's).
   * @default 5
   */
  consecutiveFailures?: number;
  /**
   * Also open when this share of deliveries failed within a window.
   * @default off
   */
  failureRate?: FailureRateOptions;
  /** The health checks to follow; `dependencies` names which of them this consumer needs. */
  health?: DependencyHealth;
  /**
   * Dependencies (names of checks in `health`) whose failing check opens the breaker: at
   * the check's own `failuresToPause` consecutive failures, the same point where the retry
   * table pauses their rows. While one is failing the breaker sends no probe; once every
   * one passes again it probes at once.
   * @default every check in `health`
   */
  dependencies?: readonly string[];
  /**
   * Time from the opening to the first probe, doubled after each failed probe.
   * @default 1000
   */
  probeMs?: number;
  /**
   * The longest time between two probes.
   * @default 30000
   */
  maxProbeMs?: number;
  /**
   * Share the breaker's state with the consumer's other processes through the store
   * (`store.breakers`): when one opens, every one stops taking messages; when one sees a
   * probe succeed, every one consumes again. Each still probes on its own schedule.
   * @default each process decides for itself
   */
  share?: BreakerShare;
  /**
   * How often a process reads the shared state: another's opening or closing reaches it
   * within about this long.
   * @default 1000
   */
  shareIntervalMs?: number;
}

/** The breaker's options, checked and with their defaults. */
export interface BreakerSettings {
  readonly consecutiveFailures: number;
  readonly failureRate: Readonly<Required<FailureRateOptions>> | undefined;
  readonly health: DependencyHealth | undefined;
  readonly dependencies: readonly string[] | undefined;
  readonly probeMs: number;
  readonly maxProbeMs: number;
  readonly share: BreakerShare | undefined;
  readonly shareIntervalMs: number;
}

/** The defaults, in one place (docs/breaker.md lists them). */
export const BREAKER_DEFAULTS = Object.freeze({ consecutiveFailures: 5, windowMs: 30_000, minimum: 20, probeMs: 1000, maxProbeMs: 30_000 });

function whole(value: unknown, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number from ${min} to ${max}`);
  return v;
}

/** Checks a consumer's `breaker` option once; `undefined` when it is off. */
export function breakerSettings(given: BreakerOptions | boolean | undefined): BreakerSettings | undefined {
  if (given === undefined || given === false) return undefined;
  const o: BreakerOptions = given === true ? {} : given;
  if (typeof o !== 'object' || o === null) throw new InvalidOptionError('breaker', `${JSON.stringify(given)} is not true, false or an object of breaker options`);
  let failureRate: BreakerSettings['failureRate'];
  if (o.failureRate !== undefined) {
    const r = o.failureRate;
    if (typeof r !== 'object' || r === null || typeof r.share !== 'number' || !(r.share > 0 && r.share <= 1)) {
      throw new InvalidOptionError('breaker.failureRate', 'expected { share, windowMs?, minimum? } with a share above 0 and at most 1, e.g. { share: 0.5 }');
    }
    failureRate = Object.freeze({
      share: r.share,
      windowMs: whole(r.windowMs, BREAKER_DEFAULTS.windowMs, 'breaker.failureRate.windowMs', 100, 3_600_000),
      minimum: whole(r.minimum, BREAKER_DEFAULTS.minimum, 'breaker.failureRate.minimum', 1, 100_000),
    });
  }
  const health = o.health;
  if (health !== undefined && (typeof health !== 'object' || health === null || typeof health.states !== 'function' || typeof health.on !== 'function')) {
    throw new InvalidOptionError('breaker.health', 'expected a health monitor, such as store.retryTable.health(checks) or dependencyChecks(checks)');
  }
  let dependencies: readonly string[] | undefined;
  if (o.dependencies !== undefined) {
    if (!Array.isArray(o.dependencies) || o.dependencies.some((d) => typeof d !== 'string')) throw new InvalidOptionError('breaker.dependencies', 'expected a list of dependency names');
    if (health === undefined) throw new InvalidOptionError('breaker.dependencies', 'names dependencies, but there is no `health` to hear their checks from', 'Pass breaker.health: store.retryTable.health(checks) or dependencyChecks(checks).');
    const known = new Set(health.states().map((s) => s.dependency));
    const unknown = o.dependencies.filter((d) => !known.has(d));
    if (unknown.length > 0) throw new InvalidOptionError('breaker.dependencies', `no health check for ${unknown.map((d) => `'${d}'`).join(', ')}`, `Checks: ${[...known].join(', ') || '(none)'}.`);
    dependencies = Object.freeze([...o.dependencies]);
  }
  const probeMs = whole(o.probeMs, BREAKER_DEFAULTS.probeMs, 'breaker.probeMs', 1, 3_600_000);
  const maxProbeMs = whole(o.maxProbeMs, Math.max(BREAKER_DEFAULTS.maxProbeMs, probeMs), 'breaker.maxProbeMs', probeMs, 3_600_000);
  const share = checkShare(o.share);
  const shareIntervalMs = whole(o.shareIntervalMs, SHARE_DEFAULTS.intervalMs, 'breaker.shareIntervalMs', 10, 600_000);
  return Object.freeze({
    consecutiveFailures: whole(o.consecutiveFailures, BREAKER_DEFAULTS.consecutiveFailures, 'breaker.consecutiveFailures', 1, 100_000),
    failureRate,
    health,
    dependencies,
    probeMs,
    maxProbeMs,
    share,
    shareIntervalMs,
  });
}

/** The actor of a hand pause or resume: as given (1 to 200 characters), else `user@host`. */
export function checkActor(actor: unknown): string {
  if (actor === undefined) {
    let user = 'unknown';
    try {
      user = userInfo().username || user;
    } catch {
      // No passwd entry (some containers): keep 'unknown'.
    }
    return `${user}@${hostname()}`;
  }
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > 200) throw new InvalidOptionError('actor', `${JSON.stringify(actor)} is not a name of 1 to 200 characters`);
  return actor;
}

/** What a decision says of the consumer's dependencies. */
export type BreakerVerdict = 'success' | 'failure' | 'neutral';

/**
 * A decision's verdict: an ack is a success; a retry, a retry-table wait or a park at the
 * cap is a transient failure; anything else (a permanent error, a bad payload, the
 * crash-loop guard) is the message's own and says nothing of a dependency.
 */
export function verdictOf(decision: { readonly kind: string; readonly reason?: string }): BreakerVerdict {
  switch (decision.kind) {
    case 'ack':
      return 'success';
    case 'retry':
    case 'wait':
      return 'failure';
    case 'park':
      return decision.reason === 'max-attempts' ? 'failure' : 'neutral';
    default:
      return 'neutral';
  }
}

/** What a probe found: a message taken (its verdict comes later), or nothing to take. */
export type ProbeStart = 'taken' | 'empty' | 'unavailable';

/** How a probe ended, for metrics and events. */
export type ProbeResult = 'success' | 'failure' | 'neutral' | 'empty' | 'lost';

/** What the breaker needs of its consumer. */
export interface BreakerHost {
  readonly name: string;
  readonly logger: Logger;
  /** Intake should now be open (or closed): the consumer re-consumes, or cancels and gives back what never started. */
  intakeChanged(): void;
  /** Takes one message (basic.get) and runs it; its decision comes back to {@link Breaker.observe} with `probe` true. */
  probe(): Promise<ProbeStart>;
  /** Tells the consumer's listeners. */
  emit(event: 'paused' | 'resumed' | 'probe', payload: object): void;
}

/** Why a consumer takes no messages. */
export type PauseCause =
  | { readonly by: 'failures'; readonly reason: string }
  | { readonly by: 'dependency'; readonly dependency: string; readonly reason: string }
  /** Another process's breaker opened, and this one follows it through the store (`breaker.share`). */
  | { readonly by: 'shared'; readonly openedBy: string; readonly reason: string }
  | { readonly by: 'hand'; readonly reason: string; readonly actor: string };

/** A hand pause: where it came from, why, by whom, since when. */
export type HandPause = PauseCause & { readonly by: 'hand'; readonly since: Date; readonly from: 'process' | 'store' };

/** A consumer's intake: consuming, or paused and why. */
export interface IntakeState {
  /** True while the consumer takes messages. */
  readonly consuming: boolean;
  /** The breaker: `off` when the consumer has no `breaker` option. */
  readonly breaker: 'off' | 'closed' | 'open' | 'half-open';
  /** Why the breaker is open, and since when. */
  readonly open: (PauseCause & { readonly since: Date; readonly nextProbeAt: Date | undefined }) | undefined;
  /**
   * The hand pause in force: `from: 'store'` when it came through the consumer's `control`
   * (`warren consumer pause`, the console), `'process'` when `consumer.pause()` made it here.
   */
  readonly hand: HandPause | undefined;
  /** Probes sent since the consumer started, by how they ended. */
  readonly probes: Readonly<Record<ProbeResult, number>>;
  /** Total time the breaker has been open, in ms (the current opening included). */
  readonly openMs: number;
}

/** One consumer's breaker and hand pause. */
export class Breaker {
  private state: 'closed' | 'open' | 'half-open' = 'closed';
  private cause: (PauseCause & { since: Date }) | undefined;
  /** The pause made here (`consumer.pause()`) and the one followed from the store; either stops the intake. */
  private handHere: HandPause | undefined;
  private handStore: HandPause | undefined;
  private followTimer: NodeJS.Timeout | undefined;
  private controlFailing = false;
  private shareTimer: NodeJS.Timeout | undefined;
  private shareFailing = false;
  /** When this process last closed after its own probe succeeded (a close it must share). */
  private closedHere: Date | undefined;
  /** This process, as the shared state names it. */
  private readonly me = `${hostname()}:${process.pid}`;
  private streak = 0;
  /** The failure-rate window: times and verdicts, oldest first. */
  private window: Array<{ at: number; failed: boolean }> = [];
  private delay: number;
  private timer: NodeJS.Timeout | undefined;
  private nextProbeAt: Date | undefined;
  private probing = false;
  /** Named dependencies whose checks say they are down. */
  private readonly down = new Set<string>();
  private readonly probes: Record<ProbeResult, number> = { success: 0, failure: 0, neutral: 0, empty: 0, lost: 0 };
  private closedOpenMs = 0;
  private disposed = false;
  private readonly onCheck = (s: HealthState): void => this.check(s);

  constructor(
    private readonly settings: BreakerSettings | undefined,
    private readonly host: BreakerHost,
    private readonly control: ControlSettings | undefined = undefined,
  ) {
    this.delay = settings?.probeMs ?? BREAKER_DEFAULTS.probeMs;
  }

  /**
   * Starts listening to the health checks and, with a control, reads the consumer's row
   * once before resolving (a consumer paused in the store takes nothing at its start),
   * then again at the control's interval. The consumer calls it at its start.
   */
  async start(): Promise<void> {
    const health = this.settings?.health;
    if (health !== undefined && !this.disposed) {
      health.on('check', this.onCheck);
      for (const s of health.states()) if (s.healthy !== undefined) this.check(s);
    }
    if (this.control !== undefined && !this.disposed) await this.follow();
    if (this.settings?.share !== undefined && !this.disposed) await this.followShare();
  }

  /**
   * Reads the consumer's shared breaker and follows it: another process's opening opens
   * this one (it then probes on its own schedule too); a closing newer than this one's
   * opening closes it, unless a dependency's check still fails here. What this process
   * could not write (an opening, a closing) is written again. A store that cannot be read
   * changes nothing.
   */
  private async followShare(): Promise<void> {
    const share = this.settings?.share;
    if (share === undefined || this.disposed) return;
    const name = this.host.name;
    try {
      const row = (await share.read(name)).find((r) => r.consumer === name);
      if (this.shareFailing) this.host.logger.info('the breaker reads its shared state in the store again', { consumer: name });
      this.shareFailing = false;
      if (this.disposed) return;
      if (this.state === 'closed') {
        if (row?.open === true) {
          // An opening from before our own close (ours, or another's): our close is not
          // written yet, or was lost. Write it (again) rather than follow a stale opening.
          if (this.closedHere !== undefined && this.closedHere >= row.since) await share.close(name, this.me);
          else this.open({ by: 'shared', openedBy: row.openedBy, reason: `the breaker of ${row.openedBy} opened: ${row.reason}` });
        }
      } else if (this.cause !== undefined) {
        const closedAfter = row !== undefined && !row.open && row.closedAt !== undefined && row.closedAt > this.cause.since;
        if (closedAfter && this.down.size === 0 && !this.probing) this.close(`a probe of ${row.closedBy ?? 'another process'} succeeded`);
        else if (this.cause.by !== 'shared' && (row === undefined || (!row.open && !closedAfter))) await share.open(name, this.cause.reason, this.me, this.cause.since);
      }
    } catch (error) {
      if (!this.shareFailing) {
        this.host.logger.warn('could not read or write the breaker\'s shared state in the store; the breaker decides alone until it can', { consumer: name, error: error instanceof Error ? error.message : String(error) });
      }
      this.shareFailing = true;
    } finally {
      if (!this.disposed) {
        clearTimeout(this.shareTimer);
        this.shareTimer = setTimeout(() => void this.followShare(), this.settings?.shareIntervalMs ?? SHARE_DEFAULTS.intervalMs);
        this.shareTimer.unref();
      }
    }
  }

  /** Writes this process's opening or closing to the shared state now; a failure is written again at the next read. */
  private tellShare(what: 'open' | 'close'): void {
    const share = this.settings?.share;
    const cause = this.cause;
    if (share === undefined || this.disposed) return;
    const done = what === 'open' && cause !== undefined ? share.open(this.host.name, cause.reason, this.me, cause.since) : what === 'close' ? share.close(this.host.name, this.me) : Promise.resolve(false);
    done.catch((error: unknown) => {
      if (!this.shareFailing) this.host.logger.warn(`could not share the breaker's ${what === 'open' ? 'opening' : 'closing'} through the store; it is tried again`, { consumer: this.host.name, error: error instanceof Error ? error.message : String(error) });
      this.shareFailing = true;
    });
  }

  /** The hand pause in force: the store's first, as it outlasts one made here. */
  private get hand(): HandPause | undefined {
    return this.handStore ?? this.handHere;
  }

  /** True while the consumer should take messages. */
  get intakeOpen(): boolean {
    return this.state === 'closed' && this.hand === undefined && !this.disposed;
  }

  /** Reads the consumer's row in the store and follows it; a store that cannot be read changes nothing. */
  private async follow(): Promise<void> {
    const control = this.control;
    if (control === undefined || this.disposed) return;
    try {
      const row = (await control.source.read(this.host.name)).find((r) => r.consumer === this.host.name);
      if (this.controlFailing) this.host.logger.info('the consumer reads its pauses in the store again', { consumer: this.host.name });
      this.controlFailing = false;
      if (this.disposed) return;
      if (row?.paused === true && this.handStore === undefined) this.pauseByHand(row.reason, row.actor, 'store', row.since);
      else if (row?.paused !== true && this.handStore !== undefined) this.resumeByHand(row?.resumedBy ?? 'unknown', 'store');
    } catch (error) {
      if (!this.controlFailing) {
        this.host.logger.warn('could not read the consumer\'s pauses in the store; it goes on as it was until it can', { consumer: this.host.name, error: error instanceof Error ? error.message : String(error) });
      }
      this.controlFailing = true;
    } finally {
      if (!this.disposed) {
        clearTimeout(this.followTimer);
        this.followTimer = setTimeout(() => void this.follow(), control.intervalMs);
        this.followTimer.unref();
      }
    }
  }

  /** A snapshot for health, status and metrics. */
  intake(): IntakeState {
    const now = Date.now();
    return {
      consuming: this.intakeOpen,
      breaker: this.settings === undefined ? 'off' : this.state,
      open: this.cause === undefined ? undefined : { ...this.cause, nextProbeAt: this.nextProbeAt },
      hand: this.hand,
      probes: { ...this.probes },
      openMs: this.closedOpenMs + (this.cause === undefined ? 0 : now - this.cause.since.getTime()),
    };
  }

  /** A delivery's decision. `probe`: the delivery the half-open breaker let through. */
  observe(verdict: BreakerVerdict, probe: boolean): void {
    if (this.settings === undefined || this.disposed) return;
    if (probe) {
      this.probing = false;
      this.probes[verdict] += 1;
      this.host.emit('probe', { consumer: this.host.name, result: verdict });
      if (verdict === 'success') return this.close();
      if (this.state === 'half-open') this.state = 'open';
      if (verdict === 'failure') this.delay = Math.min(this.delay * 2, this.settings.maxProbeMs);
      this.host.logger.info(verdict === 'failure' ? 'breaker probe failed; the consumer stays paused' : 'breaker probe told nothing (a permanent error or a bad payload); probing again', { consumer: this.host.name, nextProbeMs: this.delay });
      this.scheduleProbe(this.delay);
      return;
    }
    if (this.state !== 'closed' || verdict === 'neutral') return;
    const failed = verdict === 'failure';
    this.streak = failed ? this.streak + 1 : 0;
    const rate = this.settings.failureRate;
    if (rate !== undefined) {
      const now = Date.now();
      this.window.push({ at: now, failed });
      let drop = 0;
      while (drop < this.window.length && (this.window[drop] as { at: number }).at < now - rate.windowMs) drop++;
      if (drop > 0 || this.window.length > 100_000) this.window = this.window.slice(Math.max(drop, this.window.length - 100_000));
      if (failed && this.window.length >= rate.minimum) {
        const failures = this.window.reduce((n, s) => n + (s.failed ? 1 : 0), 0);
        if (failures / this.window.length >= rate.share) {
          return this.open({ by: 'failures', reason: `${failures} of the last ${this.window.length} deliveries failed within ${rate.windowMs} ms` });
        }
      }
    }
    if (failed && this.streak >= this.settings.consecutiveFailures) this.open({ by: 'failures', reason: `${this.streak} transient failures in a row` });
  }

  /** The probe's delivery will never be decided here (its channel closed): probe again later. */
  probeLost(): void {
    if (!this.probing) return;
    this.probing = false;
    this.probes.lost += 1;
    if (this.state === 'half-open') this.state = 'open';
    this.scheduleProbe(this.delay);
  }

  /**
   * Pauses by hand: the breaker never lifts it, only {@link resumeByHand} from the same
   * place does. `from`: `process` for `consumer.pause()`, `store` for the control's row.
   */
  pauseByHand(reason: string, actor: string, from: 'process' | 'store' = 'process', since: Date = new Date()): boolean {
    if ((from === 'store' ? this.handStore : this.handHere) !== undefined) return false;
    const wasOpen = this.intakeOpen;
    const hand: HandPause = { by: 'hand', reason, actor, since, from };
    if (from === 'store') this.handStore = hand;
    else this.handHere = hand;
    this.host.logger.warn(from === 'store' ? 'consumer paused by hand (through the store); messages wait in its queue' : 'consumer paused by hand; messages wait in its queue', { consumer: this.host.name, reason, actor });
    this.host.emit('paused', { consumer: this.host.name, by: 'hand', reason, actor, from });
    if (wasOpen) this.host.intakeChanged();
    return true;
  }

  /**
   * Lifts the hand pause made from `from`; the consumer consumes again unless another
   * pause is in force or the breaker is open (it then probes as before).
   */
  resumeByHand(actor: string, from: 'process' | 'store' = 'process'): boolean {
    const hand = from === 'store' ? this.handStore : this.handHere;
    if (hand === undefined) return false;
    if (from === 'store') this.handStore = undefined;
    else this.handHere = undefined;
    const still = this.hand;
    this.host.logger.info(still === undefined ? 'consumer resumed by hand' : `consumer resumed by hand here; it stays paused by the pause ${still.from === 'store' ? 'in the store' : 'made in this process'}`, { consumer: this.host.name, actor, from, pausedMs: Date.now() - hand.since.getTime(), breaker: this.state });
    this.host.emit('resumed', { consumer: this.host.name, by: 'hand', actor, from, pausedMs: Date.now() - hand.since.getTime() });
    if (still !== undefined) return true;
    if (this.intakeOpen) this.host.intakeChanged();
    else if (this.state !== 'closed' && !this.probing) this.scheduleProbe(this.down.size === 0 ? 0 : this.delay);
    return true;
  }

  /** Stops every timer and listener (the consumer is closing). */
  dispose(): void {
    this.disposed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    clearTimeout(this.followTimer);
    this.followTimer = undefined;
    clearTimeout(this.shareTimer);
    this.shareTimer = undefined;
    this.settings?.health?.off('check', this.onCheck);
  }

  private check(s: HealthState): void {
    const names = this.settings?.dependencies;
    if (names !== undefined && !names.includes(s.dependency)) return;
    if (s.healthy === false && s.consecutiveFailures >= s.failuresToPause) {
      if (this.down.has(s.dependency)) return;
      this.down.add(s.dependency);
      clearTimeout(this.timer);
      this.timer = undefined;
      this.nextProbeAt = undefined;
      if (this.state === 'closed') this.open({ by: 'dependency', dependency: s.dependency, reason: `the health check of '${s.dependency}' failed ${s.consecutiveFailures} times${s.lastError === undefined ? '' : `: ${s.lastError}`}` });
      else if (this.cause?.by === 'failures' || this.cause?.by === 'shared') this.cause = { by: 'dependency', dependency: s.dependency, reason: `the health check of '${s.dependency}' is failing`, since: this.cause.since };
    } else if (s.healthy === true && this.down.delete(s.dependency) && this.down.size === 0 && this.state === 'open' && !this.probing) {
      this.host.logger.info(`the health check of '${s.dependency}' passes again; probing`, { consumer: this.host.name });
      this.scheduleProbe(0);
    }
  }

  private open(cause: PauseCause): void {
    this.state = 'open';
    this.cause = { ...cause, since: new Date() };
    this.streak = 0;
    this.window = [];
    this.delay = this.settings?.probeMs ?? BREAKER_DEFAULTS.probeMs;
    this.host.logger.warn(`breaker open: ${cause.reason}; the consumer takes no messages, they wait in its queue`, { consumer: this.host.name, by: cause.by });
    this.host.emit('paused', { consumer: this.host.name, ...cause });
    this.host.intakeChanged();
    if (this.down.size === 0) this.scheduleProbe(this.delay);
    if (cause.by !== 'shared') this.tellShare('open');
  }

  /** Closes the breaker: after this process's good probe, or (`followed`) another's, read from the shared state. */
  private close(followed?: string): void {
    const cause = this.cause;
    const openMs = cause === undefined ? 0 : Date.now() - cause.since.getTime();
    this.closedOpenMs += openMs;
    this.state = 'closed';
    this.cause = undefined;
    this.nextProbeAt = undefined;
    this.delay = this.settings?.probeMs ?? BREAKER_DEFAULTS.probeMs;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.host.logger.info(`breaker closed: ${followed ?? 'a probe succeeded'}; the consumer takes messages again`, { consumer: this.host.name, openMs });
    this.host.emit('resumed', { consumer: this.host.name, by: cause?.by ?? 'failures', openMs, ...(followed === undefined ? {} : { shared: true }) });
    if (this.intakeOpen) this.host.intakeChanged();
    if (followed === undefined && this.settings?.share !== undefined) {
      this.closedHere = new Date();
      this.tellShare('close');
    }
  }

  private scheduleProbe(ms: number): void {
    clearTimeout(this.timer);
    if (this.disposed || this.state === 'closed') return;
    this.nextProbeAt = new Date(Date.now() + ms);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.nextProbeAt = undefined;
      void this.probe();
    }, ms);
    this.timer.unref();
  }

  private async probe(): Promise<void> {
    if (this.disposed || this.state === 'closed' || this.probing || this.hand !== undefined || this.down.size > 0) return;
    this.state = 'half-open';
    this.probing = true;
    let found: ProbeStart;
    try {
      found = await this.host.probe();
    } catch (error) {
      this.host.logger.warn('breaker probe could not take a message; trying again', { consumer: this.host.name, error: error instanceof Error ? error.message : String(error) });
      found = 'unavailable';
    }
    if (found === 'taken') return;
    this.probing = false;
    if (found === 'empty') {
      this.probes.empty += 1;
      this.host.emit('probe', { consumer: this.host.name, result: 'empty' });
    }
    if (this.state === 'half-open') this.state = 'open';
    this.scheduleProbe(this.delay);
  }
}
