/**
 * One run of a handler: its context, abort signal and clock, and what a caught error
 * says happened. Shared by the consumer and `warren/testing`, so both time out and
 * report failures the same way.
 */
import type * as amqp from 'amqplib';
import { HandlerTimeoutError } from '../errors.js';
import type { Happening } from './contract.js';
import { PayloadRefused } from './payload.js';
import type { Handler, MessageContext } from './types.js';

/**
 * One handler run: the context the handler sees, its abort signal and its timer, in
 * one object (this is made once per message; closures per message cost throughput).
 * The AbortController is made when `signal` is first read: most handlers never read
 * it; an abort before the first read is kept.
 */
export class HandlerRun<Tx> implements MessageContext<Tx> {
  private controller: AbortController | undefined;
  private abortReason: unknown;
  private aborted = false;
  timer: NodeJS.Timeout | undefined;
  timedOut: ((error: Error) => void) | undefined;

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

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }
}

function expireRun(run: HandlerRun<unknown>, consumer: string, timeoutMs: number): void {
  const error = new HandlerTimeoutError(consumer, timeoutMs);
  run.abort(error);
  run.timedOut?.(error);
}

/**
 * Starts a run's clock. It starts when the handler starts: time spent waiting for the
 * database (an outage, or another transaction holding SQLite) is the guard's to bound,
 * and must not be counted as a failed attempt.
 */
function arm(run: HandlerRun<never>, timeoutMs: number, consumer: string): void {
  if (run.timer === undefined) run.timer = setTimeout(expireRun, timeoutMs, run, consumer, timeoutMs);
}

/** Runs a guarded handler's work in the guard's transaction; rejects with {@link DuplicateDelivery} or {@link StoreOutage} for those. */
export type GuardRunner<Tx> = (work: (tx: Tx) => Promise<void>, signal: AbortSignal) => Promise<void>;

/**
 * Runs `handler` once within `timeoutMs`: resolves when it resolves, rejects with what it
 * throws, or with a {@link HandlerTimeoutError} at the deadline (its signal aborted;
 * a handler that never settles is left behind). With `guard`, the handler runs in the
 * guard's transaction and its clock starts when the transaction has begun.
 */
export async function runHandler<T, Tx>(handler: Handler<T, Tx>, payload: T, run: HandlerRun<Tx>, timeoutMs: number, consumer: string, guard?: GuardRunner<Tx>): Promise<void> {
  try {
    let work: Promise<void>;
    if (guard) {
      work = guard(async (tx) => {
        run.tx = tx;
        arm(run as HandlerRun<never>, timeoutMs, consumer);
        await handler(payload, run);
      }, run.signal);
    } else {
      arm(run as HandlerRun<never>, timeoutMs, consumer);
      work = callHandler(handler, payload, run);
    }
    // One promise for "the work settled or the time ran out" (not a race of two):
    // this runs once per message. After a timeout the work may still settle; its
    // late rejection lands in `reject` of a settled promise and is not news.
    await new Promise<void>((resolve, reject) => {
      run.timedOut = reject;
      work.then(resolve, reject);
    });
  } finally {
    clearTimeout(run.timer);
  }
}

/** Runs the handler; a synchronous throw becomes a rejection. */
async function callHandler<T, Tx>(handler: Handler<T, Tx>, payload: T, context: MessageContext<Tx>): Promise<void> {
  await handler(payload, context);
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
