/**
 * The consumer contract: what warren does with a delivery, given what happened to it.
 *
 * {@link decide} is pure: the consumer calls it for every decision and applies the
 * result (ack, a confirmed move, a retry-table row, a put-back); `warren/testing` calls
 * the same function without a broker. The README's failure table is checked against it.
 */
import { WarrenError } from '../errors.js';
import { HEADER, type ParkReason } from '../headers.js';
import { decideInQueueRetry, decideRetry } from '../retry/ladder.js';
import { decideWait, DEFAULT_WAIT_ATTEMPTS, isWaitForCondition, recordedFailure, type RetryTablePolicy } from '../retry-table/wait.js';
import type { ConsumerTopology } from '../topology/declaration.js';
import { classifyFailure, type Classifier } from './classify.js';
import type { MessageContext } from './types.js';

/** What happened to a delivery, as the consumer saw it. */
export type Happening =
  /** The handler resolved (with the guard: its transaction committed). */
  | { readonly kind: 'resolved' }
  /** The idempotency guard found this message's marker: the work was done before. */
  | { readonly kind: 'duplicate' }
  /**
   * The handler threw (or rejected). A `WaitForConditionError` is the handler
   * asking to wait; `classify` and the retry table's rules decide the rest.
   */
  | { readonly kind: 'threw'; readonly error: unknown }
  /** The handler, or an asynchronous schema, ran past `timeoutMs`: a `HandlerTimeoutError`, decided as thrown. */
  | { readonly kind: 'timed-out'; readonly error: unknown }
  /** The body or payload was refused before the handler ran. */
  | { readonly kind: 'invalid'; readonly reason: InvalidReason; readonly error: unknown }
  /** The guard could not reach the database for `storeOutageHoldMs`. */
  | { readonly kind: 'store-unavailable'; readonly error: unknown }
  /**
   * The retry table did not take a row {@link decide} asked for: `outage` when the
   * database stayed unreachable for `storeOutageHoldMs`. `error` is the handler's.
   */
  | { readonly kind: 'not-stored'; readonly error: unknown; readonly outage: boolean }
  /**
   * The broker redelivered the message (`redelivered` flag): it had no outcome last
   * time. `seenInFlight`: this process saw its channel close with it unsettled (a blip
   * it lived through, not a death).
   */
  | { readonly kind: 'redelivered'; readonly seenInFlight: boolean }
  /** The consumer is closing and never started the message. */
  | { readonly kind: 'never-started' }
  /** warren's own failure path threw (a bug, or user code it did not expect to throw). */
  | { readonly kind: 'failure-path-threw'; readonly error: unknown }
  /** The headers of the copy `intended` asked for cannot be encoded (the producer's fill the 64 KiB table). */
  | { readonly kind: 'unencodable'; readonly intended: Decision }
  /** A move kept failing for 5 minutes (the broker refused or never confirmed the copy). */
  | { readonly kind: 'move-failed' };

/** Why a body or payload was refused before the handler ran. */
export type InvalidReason = 'invalid-json' | 'invalid-payload' | 'missing-message-id';

/** What the consumer does next. Every delivery ends in exactly one of these (but `run`). */
export type Decision = { readonly notes?: readonly DecisionNote[] } & (
  /** Ack the delivery. `duplicate`: the guard skipped the work. */
  | { readonly kind: 'ack'; readonly duplicate: boolean }
  /**
   * Copy the message to retry tier `tier` (queue `queue`, `delayMs` there, then back to
   * this consumer's queue), with `warren-attempts: attempts`, then ack. `counted` is false
   * for a database outage: the attempt is not held against the message.
   *
   * `inQueue` (a consumer with `retry.inQueue`): no copy; `queue` is the work queue and
   * `tier` 0. A counted retry is a reject with requeue, which raises the broker's delivery
   * count, and the broker sets the message aside for `delayMs` (`min` × that count, at most
   * `max`); an uncounted one is a nack with requeue, which the broker (4.3) neither counts
   * nor delays.
   */
  | { readonly kind: 'retry'; readonly tier: number; readonly delayMs: number; readonly queue: string; readonly attempts: number; readonly counted: boolean; readonly error: unknown; readonly inQueue?: true }
  /**
   * Copy the message to the parked queue with `warren-parked-reason: reason` and
   * `warren-attempts: attempts`, then ack. `minimal`: with warren's essential headers
   * only (the failure path itself threw).
   */
  | { readonly kind: 'park'; readonly reason: ParkReason; readonly attempts: number; readonly error: unknown; readonly minimal: boolean }
  /**
   * Store the message as a retry-table row, then ack. `waits` is its `warren-waits`;
   * `error` the failure the row records (a wait's cause, else the error); `cause` what
   * was thrown. If the row cannot be stored, decide again with `not-stored`.
   */
  | { readonly kind: 'wait'; readonly dependency: string; readonly tenant: string | null; readonly nextAttemptAt: Date | null; readonly waits: number; readonly attempts: number; readonly error: unknown; readonly cause: unknown }
  /** A redelivery that is not a crash loop (yet, on a quorum queue): run the handler. */
  | { readonly kind: 'run' }
  /**
   * A redelivery on a classic queue, under the crash limit: copy the message to the back
   * of its own queue with `warren-redeliveries: redeliveries`, then ack.
   */
  | { readonly kind: 'move-back'; readonly redeliveries: number; readonly attempts: number; readonly error: unknown }
  /**
   * Put the message back in its queue unchanged. `blip`: its redelivery is no death (a
   * confirmed copy, else a nack with requeue); otherwise a reject with requeue that the
   * crash-loop guard counts, so a message that can never be moved is not run without end
   * (every broker counts a reject in a quorum queue's `x-delivery-count`; RabbitMQ 4.3
   * counts no nack).
   */
  | { readonly kind: 'requeue'; readonly blip: boolean }
);

/** Something the consumer should log about a decision: user code that threw, a policy that is missing. */
export interface DecisionNote {
  readonly message: string;
  readonly error?: unknown;
}

/** Everything {@link decide} looks at. */
export interface DecisionInput<T = unknown> {
  readonly happened: Happening;
  /**
   * Failed handler runs before this delivery: `readAttempts(headers, retryQueues).failed`;
   * for a consumer that retries inside its queue, plus the broker's delivery count on a
   * redelivery (`readInQueueAttempts`).
   */
  readonly attempts: number;
  /** The delivery's headers (`warren-waits`, `warren-redeliveries`, `x-delivery-count` are read). */
  readonly headers: Readonly<Record<string, unknown>>;
  /** The consumer's declaration: its ladder, cap, queues, queue type and crash limit. */
  readonly consumer: ConsumerTopology;
  /** The consumer's `classify` option. */
  readonly classify?: Classifier | undefined;
  /** The consumer's `retryTable` option. */
  readonly retryTable?: RetryTablePolicy<T> | undefined;
  /** The payload and context the retry table's tenant functions are given. */
  readonly payload?: T | undefined;
  readonly context?: MessageContext<unknown> | undefined;
  /** The time a retry-table row's next attempt is counted from. @default new Date() */
  readonly now?: Date | undefined;
}

/**
 * What warren does with a delivery. Pure, but for the user's `classify` and tenant
 * functions it calls (one that throws becomes a note, and warren's own rules decide).
 *
 * | happened | decision |
 * |---|---|
 * | resolved / duplicate | ack |
 * | invalid body or payload | park (its reason), first attempt |
 * | threw, asks to wait or a `retryTable` rule matches (not permanent) | wait; park `max-attempts` past the policy's `maxAttempts` |
 * | threw, permanent (`PermanentError`, `classify`) | park `permanent-error` |
 * | threw or timed out, attempts left | retry at tier `min(attempts, tiers - 1)` |
 * | threw or timed out, `maxAttempts` runs reached | park `max-attempts` |
 * | database unreachable (guard or retry table) | retry at tier 0, attempt not counted |
 * | retry table refused the row | the ladder, attempt counted |
 * | redelivered, not seen in flight, at `crashLimit` | park `crash-loop` |
 * | redelivered on a classic queue, under it | move back with one more redelivery |
 * | retry inside the queue (`inQueue`), threw, attempts left | retry in the queue: reject with requeue, the broker waits `min` × count, at most `max` |
 * | retry inside the queue, database unreachable | nack with requeue (not counted, not delayed) |
 * | retry inside the queue, redelivered, not seen in flight, `maxAttempts` deliveries counted | park `crash-loop` |
 * | never started at shutdown | requeue (a blip) |
 * | a copy's headers cannot be encoded | park with warren's essentials (`unencodable-headers` but for a park) |
 * | a move failed for 5 minutes | requeue, counted by the crash-loop guard |
 * | warren's failure path threw | park `failure-path-error` with warren's essentials |
 */
export function decide<T>(input: DecisionInput<T>): Decision {
  const { happened, attempts: failed, consumer } = input;
  const run = failed + 1;
  switch (happened.kind) {
    case 'resolved':
      return ACK;
    case 'duplicate':
      return ACK_DUPLICATE;
    case 'invalid':
      return park(happened.reason, happened.error, run);
    case 'store-unavailable':
      return retryUncounted(consumer, happened.error, failed);
    case 'not-stored':
      return happened.outage ? retryUncounted(consumer, happened.error, failed) : ladder(consumer, happened.error, failed);
    case 'never-started':
      return { kind: 'requeue', blip: true };
    case 'move-failed':
      return { kind: 'requeue', blip: false };
    case 'failure-path-threw':
      return { kind: 'park', reason: 'failure-path-error', attempts: run, error: happened.error, minimal: true };
    case 'unencodable':
      return unencodable(happened.intended);
    case 'redelivered':
      return crashLoopGuard(input, happened.seenInFlight);
    case 'threw':
    case 'timed-out':
      return afterFailure(input, happened.error);
  }
}

/** The decisions of a handler that resolved and of a duplicate: one object each, not one per delivery. */
const ACK: Decision = Object.freeze({ kind: 'ack', duplicate: false });
const ACK_DUPLICATE: Decision = Object.freeze({ kind: 'ack', duplicate: true });

/** A copy that cannot carry its headers is parked with warren's essentials only, never tried again as it is. */
function unencodable(intended: Decision): Decision {
  const attempts = 'attempts' in intended ? intended.attempts : 0;
  const error = 'error' in intended ? intended.error : undefined;
  return { kind: 'park', reason: intended.kind === 'park' ? intended.reason : 'unencodable-headers', attempts, error, minimal: true };
}

/** A handler's failure: the retry table, parked, or the ladder. */
function afterFailure<T>(input: DecisionInput<T>, error: unknown): Decision {
  const { attempts: failed, consumer, retryTable } = input;
  const notes: DecisionNote[] = [];
  // A permanent failure parks even when a broad rule would match it; only an explicit
  // WaitForConditionError overrides the classifier.
  const asksToWait = isWaitForCondition(error);
  const permanent = !asksToWait && classify(error, input.classify, notes) === 'permanent';
  if (!permanent && (asksToWait || (retryTable?.rules?.length ?? 0) > 0)) {
    const where = waitDecision(input, error, notes);
    if (where !== undefined && retryTable !== undefined) {
      const recorded = recordedFailure(error);
      const waits = (wholeNumber(input.headers[HEADER.waits], 0) ?? 0) + 1;
      if (waits > (retryTable.maxAttempts ?? DEFAULT_WAIT_ATTEMPTS)) return withNotes(park('max-attempts', recorded, failed + 1), notes);
      return withNotes({ kind: 'wait', ...where, waits, attempts: failed, error: recorded, cause: error }, notes);
    }
  }
  if (permanent) return withNotes(park('permanent-error', error, failed + 1), notes);
  return withNotes(ladder(consumer, error, failed), notes);
}

/** The user's classifier, then warren's rules; a classifier that throws leaves the decision to warren's rules. */
function classify(error: unknown, classifier: Classifier | undefined, notes: DecisionNote[]): 'permanent' | 'transient' {
  try {
    return classifyFailure(error, classifier);
  } catch (e) {
    notes.push({ message: "the `classify` option threw; warren's own rules decide (fix the classifier: it must return for any value)", error: e });
    return classifyFailure(error);
  }
}

/** Where the retry table would keep the message, or undefined when the ladder takes it. */
function waitDecision<T>(input: DecisionInput<T>, error: unknown, notes: DecisionNote[]): { dependency: string; tenant: string | null; nextAttemptAt: Date | null } | undefined {
  const policy = input.retryTable;
  let decision;
  try {
    decision = decideWait(error, policy, input.payload as T, input.context ?? contextOf(input), input.now ?? new Date());
  } catch (e) {
    notes.push({ message: 'the retry-table policy threw (a tenant function?); the retry ladder takes the message', error: e });
    return undefined;
  }
  if (decision !== undefined && policy === undefined) {
    notes.push({ message: `the handler asked to wait for '${decision.dependency}', but this consumer has no \`retryTable\` option; the retry ladder takes the message` });
    return undefined;
  }
  return decision;
}

/** Failure number `failed + 1` climbs the ladder, or is parked at the cap. */
function ladder(consumer: ConsumerTopology, error: unknown, failed: number): Decision {
  if (consumer.inQueue !== undefined) {
    const next = decideInQueueRetry(failed, consumer.inQueue, consumer.maxAttempts);
    if (next.action === 'park') return park('max-attempts', error, next.attempts);
    return { kind: 'retry', tier: 0, delayMs: next.delayMs, queue: consumer.queue, attempts: next.attempts, counted: true, error, inQueue: true };
  }
  const next = decideRetry(failed, consumer.delaysMs, consumer.maxAttempts);
  if (next.action === 'park') return park('max-attempts', error, next.attempts);
  return { kind: 'retry', tier: next.tier, delayMs: next.delayMs, queue: consumer.retryQueues[next.tier] as string, attempts: next.attempts, counted: true, error };
}

/** The first tier, without counting an attempt: the database, not the message, failed. */
function retryUncounted(consumer: ConsumerTopology, error: unknown, failed: number): Decision {
  if (consumer.inQueue !== undefined) return { kind: 'retry', tier: 0, delayMs: 0, queue: consumer.queue, attempts: failed, counted: false, error, inQueue: true };
  return { kind: 'retry', tier: 0, delayMs: consumer.delaysMs[0] ?? 0, queue: consumer.retryQueues[0] as string, attempts: failed, counted: false, error };
}

/**
 * A redelivered message had no outcome last time: the process died on it, or the
 * channel closed. Quorum queues count deliveries themselves (`x-delivery-count`: on
 * RabbitMQ 3.10 and 4.0 every return, on 4.3 a reject or a consumer that went away but
 * not a nack; never `x-acquired-count`, which on 4.3 counts every delivery, a walk's or
 * a shutdown's included); on a classic queue warren counts them in `warren-redeliveries`,
 * moving the message to the back of its queue each time. The type is the declared one,
 * which is the queue's own: every queue is declared with its `x-queue-type`.
 */
function crashLoopGuard<T>(input: DecisionInput<T>, seenInFlight: boolean): Decision {
  if (seenInFlight) return { kind: 'run' };
  const { consumer, headers, attempts: failed } = input;
  if (consumer.inQueue !== undefined) {
    // The broker's count is the attempts (see readInQueueAttempts): a failure and a death
    // raise it alike. warren parks the failed run at maxAttempts itself, so a delivery
    // counted maxAttempts times had a run that reached no outcome: the process died on it.
    return failed >= consumer.maxAttempts ? park('crash-loop', new CrashLoopError(consumer.name, failed + 1, true), failed) : { kind: 'run' };
  }
  if (consumer.queueType === 'quorum') {
    const count = wholeNumber(headers['x-delivery-count'], 0) ?? 1;
    return count >= consumer.crashLimit ? park('crash-loop', new CrashLoopError(consumer.name, count + 1), failed + 1) : { kind: 'run' };
  }
  const redeliveries = (wholeNumber(headers[HEADER.redeliveries], 0) ?? 0) + 1;
  const error = new CrashLoopError(consumer.name, redeliveries + 1);
  if (redeliveries >= consumer.crashLimit) return park('crash-loop', error, failed + 1);
  return { kind: 'move-back', redeliveries, attempts: failed, error };
}

function park(reason: ParkReason, error: unknown, attempts: number): Decision {
  return { kind: 'park', reason, attempts, error, minimal: false };
}

function withNotes(decision: Decision, notes: DecisionNote[]): Decision {
  return notes.length === 0 ? decision : { ...decision, notes };
}

/** The context a tenant function gets when the caller gave none. */
function contextOf<T>(input: DecisionInput<T>): MessageContext<unknown> {
  const key = input.headers[HEADER.routingKey];
  return {
    messageId: undefined,
    routingKey: typeof key === 'string' ? key : '',
    headers: input.headers,
    attempt: input.attempts + 1,
    tx: undefined,
    signal: AbortSignal.abort(),
    raw: undefined as never,
  };
}

/** A header's value as a whole number at least `min`, or undefined: forged headers can hold anything. */
export function wholeNumber(value: unknown, min: number): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'bigint' ? Number(value) : typeof value === 'string' && /^\s*-?\d{1,16}\s*$/.test(value) ? Number(value) : NaN;
  return Number.isSafeInteger(n) && n >= min ? n : undefined;
}

/** A message that made the process die this many times is parked, not run again. */
export class CrashLoopError extends WarrenError {
  /** `inQueue`: the consumer retries inside its queue, where the broker counts failed runs and deaths in one number. */
  constructor(consumer: string, deliveries: number, inQueue = false) {
    super(
      'PERMANENT',
      inQueue
        ? `Consumer '${consumer}' was delivered this message ${deliveries} times, its attempts spent, and the last run reached no outcome (the process died or the channel closed while handling it); parked to stop the crash loop.`
        : `Consumer '${consumer}' was delivered this message ${deliveries} times without reaching an outcome (the process died or the channel closed while handling it); parked to stop the crash loop.`,
    );
  }
}
