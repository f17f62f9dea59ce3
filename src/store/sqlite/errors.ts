import { StoreUnavailableError } from '../../errors.js';

/**
 * SQLite result codes that mean "the database cannot be used right now" rather than "this
 * statement is wrong": another process holds the write lock past the timeout, the file
 * cannot be opened, the disk failed or is full.
 */
const UNAVAILABLE = ['SQLITE_BUSY', 'SQLITE_LOCKED', 'SQLITE_CANTOPEN', 'SQLITE_IOERR', 'SQLITE_FULL', 'SQLITE_PROTOCOL', 'SQLITE_NOTADB'];

/** The error's SQLite code, e.g. `SQLITE_BUSY_SNAPSHOT`, if it has one. */
export function sqliteCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_') ? code : undefined;
}

/** True for a busy or locked database (another connection holds the lock). */
export function isBusy(error: unknown): boolean {
  const code = sqliteCode(error);
  return code !== undefined && (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED'));
}

/** True when the error means the database is unavailable, not that a statement failed. */
export function isUnavailable(error: unknown): boolean {
  if (error instanceof StoreUnavailableError) return true;
  const code = sqliteCode(error);
  if (code !== undefined) return UNAVAILABLE.some((c) => code === c || code.startsWith(`${c}_`));
  return error instanceof TypeError && /database connection is not open/i.test(error.message);
}

/**
 * An error from warren's own statements: an outage becomes {@link StoreUnavailableError}
 * (the consumer holds the message and tries again), anything else passes through.
 */
export function mapError(error: unknown, doing: string, filename: string): unknown {
  if (error instanceof StoreUnavailableError || !isUnavailable(error)) return error;
  const why = error instanceof Error ? error.message : String(error);
  const hint = isBusy(error) ? 'another connection holds the write lock; raise `busyTimeoutMs` if transactions are long' : 'check the file, its directory and the disk';
  return new StoreUnavailableError(`SQLite '${filename}' could not ${doing} (${sqliteCode(error) ?? 'error'}: ${why}); ${hint}`, { cause: error });
}
