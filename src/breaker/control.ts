/**
 * Hand pauses kept where every process of a consumer sees them: a row per consumer in the
 * store (`<prefix>consumer_control`), written by `warren consumer pause`, the console or
 * `store.control.pause()`, and read by each running consumer at a short interval. A
 * consumer in another process, or behind another warren, follows the row: paused, it takes
 * no messages; resumed, it takes them again. The breaker never lifts such a pause.
 */
import { InvalidOptionError } from '../errors.js';

/** A consumer's hand pause as kept in the store. */
export interface ConsumerPauseRow {
  readonly consumer: string;
  /** True while the pause is in force; false once resumed (the row stays, saying who resumed). */
  readonly paused: boolean;
  /** Why it was paused. */
  readonly reason: string;
  /** Who paused it. */
  readonly actor: string;
  /** When it was paused. */
  readonly since: Date;
  /** Who resumed it, once resumed. */
  readonly resumedBy: string | undefined;
  /** When it was resumed, once resumed. */
  readonly resumedAt: Date | undefined;
}

/** Where hand pauses are kept for every process to follow: a store's `store.control`. */
export interface ConsumerControl {
  /**
   * Pauses `consumer` in every process that follows this control. Resolves false when it
   * was paused already (the first reason and actor stay).
   */
  pause(consumer: string, reason: string, actor: string): Promise<boolean>;
  /** Lifts the pause; resolves false when there was none. */
  resume(consumer: string, actor: string): Promise<boolean>;
  /** The rows of every consumer (or of `consumer`), paused ones and resumed ones, by name. */
  read(consumer?: string): Promise<ConsumerPauseRow[]>;
}

/** The consumer's `control` option in full. */
export interface ControlOptions {
  /** Where the pauses are kept: `store.control`. */
  source: ConsumerControl;
  /**
   * How often the consumer reads its row. A pause reaches it within about this long.
   * @default 1000
   */
  intervalMs?: number;
}

/** The control option, checked. */
export interface ControlSettings {
  readonly source: ConsumerControl;
  readonly intervalMs: number;
}

/** The defaults, in one place (docs/breaker.md lists them). */
export const CONTROL_DEFAULTS = Object.freeze({ intervalMs: 1000 });

function isControl(v: unknown): v is ConsumerControl {
  const c = v as Partial<ConsumerControl> | null;
  return typeof c === 'object' && c !== null && typeof c.read === 'function' && typeof c.pause === 'function' && typeof c.resume === 'function';
}

/** Checks a consumer's `control` option once; `undefined` when there is none. */
export function controlSettings(given: ConsumerControl | ControlOptions | undefined): ControlSettings | undefined {
  if (given === undefined) return undefined;
  if (isControl(given)) return Object.freeze({ source: given, intervalMs: CONTROL_DEFAULTS.intervalMs });
  const o = given as Partial<ControlOptions> | null;
  if (typeof o !== 'object' || o === null || !isControl(o.source)) {
    throw new InvalidOptionError('control', 'expected a store\'s control (store.control) or { source: store.control, intervalMs }');
  }
  const ms = o.intervalMs ?? CONTROL_DEFAULTS.intervalMs;
  if (typeof ms !== 'number' || !Number.isInteger(ms) || ms < 10 || ms > 600_000) throw new InvalidOptionError('control.intervalMs', `${JSON.stringify(ms)} is not a whole number of ms from 10 to 600000`);
  return Object.freeze({ source: o.source, intervalMs: ms });
}

/** Checks a pause's reason: 1 to 500 characters. */
export function checkReason(reason: unknown): string {
  if (typeof reason !== 'string' || reason.trim() === '' || reason.length > 500) {
    throw new InvalidOptionError('reason', `${JSON.stringify(reason)} is not a reason of 1 to 500 characters`, 'Say why, e.g. "carrier maintenance until 14:00".');
  }
  return reason;
}

/** Checks a consumer name given to the control: 1 to 200 characters. */
export function checkConsumerName(consumer: unknown): string {
  if (typeof consumer !== 'string' || consumer.trim() === '' || consumer.length > 200) throw new InvalidOptionError('consumer', `${JSON.stringify(consumer)} is not a consumer name of 1 to 200 characters`);
  return consumer;
}
