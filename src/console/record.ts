/**
 * Where the console keeps its record of actions: the action record of `src/audit`
 * (the store's `actions` table, a JSON-lines file, or this module's in-memory log).
 * Every route records through `RouteDeps.begin` or `RouteDeps.perform` (see
 * `recorder.ts`), so where the record is kept is decided once, in the options.
 */
import { checkEntry, checkQuery, type ActionEntry, type ActionLog, type ActionOutcome, type ActionQuery, type ActionRecord } from '../audit/index.js';
import { InvalidOptionError } from '../errors.js';

export type { ActionEntry, ActionLog, ActionOutcome, ActionQuery, ActionRecord };

/**
 * Keeps the last `capacity` actions in this process's memory: gone when it stops. What the
 * console uses when it has neither a store nor a file to record to.
 */
export function memoryActionLog(capacity = 1000): ActionLog {
  const records: ActionRecord[] = [];
  let next = 0;
  return {
    record(entry: ActionEntry): Promise<ActionRecord> {
      const e = checkEntry(entry);
      next += 1;
      const record: ActionRecord = { id: String(next), ...e };
      records.push(record);
      if (records.length > capacity) records.splice(0, records.length - capacity);
      return Promise.resolve(record);
    },
    list(query?: ActionQuery): Promise<ActionRecord[]> {
      const q = checkQuery(query);
      const out = records.filter((r) => (q.since === undefined || r.at >= q.since) && (q.action === undefined || r.action === q.action) && (q.consumer === undefined || r.consumer === q.consumer));
      return Promise.resolve(out.reverse().slice(0, q.limit));
    },
  };
}

/** Options of {@link checkActionLog}. */
export interface CheckActionLogOptions {
  /** How the log is named in the error, e.g. `--audit-file /var/log/warren/actions.jsonl`. @default 'the action record' */
  readonly where?: string;
  /** Kept in the `console.start` record, e.g. the address served. */
  readonly detail?: Readonly<Record<string, unknown>>;
  /** What the error tells to do. @default make it writable, or record elsewhere */
  readonly hint?: string;
}

/**
 * Writes a `console.start` record (actor `warren`) to `log`, and throws when it cannot,
 * naming the log and what to do. Call it before serving a console: a console whose record
 * cannot be written refuses every action, and is better not started. `warren console` does.
 *
 * @example
 * await checkActionLog(store.actions, { where: 'the database' });
 * const ops = warrenConsole({ warren, store, authorize });
 */
export async function checkActionLog(log: ActionLog, options: CheckActionLogOptions = {}): Promise<ActionRecord> {
  const where = options.where ?? 'the action record';
  try {
    return await log.record({ actor: 'warren', action: 'console.start', count: 0, outcome: 'ok', ...(options.detail !== undefined ? { detail: options.detail } : {}) });
  } catch (error) {
    throw new InvalidOptionError('actionLog', `${where} cannot be written (${error instanceof Error ? error.message : String(error)})`, options.hint ?? 'Make it writable (a file this user may create or append to, in a directory it may write; a database it may insert into), or record elsewhere.');
  }
}
