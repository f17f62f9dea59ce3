import { StoreUnavailableError } from '../../errors.js';

/** Socket errors that mean the server cannot be reached. */
const NETWORK = new Set(['ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN']);

/**
 * SQLSTATEs of an outage: class 08 (connection exception), 57P01 admin shutdown, 57P02
 * crash shutdown, 57P03 cannot connect now (starting up), 53300 too many connections.
 */
const SERVER = new Set(['57P01', '57P02', '57P03', '53300']);

const MESSAGES = /Connection terminated|timeout exceeded when trying to connect|connection error and is not queryable|Client was closed and is not queryable|the database system is (?:starting up|shutting down|in recovery mode)/i;

/** True when the error means PostgreSQL cannot be used right now, not that a statement failed. */
export function isUnavailable(error: unknown): boolean {
  if (error instanceof StoreUnavailableError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (NETWORK.has(code) || SERVER.has(code) || /^08[0-9A-Z]{3}$/.test(code))) return true;
  if (error instanceof AggregateError && error.errors.some((e) => isUnavailable(e))) return true;
  return error instanceof Error && MESSAGES.test(error.message);
}

/**
 * An error from warren's own statements: an outage becomes {@link StoreUnavailableError}
 * (the consumer holds the message and tries again), anything else passes through.
 */
export function mapError(error: unknown, doing: string): unknown {
  if (error instanceof StoreUnavailableError || !isUnavailable(error)) return error;
  const code = (error as { code?: unknown }).code;
  const why = error instanceof Error ? error.message || error.constructor.name : String(error);
  return new StoreUnavailableError(`PostgreSQL could not ${doing} (${typeof code === 'string' ? `${code}: ` : ''}${why}); check that the server runs and accepts connections`, { cause: error });
}
