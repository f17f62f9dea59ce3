import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import type { OutgoingMessage } from '../publish/publisher.js';
import { stampMessage, type PublishOptions } from '../publish/stamp.js';
import type { RelaySource } from './relay-source.js';

export type { RelaySource };

/** The AMQP properties kept in an outbox row (the message id has its own column). */
interface StoredProperties {
  contentType: string;
  timestamp: number;
  headers: Record<string, unknown>;
  correlationId?: string;
  type?: string;
  contentEncoding?: string;
  appId?: string;
  /** `'base64'`: the row's content is the body's bytes in base64 (a retry-table row whose body is not UTF-8). */
  bodyEncoding?: 'base64';
}

/** What an outbox row holds, before the database gives it an id. */
export interface OutboxRecord {
  readonly messageId: string;
  /** `null`: the relay's exchange. */
  readonly exchange: string | null;
  readonly routingKey: string;
  /** The JSON body. */
  readonly content: string;
  /** JSON of the AMQP properties. */
  readonly properties: string;
}

/** An outbox row as the relay reads it. */
export interface OutboxRow extends OutboxRecord {
  /** Insertion order, as a string (a 64-bit integer). */
  readonly id: string;
  readonly attempts: number;
  /**
   * Who added the row: the application (`outbox.add`), the retry-table scheduler
   * sending a waiting message back, or `retryTable.park()` sending a waiting message to
   * its parked queue. The relay's trace span tells them apart.
   * @default 'outbox'
   */
  readonly origin?: RelaySource;
}

/**
 * The `origin` column as the relay reports it: `'retry'` marks a row sent back from the
 * retry table, `'park'` a retry-table row parked by an operator; no value, an
 * application's row.
 */
export function rowOrigin(column: unknown): RelaySource {
  return column === 'retry' ? 'retry-table' : column === 'park' ? 'retry-table-park' : 'outbox';
}

/**
 * Builds an outbox row with the same rules as `Publisher.publish`: a routing key of 1 to
 * 255 characters, a JSON payload, a UUIDv7 message id unless given, the
 * `warren-occurred-at` header, JSON content type, the AMQP timestamp in seconds.
 * Headers must survive JSON (a `Date` becomes its ISO string).
 */
export function outboxRecord(routingKey: string, payload: unknown, options: PublishOptions = {}): OutboxRecord {
  const { messageId, json, properties: p } = stampMessage(routingKey, payload, options);
  const stored: StoredProperties = { contentType: p.contentType, timestamp: p.timestamp, headers: p.headers };
  if (p.correlationId !== undefined) stored.correlationId = p.correlationId;
  if (p.type !== undefined) stored.type = p.type;
  let properties: string;
  try {
    properties = JSON.stringify(stored);
  } catch (error) {
    throw new InvalidOptionError('headers', `they cannot be stored as JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  return { messageId, exchange: options.exchange ?? null, routingKey, content: json, properties };
}

/** The message the relay publishes for a row: persistent, with the row's message id. */
export function outgoingMessage(row: OutboxRecord, defaultExchange: string): OutgoingMessage {
  const stored = JSON.parse(row.properties) as StoredProperties;
  const properties: amqp.Options.Publish = {
    messageId: row.messageId,
    contentType: stored.contentType,
    persistent: true,
    timestamp: stored.timestamp,
    headers: stored.headers,
  };
  if (stored.correlationId !== undefined) properties.correlationId = stored.correlationId;
  if (stored.type !== undefined) properties.type = stored.type;
  if (stored.contentEncoding !== undefined) properties.contentEncoding = stored.contentEncoding;
  if (stored.appId !== undefined) properties.appId = stored.appId;
  const content = Buffer.from(row.content, stored.bodyEncoding === 'base64' ? 'base64' : 'utf8');
  return { exchange: row.exchange ?? defaultExchange, routingKey: row.routingKey, content, properties };
}

/** The headers of a row's stored properties; none when they do not parse. */
export function storedHeaders(properties: string): Record<string, unknown> {
  try {
    return (JSON.parse(properties) as Partial<StoredProperties>).headers ?? {};
  } catch {
    return {};
  }
}
