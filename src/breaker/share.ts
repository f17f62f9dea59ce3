/**
 * A breaker's state shared through the store (`<prefix>breaker_state`, `store.breakers`):
 * when one process's breaker opens for a consumer, every process of that consumer given
 * `breaker: { share: store.breakers }` stops taking messages too, and when one of them
 * sees a probe succeed, every one consumes again. Each still probes on its own schedule.
 */
import { InvalidOptionError } from '../errors.js';

/** A consumer's shared breaker, as kept in the store. */
export interface BreakerStateRow {
  readonly consumer: string;
  /** True while some process says the consumer's dependency is down. */
  readonly open: boolean;
  /** Why it opened (the opening process's cause). */
  readonly reason: string;
  /** When it opened (the opening process's own time of opening). */
  readonly since: Date;
  /** Which process opened it: `host:pid`. */
  readonly openedBy: string;
  /** When it was closed (a probe succeeded), once closed. */
  readonly closedAt: Date | undefined;
  /** Which process closed it, once closed. */
  readonly closedBy: string | undefined;
}

/** Where breakers share their state: a store's `store.breakers`. */
export interface BreakerShare {
  /**
   * Says the consumer's breaker opened at `since`. Resolves false when it was open already,
   * or when it was closed after `since` (an opening older than the last close is stale).
   */
  open(consumer: string, reason: string, by: string, since: Date): Promise<boolean>;
  /** Says a probe succeeded: the breaker is closed for every process. Resolves false when it was not open. */
  close(consumer: string, by: string): Promise<boolean>;
  /** The rows of every consumer (or of `consumer`), by name. */
  read(consumer?: string): Promise<BreakerStateRow[]>;
}

/** The defaults, in one place (docs/breaker.md lists them). */
export const SHARE_DEFAULTS = Object.freeze({ intervalMs: 1000 });

/** True for something shaped like a {@link BreakerShare}. */
export function isBreakerShare(v: unknown): v is BreakerShare {
  const s = v as Partial<BreakerShare> | null;
  return typeof s === 'object' && s !== null && typeof s.open === 'function' && typeof s.close === 'function' && typeof s.read === 'function';
}

/** Checks the `breaker.share` option; `undefined` when there is none. */
export function checkShare(given: unknown): BreakerShare | undefined {
  if (given === undefined) return undefined;
  if (!isBreakerShare(given)) throw new InvalidOptionError('breaker.share', 'expected a store\'s breakers (store.breakers)');
  return given;
}

/** A reason cut to what the table keeps: 500 characters. */
export function shareReason(reason: string): string {
  return reason.length > 500 ? `${reason.slice(0, 499)}…` : reason;
}
