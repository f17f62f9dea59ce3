/**
 * Where the console keeps its record of actions: the action record of `src/audit`
 * (the store's `actions` table, a JSON-lines file, or this module's in-memory log).
 * Every route records through `RouteDeps.record`, so where the record is kept is
 * decided once, in the options.
 */
import { checkEntry, checkQuery, type ActionEntry, type ActionLog, type ActionQuery, type ActionRecord } from '../audit/index.js';

export type { ActionEntry, ActionLog, ActionQuery, ActionRecord };

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
