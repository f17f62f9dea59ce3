import { InvalidOptionError } from '../errors.js';
import { toLogger, type Logger } from '../logger.js';
import type { StoreOptions } from './types.js';

/** Defaults of {@link StoreOptions}, in one place. */
export const STORE_DEFAULTS = {
  tablePrefix: 'warren_',
  migrate: true,
  retentionMs: 7 * 24 * 60 * 60 * 1000,
  auditRetentionMs: 90 * 24 * 60 * 60 * 1000,
  pruneIntervalMs: 60 * 60 * 1000,
  pruneBatchSize: 500,
} as const;

/** {@link StoreOptions} after validation and defaults. */
export interface ResolvedStoreOptions {
  readonly tablePrefix: string;
  readonly migrate: boolean;
  readonly retentionMs: number;
  readonly auditRetentionMs: number;
  readonly pruneIntervalMs: number;
  readonly pruneBatchSize: number;
  readonly logger: Logger;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,39}$/;

/** Checks an SQL identifier part (prefix, schema) so it can be quoted safely. */
export function checkIdentifier(value: unknown, option: string, allowEmpty = false): string {
  if (allowEmpty && value === '') return '';
  if (typeof value !== 'string' || !IDENTIFIER.test(value)) {
    throw new InvalidOptionError(option, `${JSON.stringify(value)} is not usable in a table name`, 'Use 1-40 letters, digits and _, starting with a letter or _.');
  }
  return value;
}

/** A whole number in a range, or the fallback when undefined. */
export function checkInt(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number from ${min} to ${max}`);
  }
  return v;
}

/** Validates the options every store takes, once, and freezes them. */
export function resolveStoreOptions(options: StoreOptions): ResolvedStoreOptions {
  if (options.migrate !== undefined && typeof options.migrate !== 'boolean') throw new InvalidOptionError('migrate', 'expected true or false');
  return Object.freeze({
    tablePrefix: checkIdentifier(options.tablePrefix ?? STORE_DEFAULTS.tablePrefix, 'tablePrefix', true),
    migrate: options.migrate ?? STORE_DEFAULTS.migrate,
    retentionMs: checkInt(options.retentionMs, STORE_DEFAULTS.retentionMs, 'retentionMs', 0, Number.MAX_SAFE_INTEGER),
    auditRetentionMs: checkInt(options.auditRetentionMs, STORE_DEFAULTS.auditRetentionMs, 'auditRetentionMs', 0, Number.MAX_SAFE_INTEGER),
    pruneIntervalMs: checkInt(options.pruneIntervalMs, STORE_DEFAULTS.pruneIntervalMs, 'pruneIntervalMs', 0, 2 ** 31 - 1),
    pruneBatchSize: checkInt(options.pruneBatchSize, STORE_DEFAULTS.pruneBatchSize, 'pruneBatchSize', 1, 100_000),
    logger: toLogger(options.logger),
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
