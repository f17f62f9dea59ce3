import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import { HEADER } from '../headers.js';
import { uuidv7 } from '../publish/message-id.js';
import type { OutgoingMessage, PublishOptions } from '../publish/publisher.js';

/** The AMQP properties kept in an outbox row (the message id has its own column). */
interface StoredProperties {
  contentType: string;
  timestamp: number;
  headers: Record<string, unknown>;
  correlationId?: string;
  type?: string;
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
}

/**
 * Builds an outbox row with the same rules as `Publisher.publish`: a routing key of 1 to
 * 255 characters, a JSON payload, a UUIDv7 message id unless given, the
 * `warren-occurred-at` header, JSON content type, the AMQP timestamp in seconds.
 * Headers must survive JSON (a `Date` becomes its ISO string).
 */
export function outboxRecord(routingKey: string, payload: unknown, options: PublishOptions = {}): OutboxRecord {
  if (typeof routingKey !== 'string' || routingKey.length === 0 || routingKey.length > 255) {
    throw new InvalidOptionError('routingKey', `${JSON.stringify(routingKey)} is not a routing key of 1 to 255 characters`);
  }
  let content: string;
  try {
    const json = JSON.stringify(payload);
    if (json === undefined) throw new TypeError('payload is undefined or a function');
    content = json;
  } catch (error) {
    throw new InvalidOptionError('payload', `it cannot be encoded as JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  const messageId = options.messageId ?? uuidv7();
  if (typeof messageId !== 'string' || messageId.length === 0 || messageId.length > 255) {
    throw new InvalidOptionError('messageId', `${JSON.stringify(messageId)} is not a message id of 1 to 255 characters`);
  }
  const occurredAt = options.occurredAt ?? new Date();
  if (!(occurredAt instanceof Date) || Number.isNaN(occurredAt.getTime())) throw new InvalidOptionError('occurredAt', 'expected a valid Date');
  const stored: StoredProperties = {
    contentType: 'application/json',
    timestamp: Math.floor(occurredAt.getTime() / 1000),
    headers: { ...options.headers, [HEADER.occurredAt]: occurredAt.toISOString() },
  };
  if (options.correlationId !== undefined) stored.correlationId = options.correlationId;
  if (options.type !== undefined) stored.type = options.type;
  let properties: string;
  try {
    properties = JSON.stringify(stored);
  } catch (error) {
    throw new InvalidOptionError('headers', `they cannot be stored as JSON (${error instanceof Error ? error.message : String(error)})`);
  }
  return { messageId, exchange: options.exchange ?? null, routingKey, content, properties };
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
  return { exchange: row.exchange ?? defaultExchange, routingKey: row.routingKey, content: Buffer.from(row.content, 'utf8'), properties };
}
