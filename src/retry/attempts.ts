import { HEADER } from '../headers.js';

/** How many times a message has failed so far, and where that number came from. */
export interface AttemptCount {
  /** Failed handler runs before this delivery. */
  readonly failed: number;
  /**
   * `header`: warren's own header; `x-death`: the broker's record (header absent); `none`:
   * first delivery; `x-delivery-count`: the broker's delivery count, for a consumer that
   * retries inside its queue (with warren's header added when there is one).
   */
  readonly source: 'header' | 'x-death' | 'none' | 'x-delivery-count';
  /** Set when a header was present but unusable, to be logged. */
  readonly warning?: string;
}

/** The count of a first delivery (most deliveries): one object, not one per delivery. */
const FIRST_DELIVERY: AttemptCount = Object.freeze({ failed: 0, source: 'none' });

/** Largest count taken from a header; anything above is treated as "at the cap". */
const MAX_COUNT = 1_000_000;

function asCount(value: unknown): number | undefined {
  let n: number;
  if (typeof value === 'number') n = value;
  else if (typeof value === 'bigint') n = Number(value);
  else if (typeof value === 'string' && /^\s*-?\d+\s*$/.test(value)) n = Number(value);
  else return undefined;
  if (!Number.isFinite(n) || !Number.isInteger(n)) return undefined;
  return n;
}

/**
 * Sums the broker's `x-death` counts for the given queues with reason `expired`,
 * matching entries by `{queue, reason}`, never by position. Malformed entries are skipped.
 */
export function countDeaths(xDeath: unknown, queues: ReadonlySet<string>): number {
  if (!Array.isArray(xDeath)) return 0;
  let total = 0;
  for (const entry of xDeath as unknown[]) {
    if (typeof entry !== 'object' || entry === null) continue;
    const { queue, reason, count } = entry as Record<string, unknown>;
    if (typeof queue !== 'string' || reason !== 'expired' || !queues.has(queue)) continue;
    const n = asCount(count);
    if (n !== undefined && n > 0) total += Math.min(n, MAX_COUNT);
  }
  return total;
}

/**
 * Reads the failure count of a delivery. warren's own header wins; `x-death`
 * (the broker's record of expiries from this consumer's retry queues) is the
 * fallback when the header is absent or unusable. A negative count reads as 0,
 * a huge one is capped, text that is not a whole number is ignored with a warning.
 */
export function readAttempts(headers: Readonly<Record<string, unknown>> | undefined, retryQueues: ReadonlySet<string>): AttemptCount {
  const raw = headers?.[HEADER.attempts];
  const fromDeaths = countDeaths(headers?.['x-death'], retryQueues);
  if (raw === undefined || raw === null) {
    return fromDeaths > 0 ? { failed: fromDeaths, source: 'x-death' } : FIRST_DELIVERY;
  }
  const n = asCount(raw);
  if (n === undefined) {
    const warning = `header ${HEADER.attempts} is ${JSON.stringify(String(raw)).slice(0, 60)}, not a whole number; using ${fromDeaths} from x-death`;
    return { failed: fromDeaths, source: fromDeaths > 0 ? 'x-death' : 'none', warning };
  }
  if (n < 0) {
    return { failed: fromDeaths, source: fromDeaths > 0 ? 'x-death' : 'none', warning: `header ${HEADER.attempts} is negative (${n}); read as ${fromDeaths}` };
  }
  return { failed: Math.min(n, MAX_COUNT), source: 'header' };
}

/**
 * The failure count of a delivery to a consumer that retries inside its queue: warren's
 * header (a copy warren made: a message from tier queues before the consumer changed, or
 * from the retry table) plus, on a redelivery, the broker's `x-delivery-count`. The broker
 * raises that count on each reject (each failed run) and on each delivery whose consumer
 * went away; no copy is made, so no header of warren's can count them. On a first delivery
 * the count is the producer's (RabbitMQ 4.x passes it through) and is not read; a reject
 * replaces it with the broker's own (seen on 4.3.6).
 */
export function readInQueueAttempts(headers: Readonly<Record<string, unknown>> | undefined, redelivered: boolean, retryQueues: ReadonlySet<string>): AttemptCount {
  const own = readAttempts(headers, retryQueues);
  if (!redelivered) return own;
  const count = asCount(headers?.['x-delivery-count']);
  if (count === undefined || count <= 0) return own;
  return { failed: Math.min(own.failed + count, MAX_COUNT), source: 'x-delivery-count', ...(own.warning !== undefined ? { warning: own.warning } : {}) };
}
