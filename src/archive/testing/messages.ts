/** Parked messages as the broker hands them over, for the archive's tests and benchmark. */
import { HEADER } from '../../headers.js';
import { failureFingerprint } from '../../park/failure.js';
import type { RawMessage } from '../../park/message.js';

/** What differs between test messages. */
export interface ParkedSpec {
  id?: string | undefined;
  consumer?: string;
  errorClass?: string;
  error?: string;
  /** Failure time. @default now */
  at?: Date;
  body?: Buffer | string;
  headers?: Record<string, unknown>;
  routingKey?: string;
  reason?: string;
  attempts?: number;
  replays?: number;
  contentEncoding?: string;
}

/** The headers warren writes when it parks a message. */
export function parkedHeaders(s: ParkedSpec): Record<string, unknown> {
  const at = (s.at ?? new Date()).toISOString();
  return {
    [HEADER.consumer]: s.consumer ?? 'billing',
    [HEADER.errorClass]: s.errorClass ?? 'HttpError',
    [HEADER.errorMessage]: s.error ?? 'carrier 503',
    [HEADER.errorStack]: 'at send (carrier.js:10:5)',
    [HEADER.attempts]: s.attempts ?? 6,
    [HEADER.parkedReason]: s.reason ?? 'max-attempts',
    [HEADER.parkedAt]: at,
    [HEADER.lastFailedAt]: at,
    [HEADER.firstFailedAt]: at,
    [HEADER.routingKey]: s.routingKey ?? 'order.created',
    [HEADER.exchange]: 'shop',
    ...(s.replays !== undefined ? { [HEADER.replays]: s.replays } : {}),
    ...s.headers,
  };
}

/** One parked delivery. */
export function parkedRaw(s: ParkedSpec = {}): RawMessage {
  const body = s.body === undefined ? Buffer.from(JSON.stringify({ orderId: s.id ?? 'x' })) : typeof s.body === 'string' ? Buffer.from(s.body) : s.body;
  return {
    content: body,
    fields: { routingKey: 'billing.parked', exchange: '' },
    properties: {
      ...(s.id !== undefined ? { messageId: s.id } : {}),
      contentType: 'application/json',
      ...(s.contentEncoding !== undefined ? { contentEncoding: s.contentEncoding } : {}),
      timestamp: Math.floor((s.at ?? new Date()).getTime() / 1000),
      headers: parkedHeaders(s),
    },
  };
}

/** The fingerprint warren gives a spec's failure. */
export function fingerprintOf(s: ParkedSpec): string {
  return failureFingerprint(s.errorClass ?? 'HttpError', s.error ?? 'carrier 503', 'at send (carrier.js:10:5)');
}
