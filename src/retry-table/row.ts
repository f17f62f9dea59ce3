/**
 * A failed delivery as a retry-table row: pure, so what is stored (and sent back later)
 * can be tested without a broker or a database.
 */
import { TextDecoder } from 'node:util';
import { HEADER } from '../headers.js';
import { failureHeaders, type FailureInfo } from '../park/failure.js';
import { BROKER_HEADERS } from '../park/message.js';
import type { RetryRowInput } from './types.js';
import type { WaitDecision } from './wait.js';

/** What {@link retryRow} needs of the delivery and the consumer. */
export interface RetryRowSource {
  readonly messageId: string;
  readonly content: Buffer;
  readonly properties: { readonly contentType?: unknown; readonly contentEncoding?: unknown; readonly appId?: unknown; readonly timestamp?: unknown; readonly correlationId?: unknown; readonly type?: unknown };
  /** The delivery's headers, as received. */
  readonly headers: Readonly<Record<string, unknown>>;
  /** Exchange and routing key the message was first published with. */
  readonly exchange: string;
  readonly routingKey: string;
  readonly consumer: string;
  readonly queue: string;
  readonly parkedQueue: string;
  /** Times in the table so far, this one included. */
  readonly waits: number;
  readonly failure: FailureInfo;
  readonly decision: WaitDecision;
  readonly now: Date;
}

/** Body text, or a throw when the bytes are not UTF-8 (`toString` would replace them). */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * A body as a text column holds it: the UTF-8 text when that gives back the same bytes,
 * else base64 (a decoder other than JSON reads bytes, and a lossy copy would come back
 * as another message).
 */
export function storableBody(content: Buffer): { text: string; base64: boolean } {
  try {
    const text = utf8.decode(content);
    if (!text.includes('\u0000')) return { text, base64: false };
  } catch {
    // not UTF-8: base64 below
  }
  return { text: content.toString('base64'), base64: true };
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Text a database accepts: PostgreSQL refuses NUL in `text` and `jsonb`, and a lone
 * surrogate in `jsonb`. Both become U+FFFD; everything else is kept.
 */
export function storableText(text: string): string {
  return text.replaceAll('\u0000', '\uFFFD').replace(LONE_SURROGATE, '\uFFFD');
}

/** {@link storableText} on every string in a header value, keys included. */
export function storableValue(value: unknown): unknown {
  if (typeof value === 'string') return storableText(value);
  if (Array.isArray(value)) return value.map(storableValue);
  if (value !== null && typeof value === 'object' && !Buffer.isBuffer(value) && !(value instanceof Date)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [storableText(k), storableValue(v)]));
  }
  return value;
}

/**
 * The row for a message that waits: the headers it will go back with (the failure, the
 * original exchange and routing key, `warren-waits`, dependency and tenant; without the
 * broker's own `x-death` and `x-delivery-count`, which a republished copy must not carry)
 * and the columns operators filter on.
 */
export function retryRow(s: RetryRowSource): RetryRowInput {
  const headers: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s.headers)) if (!BROKER_HEADERS.includes(k)) headers[k] = v;
  Object.assign(headers, failureHeaders(s.failure, s.headers, s.now), {
    [HEADER.exchange]: s.exchange,
    [HEADER.routingKey]: s.routingKey,
    [HEADER.waits]: s.waits,
    [HEADER.consumer]: s.consumer,
    [HEADER.dependency]: s.decision.dependency,
  });
  if (s.decision.tenant !== null) headers[HEADER.tenant] = s.decision.tenant;
  else delete headers[HEADER.tenant];
  const p = s.properties;
  const stored: Record<string, unknown> = {
    contentType: typeof p.contentType === 'string' ? p.contentType : 'application/json',
    timestamp: typeof p.timestamp === 'number' ? p.timestamp : Math.floor(s.now.getTime() / 1000),
    headers: storableValue(headers),
  };
  if (typeof p.correlationId === 'string') stored['correlationId'] = storableText(p.correlationId);
  if (typeof p.type === 'string') stored['type'] = storableText(p.type);
  if (typeof p.contentEncoding === 'string') stored['contentEncoding'] = storableText(p.contentEncoding);
  if (typeof p.appId === 'string') stored['appId'] = storableText(p.appId);
  const body = storableBody(s.content);
  if (body.base64) stored['bodyEncoding'] = 'base64';
  return {
    messageId: storableText(s.messageId),
    correlationId: typeof p.correlationId === 'string' ? storableText(p.correlationId) : null,
    consumer: s.consumer,
    queue: s.queue,
    parkedQueue: s.parkedQueue,
    exchange: storableText(s.exchange),
    routingKey: storableText(s.routingKey),
    content: body.text,
    properties: JSON.stringify(stored),
    attempt: s.waits,
    nextAttemptAt: s.decision.nextAttemptAt,
    lastError: storableText(s.failure.message),
    errorClass: storableText(s.failure.errorClass),
    dependency: storableText(s.decision.dependency),
    tenant: s.decision.tenant === null ? null : storableText(s.decision.tenant),
  };
}
