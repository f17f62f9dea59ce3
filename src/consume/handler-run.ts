/**
 * One run of a handler: its context, abort signal and clock, and what a caught error
 * says happened. Shared by the consumer and `warren/testing`, so both time out and
 * report failures the same way.
 */
import type * as amqp from 'amqplib';
import { HandlerTimeoutError, StoreUnavailableError } from '../errors.js';
import type { Happening } from './contract.js';
import { PayloadRefused } from './payload.js';
import type { DeliveryContext } from './context.js';
import type { Handler, MessageContext } from './types.js';

/**
 * One handler run: the context the handler sees, its abort signal and its timer, in
 * one object (this is made once per message; closures per message cost throughput).
 * The AbortController is made when `signal` is first read: most handlers never read
 * it; an abort before the first read is kept.
 */
export class HandlerRun<Tx> implements DeliveryContext {
  private controller: AbortController | undefined;
  private abortReason: unknown;
  private aborted = false;
  /** The run's own timer, when no {@link HandlerClock} keeps its time. */
  timer: NodeJS.Timeout | undefined;
  timedOut: ((error: Error) => void) | undefined;
  /** performance.now() at which a {@link HandlerClock} expires the run; 0 while it is not armed. */
  deadline = 0;
  /** The run's place in its {@link HandlerClock}, -1 when it has none. */
  slot = -1;

  constructor(
    readonly messageId: string | undefined,
    readonly routingKey: string,
    readonly headers: Readonly<Record<string, unknown>>,
    readonly attempt: number,
    readonly raw: amqp.ConsumeMessage,
    public tx: Tx,
  ) {}

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  /** True once the run was aborted: it timed out, or its consumer gave it up at a shutdown. */
  get isAborted(): boolean {
    return this.aborted;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }
}

/** Default of the consumer's `commitTimeoutMs`. */
export const DEFAULT_COMMIT_TIMEOUT_MS = 30_000;

type Expire = (run: HandlerRun<unknown>, consumer: string, ms: number) => void;

function expireRun(run: HandlerRun<unknown>, consumer: string, timeoutMs: number): void {
  const error = new HandlerTimeoutError(consumer, timeoutMs);
  run.abort(error);
  run.timedOut?.(error);
}

/**
 * A COMMIT that did not answer within `commitTimeoutMs`: whether it committed is not
 * known, so it is a database outage for this delivery (the first retry tier, no attempt
 * counted), never a failure of the work. The transaction is left to finish: its copy
 * finds the marker (a duplicate) or, if it rolled back, does the work.
 */
function expireCommit(run: HandlerRun<unknown>, consumer: string, commitTimeoutMs: number): void {
  run.timedOut?.(
    new StoreOutage(
      new StoreUnavailableError(
        `the COMMIT of a guarded handler of consumer '${consumer}' (message ${run.messageId ?? '(no id)'}) did not answer within commitTimeoutMs (${commitTimeoutMs} ms), so whether its work committed is not known; the message goes round the first retry tier without counting an attempt, and its idempotency marker tells on its return`,
      ),
    ),
  );
}

/**
 * Starts a run's clock. It starts when the handler starts: time spent waiting for the
 * database (an outage, or another transaction holding SQLite) is the guard's to bound,
 * and must not be counted as a failed attempt.
 */
function arm(run: HandlerRun<never>, timeoutMs: number, consumer: string, clock: HandlerClock | undefined): void {
  if (clock !== undefined) clock.arm(run);
  else if (run.timer === undefined) run.timer = setTimeout(expireRun, timeoutMs, run, consumer, timeoutMs);
}

/**
 * The handler returned: its clock stops, and warren's COMMIT gets `commitTimeoutMs` of its
 * own. A slow COMMIT of work that is done is not the handler running late.
 */
function armCommit(run: HandlerRun<never>, commitTimeoutMs: number, consumer: string, clock: HandlerClock | undefined): void {
  if (clock !== undefined) {
    clock.disarm(run);
    clock.commits.arm(run);
  } else {
    clearTimeout(run.timer);
    run.timer = setTimeout(expireCommit, commitTimeoutMs, run, consumer, commitTimeoutMs);
  }
}

/**
 * The clock of every run of one consumer: one timer for all of them, where a timer per
 * run would be made and cleared for every message. Runs get the same `timeoutMs` and
 * start in order, so their deadlines come in the order they are armed: the timer waits
 * for the earliest deadline still armed, then expires what is due and waits for the
 * next. A run that settles only leaves its slot; the timer that was waiting for it finds
 * nothing due and moves on to the next deadline, so with messages flowing it fires
 * about once per `timeoutMs`. The timer does not hold the process open (the connection
 * does while the consumer runs).
 */
export class HandlerClock {
  /** Armed runs, in slots a settled run frees (no Set: a Set rebuilds its table as runs come and go). */
  private readonly runs: (HandlerRun<never> | undefined)[] = [];
  private readonly free: number[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly sweep = (): void => this.expireDue();
  private commitClock: HandlerClock | undefined;

  constructor(
    private readonly timeoutMs: number,
    private readonly consumer: string,
    /** The time a guarded handler's COMMIT may take once the handler returned. */
    private readonly commitTimeoutMs = DEFAULT_COMMIT_TIMEOUT_MS,
    private readonly expire: Expire = expireRun,
  ) {}

  /** The clock of the COMMITs of guarded runs whose handler returned (made at the first). */
  get commits(): HandlerClock {
    this.commitClock ??= new HandlerClock(this.commitTimeoutMs, this.consumer, this.commitTimeoutMs, expireCommit);
    return this.commitClock;
  }

  /** Starts `run`'s clock (once: a run armed already keeps its deadline). */
  arm(run: HandlerRun<never>): void {
    if (run.slot >= 0) return;
    run.deadline = performance.now() + this.timeoutMs;
    const slot = this.free.length > 0 ? (this.free.pop() as number) : this.runs.length;
    this.runs[slot] = run;
    run.slot = slot;
    // A later run's deadline is never earlier than the one the timer waits for.
    if (this.timer === undefined) this.wait(this.timeoutMs);
  }

  /** Stops `run`'s clock (this one's, or its commit clock's). */
  disarm(run: HandlerRun<never>): void {
    const slot = run.slot;
    if (slot < 0) return;
    if (this.runs[slot] !== run) {
      this.commitClock?.disarm(run);
      return;
    }
    this.runs[slot] = undefined;
    this.free.push(slot);
    run.slot = -1;
  }

  /** Stops the timer; runs still armed are not expired. */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.commitClock?.stop();
  }

  private wait(ms: number): void {
    this.timer = setTimeout(this.sweep, Math.max(1, Math.ceil(ms)));
    this.timer.unref();
  }

  private expireDue(): void {
    this.timer = undefined;
    // A timer may fire a little before the deadline it was set for, by the clocks' rounding.
    const now = performance.now() + 1;
    let next = Infinity;
    for (const run of this.runs) {
      if (run === undefined) continue;
      if (run.deadline <= now) {
        this.disarm(run);
        this.expire(run, this.consumer, this.timeoutMs);
      } else if (run.deadline < next) next = run.deadline;
    }
    if (next !== Infinity) this.wait(next - performance.now());
  }
}

/** Runs a guarded handler's work in the guard's transaction; rejects with {@link DuplicateDelivery} or {@link StoreOutage} for those. */
export type GuardRunner<Tx> = (work: (tx: Tx) => Promise<void>, signal: AbortSignal) => Promise<void>;

/**
 * Runs `handler` once within `timeoutMs`: resolves when it resolves, rejects with what it
 * throws, or with a {@link HandlerTimeoutError} at the deadline (its signal aborted;
 * a handler that never settles is left behind). With `guard`, the handler runs in the
 * guard's transaction: its clock starts when the transaction has begun and stops when the
 * handler returns; the COMMIT then has `commitTimeoutMs` (past it, a {@link StoreOutage}:
 * whether the work committed is not known). With `clock`, the consumer's
 * {@link HandlerClock} keeps the time instead of a timer of the run's own.
 */
export async function runHandler<T, Tx>(
  handler: Handler<T, Tx>,
  payload: T,
  run: HandlerRun<Tx>,
  timeoutMs: number,
  consumer: string,
  guard?: GuardRunner<Tx>,
  clock?: HandlerClock,
  commitTimeoutMs = DEFAULT_COMMIT_TIMEOUT_MS,
): Promise<void> {
  // With a guard the run carries its `tx`; without one, `tx` stays undefined and the
  // handler's type has none.
  const context = run as unknown as MessageContext<Tx>;
  try {
    let work: unknown;
    if (guard) {
      work = guard(async (tx) => {
        run.tx = tx;
        arm(run as HandlerRun<never>, timeoutMs, consumer, clock);
        await handler(payload, context);
        if (!run.isAborted) armCommit(run as HandlerRun<never>, commitTimeoutMs, consumer, clock);
      }, run.signal);
    } else {
      arm(run as HandlerRun<never>, timeoutMs, consumer, clock);
      // A synchronous throw is caught below, as a rejection would be.
      work = handler(payload, context);
    }
    // One promise for "the work settled or the time ran out" (not a race of two):
    // this runs once per message. After a timeout the work may still settle; its
    // late rejection lands in `reject` of a settled promise and is not news.
    await new Promise<void>((resolve, reject) => {
      run.timedOut = reject;
      if (isThenable(work)) work.then(resolve, reject);
      else resolve();
    });
  } finally {
    if (clock !== undefined) clock.disarm(run as HandlerRun<never>);
    else clearTimeout(run.timer);
  }
}

function isThenable(value: unknown): value is PromiseLike<void> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

/** The guard found the message's marker: the work was done before. */
export class DuplicateDelivery extends Error {}

/** The guard could not reach the database for as long as the message may be held. */
export class StoreOutage extends Error {
  constructor(override readonly cause: unknown) {
    super('store outage');
  }
}

/**
 * The thrown value, or a stand-in when it cannot even be inspected (a Proxy whose traps
 * throw): the failure path asks what it is, and must get an answer.
 */
function inspectable(thrown: unknown): unknown {
  try {
    void (thrown instanceof Error);
    if (typeof thrown === 'object' && thrown !== null) void (thrown as { code?: unknown }).code;
    return thrown;
  } catch {
    return new Error('The handler threw a value that cannot be inspected (reading it throws, e.g. a Proxy whose traps throw)');
  }
}

/** What a value caught from decoding or the handler says happened, for `decide`. */
export function happening(thrown: unknown): Happening {
  const caught = inspectable(thrown);
  if (caught instanceof PayloadRefused) return { kind: 'invalid', reason: caught.reason, error: caught.error };
  if (caught instanceof DuplicateDelivery) return { kind: 'duplicate' };
  if (caught instanceof StoreOutage) return { kind: 'store-unavailable', error: caught.cause };
  if (caught instanceof HandlerTimeoutError) return { kind: 'timed-out', error: caught };
  return { kind: 'threw', error: caught };
}
