/**
 * The record of what operators did through the console: who, when, what, with which
 * filter, how many messages or rows. Every action goes through {@link ActionLog.write},
 * so where the record is kept can change without touching the routes.
 */
import { appendFile } from 'node:fs/promises';

/** One action taken through the console. */
export interface ActionEntry {
  /** When it was asked for (ISO time). */
  readonly at: string;
  /** Who asked, as `authorize` named them. */
  readonly user: string;
  /** What was done, e.g. `parked.replay`, `parked.purge`, `retry.pause`, `outbox.release`. */
  readonly action: string;
  /** The consumer it applied to, when there is one. */
  readonly consumer: string | null;
  /** The selection, in words or as the filter's fields. */
  readonly filter: Readonly<Record<string, unknown>>;
  /** Messages or rows the action touched (or, for a job still running, asked for). */
  readonly count: number;
  /** Anything else worth keeping: the rate, the job id, how it ended. */
  readonly detail: Readonly<Record<string, unknown>>;
}

/** Where the console keeps its action record. */
export interface ActionLog {
  write(entry: ActionEntry): Promise<void>;
  /** Entries, newest first. */
  list(limit: number): Promise<readonly ActionEntry[]>;
}

/**
 * Keeps the last `capacity` entries in memory and, when `file` is given, appends each
 * as a JSON line to it, so the record outlives the process.
 */
export function memoryActionLog(options: { capacity?: number; file?: string } = {}): ActionLog {
  const capacity = options.capacity ?? 1000;
  const entries: ActionEntry[] = [];
  return {
    async write(entry) {
      entries.push(entry);
      if (entries.length > capacity) entries.splice(0, entries.length - capacity);
      if (options.file !== undefined) await appendFile(options.file, `${JSON.stringify(entry)}\n`, 'utf8');
    },
    list(limit) {
      return Promise.resolve(entries.slice(-limit).reverse());
    },
  };
}
