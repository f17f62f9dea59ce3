/**
 * The consumer's third destination: "wait for a condition". A handler throws
 * {@link WaitForConditionError}, or a consumer's policy maps chosen errors to a
 * dependency; the message becomes a retry-table row. Deciding where it waits is pure.
 */
import { InvalidOptionError, WarrenError } from '../errors.js';
import type { MessageContext } from '../consume/context.js';
import type { RetryRowInput } from './types.js';

/** Where a consumer stores the messages that wait: `store.retryTable`. */
export interface RetryTableSink {
  /** Stores one waiting message; its id, and whether a pause in force already covers it. */
  insert(row: RetryRowInput): Promise<{ readonly id: string; readonly paused: boolean }>;
  /** Makes a dependency known, so that pausing it is no typo. */
  nameDependency(dependency: string): void;
}

/** How long a row waits when neither the error nor the rule says. */
export const DEFAULT_WAIT_MS = 60_000;
/** Times a message may go to the table before it is parked. */
export const DEFAULT_WAIT_ATTEMPTS = 20;

/** Options of {@link WaitForConditionError}. */
export interface WaitOptions {
  /** Tenant the message belongs to, so an operator can hold one tenant's rows. */
  tenant?: string;
  /**
   * Earliest next attempt. `null`: none; the row waits until an operator sets one, or
   * until the dependency's health check, having paused it, resumes it. A time in the
   * past means now.
   * @default now + the policy's `delayMs`
   */
  retryAt?: Date | null;
  /** Next attempt this many ms from now (instead of `retryAt`). */
  delayMs?: number;
  /** The failure behind the wait; its class and message are what the row records. */
  cause?: unknown;
}

/**
 * Thrown by a handler: "this message cannot succeed until `dependency` is back (or a
 * person releases it)". The consumer stores it as a retry-table row and acks the
 * original once the row is committed; the scheduler sends it back later.
 *
 * @example
 * const res = await fetch(carrierUrl);
 * if (res.status === 503) throw new WaitForConditionError('carrier', { tenant: order.tenantId, cause: new Error('carrier answered 503') });
 */
export class WaitForConditionError extends WarrenError {
  readonly dependency: string;
  readonly tenant: string | undefined;
  /** `undefined`: the policy's delay; `null`: no next attempt until someone sets one. */
  readonly retryAt: Date | null | undefined;
  readonly delayMs: number | undefined;

  constructor(dependency: string, options: WaitOptions = {}) {
    const why = options.cause instanceof Error ? `: ${options.cause.message}` : '';
    super('WAIT_FOR_CONDITION', `Waiting for '${dependency}'${options.tenant === undefined ? '' : ` (tenant ${options.tenant})`}${why}`, options.cause === undefined ? undefined : { cause: options.cause });
    checkName(dependency, 'dependency');
    if (options.tenant !== undefined) checkName(options.tenant, 'tenant');
    if (options.retryAt !== undefined && options.retryAt !== null && (!(options.retryAt instanceof Date) || Number.isNaN(options.retryAt.getTime()))) {
      throw new InvalidOptionError('retryAt', 'expected a valid Date, or null for no next attempt');
    }
    if (options.delayMs !== undefined) checkDelay(options.delayMs, 'delayMs');
    this.dependency = dependency;
    this.tenant = options.tenant;
    this.retryAt = options.retryAt;
    this.delayMs = options.delayMs;
  }
}

/** Type guard for {@link WaitForConditionError}, also across copies of the package. */
export function isWaitForCondition(error: unknown): error is WaitForConditionError {
  return error instanceof WaitForConditionError || (error instanceof WarrenError && error.code === 'WAIT_FOR_CONDITION');
}

/** An error class, matched with `instanceof`: the class itself or any subclass. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any error class
export type ErrorClass = abstract new (...args: any[]) => Error;

/** Sends errors a handler throws to the retry table without the handler knowing. */
export interface WaitRule<T = unknown> {
  /** The errors this rule takes: an error class (`instanceof`), or a test. */
  readonly when: ErrorClass | ((error: unknown) => boolean);
  /** The dependency rows wait for. */
  readonly dependency: string;
  /** The tenant of a row, from the payload. */
  readonly tenant?: (payload: T, context: MessageContext<unknown>) => string | undefined;
  /**
   * Delay before the next attempt; `null`: no next attempt until someone sets one.
   * @default the policy's `delayMs`
   */
  readonly delayMs?: number | null;
}

/** A consumer's `retryTable` option: where waiting messages go, and which errors wait. */
export interface RetryTablePolicy<T = unknown> {
  /** The table: `store.retryTable`. */
  readonly table: RetryTableSink;
  /** Errors sent to the table besides {@link WaitForConditionError}; the first that matches wins. */
  readonly rules?: readonly WaitRule<T>[];
  /**
   * Delay before the next attempt when neither the error nor the rule gives one; `null`
   * makes every row wait for a health check or an operator.
   * @default 60000
   */
  readonly delayMs?: number | null;
  /**
   * Times a message may go to the table; the next time it is parked instead, with its
   * failure (reason `max-attempts`).
   * @default 20
   */
  readonly maxAttempts?: number;
  /** The tenant of rows whose error does not name one, from the payload. */
  readonly tenant?: (payload: T, context: MessageContext<unknown>) => string | undefined;
}

/** Where a failed message waits. */
export interface WaitDecision {
  readonly dependency: string;
  readonly tenant: string | null;
  readonly nextAttemptAt: Date | null;
}

function checkName(value: unknown, option: string): void {
  if (typeof value !== 'string' || value.length === 0 || value.length > 255) throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a name of 1 to 255 characters`);
}

function checkDelay(value: unknown, option: string): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a delay in ms (0 or more)`);
}

/** Validates a policy once, when the consumer is made. */
export function checkPolicy<T>(policy: RetryTablePolicy<T>): void {
  if (typeof policy !== 'object' || policy === null) throw new InvalidOptionError('retryTable', 'expected { table: store.retryTable, rules?: [...] }');
  if (typeof (policy.table as { insert?: unknown } | undefined)?.insert !== 'function') throw new InvalidOptionError('retryTable.table', 'expected a retry table, such as `store.retryTable`');
  if (policy.delayMs !== undefined && policy.delayMs !== null) checkDelay(policy.delayMs, 'retryTable.delayMs');
  const max = policy.maxAttempts ?? DEFAULT_WAIT_ATTEMPTS;
  if (!Number.isInteger(max) || max < 1 || max > 1_000_000) throw new InvalidOptionError('retryTable.maxAttempts', `${JSON.stringify(max)} is not a whole number from 1 to 1000000`);
  if (policy.tenant !== undefined && typeof policy.tenant !== 'function') throw new InvalidOptionError('retryTable.tenant', 'expected a function (payload, context) => string | undefined');
  if (policy.rules !== undefined && !Array.isArray(policy.rules)) throw new InvalidOptionError('retryTable.rules', 'expected a list of { when, dependency }');
  policy.rules?.forEach((rule, i) => {
    if (typeof rule?.when !== 'function') throw new InvalidOptionError(`retryTable.rules[${i}].when`, 'expected an error class or a function (error) => boolean');
    checkName(rule.dependency, `retryTable.rules[${i}].dependency`);
    if (rule.tenant !== undefined && typeof rule.tenant !== 'function') throw new InvalidOptionError(`retryTable.rules[${i}].tenant`, 'expected a function (payload, context) => string | undefined');
    if (rule.delayMs !== undefined && rule.delayMs !== null) checkDelay(rule.delayMs, `retryTable.rules[${i}].delayMs`);
  });
}

function matches(rule: WaitRule<never>, error: unknown): boolean {
  const when = rule.when as ErrorClass & ((error: unknown) => boolean);
  // A class (its prototype is an Error's) is matched with instanceof; anything else is a test.
  if (typeof when.prototype === 'object' && when.prototype instanceof Error) return error instanceof when;
  if (when === (Error as unknown)) return error instanceof Error;
  return when(error) === true;
}

/**
 * Where `error` makes the message wait, or undefined when it is not a wait (the ladder
 * takes it). `payload` and `context` feed the tenant functions; a time in the past
 * becomes `now`.
 */
export function decideWait<T>(error: unknown, policy: RetryTablePolicy<T> | undefined, payload: T, context: MessageContext<unknown>, now: Date): WaitDecision | undefined {
  const delayAt = (ms: number | null | undefined): Date | null => {
    if (ms === null) return null;
    return new Date(now.getTime() + (ms ?? policy?.delayMs ?? DEFAULT_WAIT_MS));
  };
  const policyDelay = policy?.delayMs === undefined ? DEFAULT_WAIT_MS : policy.delayMs;
  const tenantOf = (fn: ((payload: T, context: MessageContext<unknown>) => string | undefined) | undefined): string | null => {
    const t = fn?.(payload, context);
    return typeof t === 'string' && t.length > 0 ? t : null;
  };
  if (isWaitForCondition(error)) {
    let next: Date | null;
    if (error.delayMs !== undefined) next = new Date(now.getTime() + error.delayMs);
    else if (error.retryAt === undefined) next = delayAt(policyDelay);
    else next = error.retryAt === null ? null : new Date(Math.max(error.retryAt.getTime(), now.getTime()));
    return { dependency: error.dependency, tenant: error.tenant ?? tenantOf(policy?.tenant), nextAttemptAt: next };
  }
  for (const rule of policy?.rules ?? []) {
    if (!matches(rule as WaitRule<never>, error)) continue;
    return {
      dependency: rule.dependency,
      tenant: tenantOf(rule.tenant) ?? tenantOf(policy?.tenant),
      nextAttemptAt: delayAt(rule.delayMs === undefined ? policyDelay : rule.delayMs),
    };
  }
  return undefined;
}

/** The error the row records: the cause a wait carries, else the error itself. */
export function recordedFailure(error: unknown): unknown {
  return isWaitForCondition(error) && error.cause !== undefined ? error.cause : error;
}
