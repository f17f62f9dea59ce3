/**
 * Checking an operator's filter once, and turning it into SQL for either backend.
 * Pure: the backends pass how they write a parameter, a time and a list of ids.
 */
import { InvalidOptionError } from '../errors.js';
import type { RetryFilter, RetryHold } from './types.js';

const TEXT_FIELDS = ['consumer', 'dependency', 'tenant', 'errorClass'] as const;
const KNOWN = new Set<string>(['ids', ...TEXT_FIELDS, 'paused', 'due']);

/** Validates a filter (unknown fields, wrong types, ids that are not row ids) and freezes a copy. */
export function checkFilter(filter: RetryFilter | undefined, option = 'filter'): RetryFilter {
  if (filter === undefined) return Object.freeze({});
  if (typeof filter !== 'object' || filter === null || Array.isArray(filter)) throw new InvalidOptionError(option, 'expected an object such as { dependency: "carrier" }');
  const out: { -readonly [K in keyof RetryFilter]: RetryFilter[K] } = {};
  for (const key of Object.keys(filter)) {
    if (!KNOWN.has(key)) throw new InvalidOptionError(`${option}.${key}`, 'is not a filter field', `Use ${[...KNOWN].join(', ')}.`);
  }
  for (const key of TEXT_FIELDS) {
    const v = filter[key];
    if (v === undefined) continue;
    if (typeof v !== 'string' || v.length === 0 || v.length > 255) throw new InvalidOptionError(`${option}.${key}`, `${JSON.stringify(v)} is not a text of 1 to 255 characters`);
    out[key] = v;
  }
  for (const key of ['paused', 'due'] as const) {
    const v = filter[key];
    if (v === undefined) continue;
    if (typeof v !== 'boolean') throw new InvalidOptionError(`${option}.${key}`, `${JSON.stringify(v)} is not true or false`);
    out[key] = v;
  }
  if (filter.ids !== undefined) {
    if (!Array.isArray(filter.ids) || filter.ids.length === 0) throw new InvalidOptionError(`${option}.ids`, 'expected a non-empty list of row ids');
    for (const id of filter.ids) {
      if (typeof id !== 'string' || !/^[1-9][0-9]{0,18}$/.test(id) || BigInt(id) > 9223372036854775807n) {
        throw new InvalidOptionError(`${option}.ids`, `${JSON.stringify(id)} is not a row id (a positive whole number, as a string)`);
      }
    }
    out.ids = Object.freeze([...new Set(filter.ids)]);
  }
  return Object.freeze(out);
}

/** True when the filter selects every row. */
export function isEmptyFilter(filter: RetryFilter): boolean {
  return Object.keys(filter).length === 0;
}

/**
 * The hold a pause with this filter leaves (an empty filter: a hold on every row), or
 * undefined when it pauses these rows only (by id, by state).
 */
export function holdOf(filter: RetryFilter): Pick<RetryHold, 'consumer' | 'dependency' | 'tenant' | 'errorClass'> | undefined {
  if (filter.ids !== undefined || filter.paused !== undefined || filter.due !== undefined) return undefined;
  return { consumer: filter.consumer ?? null, dependency: filter.dependency ?? null, tenant: filter.tenant ?? null, errorClass: filter.errorClass ?? null };
}

/** How a backend writes the parts of a WHERE clause. */
export interface SqlWriter {
  /** Adds a parameter and returns its placeholder (`?`, `$3`). */
  param(value: unknown): string;
  /** A boolean as the backend stores it. */
  bool(value: boolean): unknown;
  /** `column IN (ids)` for a list of row ids. */
  ids(column: string, ids: readonly string[]): string;
  /** The placeholder (or expression) for "now", the same one in every use. */
  readonly now: string;
}

/** Column names of a filter, prefixed with a table alias (`r.`) or not. */
function col(alias: string, name: string): string {
  return alias === '' ? name : `${alias}.${name}`;
}

const COLUMN: Record<(typeof TEXT_FIELDS)[number], string> = { consumer: 'consumer', dependency: 'dependency', tenant: 'tenant', errorClass: 'error_class' };

/** `a AND b AND …` for the filter, or `TRUE`-like `1 = 1` when it is empty. */
export function whereOf(filter: RetryFilter, w: SqlWriter, alias = ''): string {
  const parts: string[] = [];
  if (filter.ids !== undefined) parts.push(w.ids(col(alias, 'id'), filter.ids));
  for (const key of TEXT_FIELDS) {
    const v = filter[key];
    if (v !== undefined) parts.push(`${col(alias, COLUMN[key])} = ${w.param(v)}`);
  }
  if (filter.paused !== undefined) parts.push(`${col(alias, 'paused')} = ${w.param(w.bool(filter.paused))}`);
  const next = col(alias, 'next_attempt_at');
  if (filter.due === true) parts.push(`(${next} IS NOT NULL AND ${next} <= ${w.now})`);
  if (filter.due === false) parts.push(`(${next} IS NULL OR ${next} > ${w.now})`);
  return parts.length === 0 ? '1 = 1' : parts.join(' AND ');
}

/**
 * "A hold matches this row": every column the hold names equals the row's. Holds store
 * `''` for "any". `hold` is a table alias; `row` gives the row's SQL expressions (columns
 * of an alias, or parameters for a row being inserted).
 */
export function holdMatches(hold: string, row: { consumer: string; dependency: string; tenant: string; errorClass: string }): string {
  return [
    `(${hold}.consumer = '' OR ${hold}.consumer = ${row.consumer})`,
    `(${hold}.dependency = '' OR ${hold}.dependency = ${row.dependency})`,
    `(${hold}.tenant = '' OR ${hold}.tenant = ${row.tenant})`,
    `(${hold}.error_class = '' OR ${hold}.error_class = ${row.errorClass})`,
  ].join(' AND ');
}

/**
 * The hold a resume with this filter lifts: the one a pause with the same filter made
 * (every column equal, `''` for a field not given), so lifting a dependency's pause
 * leaves a narrower pause of one of its tenants in force. Undefined for a resume by id
 * or state, which lifts no hold.
 */
export function liftedHoldsWhere(filter: RetryFilter, w: SqlWriter, alias = ''): string | undefined {
  const hold = holdOf(filter);
  if (hold === undefined) return undefined;
  return TEXT_FIELDS.map((key) => `${col(alias, COLUMN[key])} = ${w.param(hold[key] ?? '')}`).join(' AND ');
}
