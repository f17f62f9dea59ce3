// An action record's entries, their checks and queries: pure, shared by every backend.
import { InvalidOptionError } from '../errors.js';
import type { ParkedFilter } from '../park/filter.js';

/**
 * How an action ended. `partial`: it stopped before doing all it was asked (interrupted, a
 * limit, a move refused). `started`: the record an action writes before it does anything
 * (the console's actions), followed by one with how it ended; a `started` record with no
 * end after it is an action that was cut short (its process killed).
 */
export type ActionOutcome = 'started' | 'ok' | 'partial' | 'failed';

/** One operator action, as given to {@link ActionLog.record}. */
export interface ActionEntry {
  /** When it happened. @default now */
  readonly at?: Date;
  /** Who did it: a user name, e.g. `$USER` on the command line. */
  readonly actor: string;
  /** What was done, as `area.verb`: `parked.replay`, `parked.purge`, `parked.canary`, `outbox.release`, `retry.pause`… */
  readonly action: string;
  /** The consumer acted on, when there is one. */
  readonly consumer?: string;
  /** Which messages or rows: the filter as given (JSON-friendly; see {@link filterRecord}). */
  readonly filter?: Readonly<Record<string, unknown>>;
  /** How many messages or rows were changed. */
  readonly count: number;
  readonly outcome: ActionOutcome;
  /** Anything else worth keeping: a rate, an error, ids (JSON-friendly, at most 64 KiB as JSON). */
  readonly detail?: Readonly<Record<string, unknown>>;
}

/** A recorded action: the entry with its time set and the id the log gave it. */
export interface ActionRecord extends Omit<ActionEntry, 'at'> {
  /** Increasing in record order (a string: a 64-bit integer in the stores). */
  readonly id: string;
  readonly at: Date;
}

/** Which records {@link ActionLog.list} returns, newest first. */
export interface ActionQuery {
  /** At most this many. @default 100 */
  readonly limit?: number;
  /** Only records at or after this time. @default no bound */
  readonly since?: Date;
  /** Only this action, e.g. `parked.replay`. @default every action */
  readonly action?: string;
  /** Only actions on this consumer. @default every consumer */
  readonly consumer?: string;
}

/** An append-only record of operator actions. */
export interface ActionLog {
  /** Appends one action; returns it as recorded. Throws {@link InvalidOptionError} on a malformed entry. */
  record(entry: ActionEntry): Promise<ActionRecord>;
  /** Recorded actions, newest first. */
  list(query?: ActionQuery): Promise<ActionRecord[]>;
}

const ACTION = /^[a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)*$/;
const OUTCOMES: ReadonlySet<string> = new Set(['started', 'ok', 'partial', 'failed']);
const MAX_DETAIL_JSON = 65_536;

/** An entry checked and made whole (time set, optional fields dropped when absent). Pure but for the default time. */
export function checkEntry(entry: ActionEntry): Required<Pick<ActionEntry, 'at' | 'actor' | 'action' | 'count' | 'outcome'>> & Pick<ActionEntry, 'consumer' | 'filter' | 'detail'> {
  if (typeof entry !== 'object' || entry === null) throw new InvalidOptionError('entry', 'expected an object with actor, action, count and outcome');
  if (typeof entry.actor !== 'string' || entry.actor.trim() === '' || entry.actor.length > 200) throw new InvalidOptionError('actor', `${JSON.stringify(entry.actor)} is not a name of 1-200 characters`, 'Pass --actor NAME, or set $USER.');
  if (typeof entry.action !== 'string' || !ACTION.test(entry.action) || entry.action.length > 100) throw new InvalidOptionError('action', `${JSON.stringify(entry.action)} is not an action name`, "Use lower-case words joined by dots, e.g. 'parked.replay'.");
  if (entry.consumer !== undefined && (typeof entry.consumer !== 'string' || entry.consumer === '' || entry.consumer.length > 200)) throw new InvalidOptionError('consumer', `${JSON.stringify(entry.consumer)} is not a consumer name`);
  if (!Number.isSafeInteger(entry.count) || entry.count < 0) throw new InvalidOptionError('count', `${String(entry.count)} is not a whole number of at least 0`);
  if (!OUTCOMES.has(entry.outcome)) throw new InvalidOptionError('outcome', `${JSON.stringify(entry.outcome)} is not 'started', 'ok', 'partial' or 'failed'`);
  const at = entry.at ?? new Date();
  if (!(at instanceof Date) || Number.isNaN(at.getTime())) throw new InvalidOptionError('at', 'is not a valid date');
  for (const key of ['filter', 'detail'] as const) {
    const value = entry[key];
    if (value === undefined) continue;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidOptionError(key, 'expected a plain object');
    const json = JSON.stringify(value);
    if (json.length > MAX_DETAIL_JSON) throw new InvalidOptionError(key, `is ${json.length} characters as JSON, more than ${MAX_DETAIL_JSON}`, 'Record counts and a few ids, not whole messages.');
  }
  return {
    at,
    actor: entry.actor.trim(),
    action: entry.action,
    count: entry.count,
    outcome: entry.outcome,
    ...(entry.consumer !== undefined ? { consumer: entry.consumer } : {}),
    ...(entry.filter !== undefined ? { filter: JSON.parse(JSON.stringify(entry.filter)) as Record<string, unknown> } : {}),
    ...(entry.detail !== undefined ? { detail: JSON.parse(JSON.stringify(entry.detail)) as Record<string, unknown> } : {}),
  };
}

/** A query checked, with its defaults. */
export function checkQuery(query: ActionQuery = {}): { limit: number; since: Date | undefined; action: string | undefined; consumer: string | undefined } {
  const limit = query.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100_000) throw new InvalidOptionError('limit', `${limit} is not a whole number from 1 to 100000`);
  if (query.since !== undefined && (!(query.since instanceof Date) || Number.isNaN(query.since.getTime()))) throw new InvalidOptionError('since', 'is not a valid date');
  return { limit, since: query.since, action: query.action, consumer: query.consumer };
}

/** A parked-queue filter as a JSON-friendly object (a pattern as `/re/flags`, times as ISO strings), for {@link ActionEntry.filter}. Pure. */
export function filterRecord(f: ParkedFilter): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (f.error !== undefined) out['error'] = typeof f.error === 'string' ? f.error : String(f.error);
  if (f.errorClass !== undefined) out['errorClass'] = f.errorClass;
  if (f.since !== undefined) out['since'] = f.since.toISOString();
  if (f.until !== undefined) out['until'] = f.until.toISOString();
  if (f.messageIds !== undefined && f.messageIds.length > 0) out['messageIds'] = [...f.messageIds];
  if (f.routingKey !== undefined) out['routingKey'] = f.routingKey;
  if (f.fingerprint !== undefined) out['fingerprint'] = f.fingerprint;
  return out;
}
