import { InvalidOptionError } from '../errors.js';

/** A delay as milliseconds, or a string such as `'50ms'`, `'5s'`, `'1m'`, `'2h'`. */
export type Duration = number | `${number}${'ms' | 's' | 'm' | 'h'}`;

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** Parses a {@link Duration} into whole milliseconds; throws naming `option` when it is not one. */
export function parseDuration(value: unknown, option: string): number {
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 1) {
      throw new InvalidOptionError(option, `${value} is not a whole number of milliseconds of at least 1`);
    }
    return value;
  }
  if (typeof value === 'string') {
    const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(value.trim());
    if (match) {
      const ms = Math.round(Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]);
      if (ms >= 1) return ms;
    }
  }
  throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a duration`, "Give milliseconds (5000) or a string such as '50ms', '5s', '1m', '2h'.");
}

/** Formats milliseconds as the shortest exact label: 50 → `50ms`, 5000 → `5s`, 600000 → `10m`. */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** The name of the retry queue of `queue` for one delay tier, e.g. `billing.retry.5s`. */
export function retryQueueName(queue: string, delayMs: number): string {
  return `${queue}.retry.${formatDuration(delayMs)}`;
}

/** The name of the parked queue of `queue`, e.g. `billing.parked`. */
export function parkedQueueName(queue: string): string {
  return `${queue}.parked`;
}

/** What to do with a message whose handler failed with a transient error. */
export type RetryDecision =
  | { readonly action: 'retry'; readonly tier: number; readonly delayMs: number; readonly attempts: number }
  | { readonly action: 'park'; readonly attempts: number };

/**
 * Chooses the next step after a transient failure.
 *
 * `failedAttempts` counts the failures before this one (0 on the first delivery).
 * Failure number n waits in tier n (1-based), the last tier repeating, until the
 * handler has run `maxAttempts` times; then the message is parked.
 */
export function decideRetry(failedAttempts: number, delaysMs: readonly number[], maxAttempts: number): RetryDecision {
  const attempts = failedAttempts + 1;
  if (attempts >= maxAttempts || delaysMs.length === 0) return { action: 'park', attempts };
  const tier = Math.min(failedAttempts, delaysMs.length - 1);
  return { action: 'retry', tier, delayMs: delaysMs[tier] as number, attempts };
}

/** What to do after a transient failure of a consumer that retries inside its queue. */
export type InQueueRetryDecision =
  | { readonly action: 'retry'; readonly delayMs: number; readonly attempts: number }
  | { readonly action: 'park'; readonly attempts: number };

/**
 * Chooses the next step after a transient failure, when the broker delays the retry in the
 * work queue (RabbitMQ 4.3's delayed retry). `failed` counts the runs before this one. The
 * reject raises the delivery count to `failed + 1`, and the broker waits `min` × that count,
 * at most `max`: a linear schedule, `min, 2·min, 3·min, …, max, max`. At `maxAttempts` runs
 * the message is parked.
 */
export function decideInQueueRetry(failed: number, retry: { readonly minMs: number; readonly maxMs: number }, maxAttempts: number): InQueueRetryDecision {
  const attempts = failed + 1;
  if (attempts >= maxAttempts) return { action: 'park', attempts };
  return { action: 'retry', delayMs: inQueueDelay(attempts, retry), attempts };
}

/** The wait of failure number `n` (1-based) in the queue: `min` × n, at most `max`. */
export function inQueueDelay(n: number, retry: { readonly minMs: number; readonly maxMs: number }): number {
  return Math.min(retry.minMs * Math.max(1, n), retry.maxMs);
}
