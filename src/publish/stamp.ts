import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import { HEADER } from '../headers.js';
import { stampTrace } from '../trace/index.js';
import { uuidv7 } from './message-id.js';

/** Per-message options of a publish, direct or through the outbox. */
export interface PublishOptions {
  /**
   * The message id. Make it once and keep it: retries and replays keep it too,
   * and idempotent consumers key on it.
   * @default a new UUIDv7
   */
  messageId?: string;
  /** When the event happened. @default now */
  occurredAt?: Date;
  correlationId?: string;
  /** Extra headers. Names starting with `warren-` are warren's own. */
  headers?: Record<string, unknown>;
  /** AMQP `type` property, e.g. the event name. */
  type?: string;
  /**
   * The exchange to publish to: any exchange of the topology (or another that exists).
   * On a fanout or headers exchange the routing key may be `''`.
   * @default the topology's default exchange (`exchange`)
   */
  exchange?: string;
}

/** A payload stamped for sending: its id, JSON body and AMQP properties. */
export interface StampedMessage {
  readonly messageId: string;
  readonly json: string;
  readonly properties: amqp.Options.Publish & { messageId: string; contentType: string; timestamp: number; headers: Record<string, unknown> };
}

/**
 * The one set of rules for a message warren sends, used by the publisher and the
 * outbox alike: a routing key of 1 to 255 bytes (0 to 255 with an explicit
 * `exchange`, for a fanout or headers exchange), a JSON payload, a UUIDv7 id unless
 * given, the `warren-occurred-at` header, JSON content type, persistent delivery and the
 * AMQP timestamp in seconds, and the trace context (`traceparent`, when an OpenTelemetry
 * SDK is registered): `traceContext`'s, else the caller's active one. Bad input throws
 * {@link InvalidOptionError} naming it.
 */
export function stampMessage(routingKey: string, payload: unknown, options: PublishOptions = NO_OPTIONS, traceContext?: unknown): StampedMessage {
  const now = Date.now();
  checkRoutingKey(routingKey, options);
  const json = encodePayload(payload);
  const messageId = messageIdOf(options, now);
  const properties = stampProperties(messageId, occurredAtOf(options, now), options);
  stampTrace(properties.headers, traceContext);
  return { messageId, json, properties };
}

/** Throws {@link InvalidOptionError} unless `routingKey` is one a message may be sent with (see {@link stampMessage}). */
export function checkRoutingKey(routingKey: string, options: PublishOptions): void {
  // An empty key is a mistake on the default (topic) exchange, and normal on a fanout or headers one.
  const min = options.exchange !== undefined ? 0 : 1;
  // A key of 85 characters or fewer is at most 255 bytes: count bytes only past that.
  if (typeof routingKey !== 'string' || routingKey.length < min || (routingKey.length > 85 && Buffer.byteLength(routingKey, 'utf8') > 255)) {
    throw new InvalidOptionError('routingKey', `${JSON.stringify(routingKey)} is not a routing key of ${min} to 255 bytes in UTF-8`, min === 1 ? "An empty key is accepted only with an explicit `exchange` option (a fanout or headers exchange)." : undefined);
  }
}

/** The payload as JSON; {@link InvalidOptionError} when it has none. */
export function encodePayload(payload: unknown): string {
  try {
    const encoded = JSON.stringify(payload);
    if (encoded === undefined) throw new TypeError('payload is undefined or a function');
    return encoded;
  } catch (error) {
    throw new InvalidOptionError('payload', `it cannot be encoded as JSON (${error instanceof Error ? error.message : String(error)})`);
  }
}

/** The message id given in `options` (checked), else a new UUIDv7 of the time `now`. */
export function messageIdOf(options: PublishOptions, now: number): string {
  if (options.messageId == null) return uuidv7(now);
  const messageId = options.messageId;
  // AMQP short strings: 255 bytes, which an outbox row over the bound could never be sent in.
  if (typeof messageId !== 'string' || messageId.length === 0 || (messageId.length > 85 && Buffer.byteLength(messageId, 'utf8') > 255)) {
    throw new InvalidOptionError('messageId', `${JSON.stringify(messageId)} is not a message id of 1 to 255 bytes in UTF-8`);
  }
  return messageId;
}

/** When the event happened, in milliseconds: `options.occurredAt` (checked), else `now`. */
export function occurredAtOf(options: PublishOptions, now: number): number {
  if (options.occurredAt == null) return now;
  const occurredAt = options.occurredAt;
  if (!(occurredAt instanceof Date) || Number.isNaN(occurredAt.getTime())) throw new InvalidOptionError('occurredAt', 'expected a valid Date');
  return occurredAt.getTime();
}

/**
 * True when `options` leave a message's properties to the defaults (no headers,
 * occurred-at, correlation id or type): its properties then follow from its id and the
 * time of the call alone, and can be built when the message is written.
 */
export function hasDefaultProperties(options: PublishOptions): boolean {
  return options.headers === undefined && options.occurredAt == null && options.correlationId === undefined && options.type === undefined;
}

/**
 * The AMQP properties of a message (see {@link stampMessage}), the trace context aside:
 * a fresh object each call, with a copy of `options.headers`.
 */
export function stampProperties(messageId: string, occurredAt: number, options: PublishOptions): StampedMessage['properties'] {
  const iso = isoTime(occurredAt);
  // The common case, no extra headers, as an object literal (`satisfies` checks the
  // name against HEADER): a spread with a computed key costs a copy loop.
  const headers: Record<string, unknown> = options.headers === undefined ? ({ 'warren-occurred-at': iso } satisfies Record<typeof HEADER.occurredAt, string>) : { ...options.headers, [HEADER.occurredAt]: iso };
  const properties: StampedMessage['properties'] = {
    messageId,
    contentType: 'application/json',
    persistent: true,
    timestamp: Math.floor(occurredAt / 1000),
    headers,
  };
  if (options.correlationId !== undefined) properties.correlationId = options.correlationId;
  if (options.type !== undefined) properties.type = options.type;
  return properties;
}

let lastIsoAt = Number.NaN;
let lastIso = '';
/** The second {@link isoPrefix} is of, and its text up to the milliseconds (`2026-12-02T09:18:04.`). */
let prefixSecond = Number.NaN;
let isoPrefix = '';
/** The end of an ISO time for each millisecond of a second: `000Z` to `999Z`. */
const MS_SUFFIX: readonly string[] = Array.from({ length: 1000 }, (_, ms) => `${String(ms).padStart(3, '0')}Z`);

/**
 * `new Date(ms).toISOString()`, made from the text of its second (kept) and a suffix for
 * its millisecond: `toISOString()` cost about 0.5 µs, more than the rest of a publish's
 * stamp, and at a few publishes per millisecond the last millisecond's text seldom
 * serves the next. Years outside 0000-9999 (six-digit years) take `toISOString()` itself.
 */
export function isoTime(ms: number): string {
  if (ms === lastIsoAt) return lastIso;
  const second = Math.floor(ms / 1000);
  if (second !== prefixSecond) {
    const whole = new Date(second * 1000).toISOString();
    if (whole.length !== 24) return new Date(ms).toISOString();
    isoPrefix = whole.slice(0, 20);
    prefixSecond = second;
  }
  lastIso = isoPrefix + (MS_SUFFIX[ms - second * 1000] as string);
  lastIsoAt = ms;
  return lastIso;
}

/** The options of a publish given none: shared, never written to. */
export const NO_OPTIONS: PublishOptions = Object.freeze({});
