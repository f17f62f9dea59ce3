import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import { describeFailure } from '../park/failure.js';

/**
 * Where a consumer finds a message's id when the producer did not set the AMQP
 * `message-id` property (a producer that is not warren): a header, a field of the
 * decoded payload (a dotted path), or a function of the delivery and the payload. The id
 * must be the same on every copy of the message, so the idempotency guard can tell a
 * duplicate: take it from what the producer sent, never from the time or a random number.
 *
 * @example
 * { messageIdFrom: { header: 'x-request-id' } }
 * { messageIdFrom: { field: 'order.id' } }
 * { messageIdFrom: (msg, payload) => `${msg.properties.appId}:${(payload as { seq: number }).seq}` }
 */
export type MessageIdSource =
  | { readonly header: string }
  | { readonly field: string }
  | ((msg: amqp.Message, payload: unknown) => string | undefined);

/** The longest id kept, in characters and in UTF-8 bytes: the AMQP `message-id` property is a short string (255 bytes). */
export const MAX_MESSAGE_ID_CHARS = 255;

/** What {@link MessageIdReader.read} found: an id, or why there is none. */
export type MessageIdResult = { readonly id: string } | { readonly id: undefined; readonly why: string };

/** A validated {@link MessageIdSource}. */
export interface MessageIdReader {
  /** `header 'x-request-id'`, `payload field 'order.id'`, `the messageIdFrom function`. */
  readonly source: string;
  /** True when it reads the payload (the decoder must give objects). */
  readonly readsPayload: boolean;
  /** The id of a message that has no `message-id` property. Never throws. */
  read(msg: amqp.Message, payload: unknown): MessageIdResult;
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return `a value of type ${typeof value}`;
}

/** An id from a header or field value: text, a whole number or a byte string; else why not. */
function asId(value: unknown, where: string): MessageIdResult {
  let id: string | undefined;
  if (typeof value === 'string') id = value;
  else if (typeof value === 'number' && Number.isFinite(value)) id = String(value);
  else if (typeof value === 'bigint') id = String(value);
  else if (Buffer.isBuffer(value)) id = value.toString('utf8');
  if (value === undefined) return { id: undefined, why: `${where} is absent` };
  if (id === undefined) return { id: undefined, why: `${where} holds ${describeValue(value)}, not a text or number id` };
  if (id.length === 0) return { id: undefined, why: `${where} is empty` };
  if (id.length > MAX_MESSAGE_ID_CHARS) return { id: undefined, why: `${where} is ${id.length} characters long, more than ${MAX_MESSAGE_ID_CHARS}` };
  // A copy sent back (the retry table) carries the id as its message-id property: 255 bytes at most.
  const bytes = Buffer.byteLength(id, 'utf8');
  if (bytes > MAX_MESSAGE_ID_CHARS) return { id: undefined, why: `${where} is ${bytes} bytes long in UTF-8, more than the ${MAX_MESSAGE_ID_CHARS} of an AMQP message id` };
  return { id };
}

/** A dotted path's value in a decoded payload, reading own properties only. */
function fieldValue(payload: unknown, path: readonly string[]): unknown {
  let at: unknown = payload;
  for (const part of path) {
    if (typeof at !== 'object' || at === null || !Object.hasOwn(at, part)) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

/** Validates the `messageIdFrom` option once; undefined when it is not set. */
export function messageIdReader(option: unknown): MessageIdReader | undefined {
  if (option === undefined) return undefined;
  if (typeof option === 'function') {
    const fn = option as (msg: amqp.Message, payload: unknown) => unknown;
    const source = 'the messageIdFrom function';
    return {
      source,
      readsPayload: false,
      read(msg, payload) {
        let value: unknown;
        try {
          value = fn(msg, payload);
        } catch (error) {
          return { id: undefined, why: `${source} threw (${describeFailure(error).message})` };
        }
        if (value !== undefined && typeof value !== 'string') return { id: undefined, why: `${source} returned ${describeValue(value)}, not a string` };
        return asId(value, `the id ${source} returned`);
      },
    };
  }
  if (typeof option === 'object' && option !== null) {
    const o = option as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && typeof o['header'] === 'string' && o['header'].length > 0) {
      const name = o['header'];
      const source = `header '${name}'`;
      return { source, readsPayload: false, read: (msg) => asId(msg.properties.headers?.[name], `the ${source}`) };
    }
    if (keys.length === 1 && typeof o['field'] === 'string') {
      const path = o['field'].split('.');
      if (path.some((p) => p.length === 0)) throw new InvalidOptionError('messageIdFrom.field', `${JSON.stringify(o['field'])} is not a dotted path`, "Example: { field: 'order.id' }");
      const source = `payload field '${o['field']}'`;
      return { source, readsPayload: true, read: (_msg, payload) => asId(fieldValue(payload, path), `the ${source}`) };
    }
  }
  throw new InvalidOptionError('messageIdFrom', 'expected { header: name }, { field: dotted.path } or a function (msg, payload) => string | undefined', "Example: { header: 'x-request-id' }");
}
