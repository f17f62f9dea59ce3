/**
 * The headers of the copies a {@link Decision} makes: a retry, a park, a move to the
 * back of the queue. Pure, so `warren/testing` shows the headers the consumer writes.
 */
import { HEADER, MAX_HEADER_TABLE_BYTES, MAX_NAME_BYTES } from '../headers.js';
import { describeFailure, failureHeaders, truncate, type FailureInfo } from '../park/failure.js';
import { fitHeaders } from '../park/message.js';
import type { Decision } from './contract.js';

/** Where the delivery came from: its `fields.exchange` and `fields.routingKey`. */
export interface DeliveryFields {
  readonly exchange: string;
  readonly routingKey: string;
}

/** A routing key or exchange name from a header, when it could be one (at most 255 bytes). */
function shortName(value: unknown): string | undefined {
  return typeof value === 'string' && value.length <= MAX_NAME_BYTES && Buffer.byteLength(value, 'utf8') <= MAX_NAME_BYTES ? value : undefined;
}

/**
 * The original exchange and routing key, kept from the first failure on. A header that
 * could not be a name (not text, or over 255 bytes) is forged: the delivery's own is used.
 */
export function originHeaders(headers: Readonly<Record<string, unknown>>, fields: DeliveryFields): Record<string, string> {
  return {
    [HEADER.exchange]: shortName(headers[HEADER.exchange]) ?? fields.exchange,
    [HEADER.routingKey]: shortName(headers[HEADER.routingKey]) ?? fields.routingKey,
  };
}

/** A decision that publishes a copy: a retry, a park, or a crash-loop move back to the work queue. */
export type MoveDecision = Extract<Decision, { kind: 'retry' | 'park' | 'move-back' }>;

/**
 * The headers of the copy `decision` publishes, before the broker's own are dropped: the
 * delivery's headers, the origin, and for a retry or park the failure, the attempts and
 * the consumer (a park adds its reason and time). A `minimal` park gets
 * {@link minimalHeaders}. `failure`: the decision's error as {@link describeFailure}
 * describes it, when the caller has described it already.
 */
export function copyHeaders(decision: MoveDecision, headers: Readonly<Record<string, unknown>>, fields: DeliveryFields, consumer: string, now: Date, failure?: FailureInfo): Record<string, unknown> {
  if (decision.kind === 'move-back') return { ...headers, ...originHeaders(headers, fields), [HEADER.redeliveries]: decision.redeliveries };
  if (decision.kind === 'park' && decision.minimal) return minimalHeaders(decision, headers, fields, consumer, now, failure);
  const next: Record<string, unknown> = {
    ...headers,
    ...originHeaders(headers, fields),
    ...failureHeaders(failure ?? describeFailure(decision.error), headers, now),
    [HEADER.attempts]: decision.attempts,
    [HEADER.consumer]: consumer,
  };
  if (decision.kind === 'park') {
    next[HEADER.parkedReason] = decision.reason;
    next[HEADER.parkedAt] = now.toISOString();
  }
  return next;
}

/**
 * The headers of a copy parked with minimal metadata, when the full ones cannot be
 * encoded or the failure path threw: warren's essentials, bounded small, and the
 * producer's headers (warren's old ones dropped). Producer headers that alone exceed
 * the limit are dropped, largest first, and named in `warren-dropped-headers`.
 * `failure` as for {@link copyHeaders}.
 */
export function minimalHeaders(decision: Extract<Decision, { kind: 'park' }>, headers: Readonly<Record<string, unknown>>, fields: DeliveryFields, consumer: string, now: Date, failure: FailureInfo = describeFailure(decision.error)): Record<string, unknown> {
  const at = now.toISOString();
  const own: Record<string, unknown> = {
    ...originHeaders(headers, fields),
    [HEADER.consumer]: consumer,
    [HEADER.attempts]: decision.attempts,
    [HEADER.parkedReason]: decision.reason,
    [HEADER.parkedAt]: at,
    [HEADER.errorClass]: truncate(failure.errorClass, 100),
    [HEADER.errorMessage]: truncate(failure.message, 300),
    [HEADER.lastFailedAt]: at,
  };
  const producer: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(headers)) if (!k.startsWith('warren-')) producer[k] = v;
  const fitted = fitHeaders(own, producer, MAX_HEADER_TABLE_BYTES - 1_200);
  if (fitted.dropped.length > 0) fitted.headers[HEADER.droppedHeaders] = truncate(fitted.dropped.join(', '), 1_000);
  return fitted.headers;
}
