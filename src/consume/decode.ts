import type * as amqp from 'amqplib';
import { TextDecoder } from 'node:util';
import { InvalidOptionError, InvalidPayloadError } from '../errors.js';
import type { ParkReason } from '../headers.js';
import { describeFailure } from '../park/failure.js';

/**
 * Turns a body into a payload for producers that do not send JSON. `decode` gets a copy
 * of the body and of the properties, so nothing it does changes the message warren
 * retries or parks. It may return a promise (bounded by the consumer's `timeoutMs`).
 * A decode that throws parks the message (`invalid-payload`) with the codec's name.
 *
 * @example
 * const csv: Codec<string[]> = { name: 'csv', decode: (body) => body.toString('utf8').split(',') };
 * await warren.consume('imports', handler, { decoder: csv });
 */
export interface Codec<V = unknown> {
  /**
   * Named in the parked reason when `decode` throws.
   * @default 'codec'
   */
  readonly name?: string;
  /** The payload from the body's bytes (a copy) and the message's properties; throw or reject for a body it cannot read. */
  decode(body: Buffer, properties: amqp.MessageProperties): V | Promise<V>;
}

/**
 * How a consumer reads a body: `'json'` (UTF-8 JSON), `'text'` (a string, in the charset
 * the content type names, else UTF-8), `'buffer'` (the bytes as they came, copied), or a
 * {@link Codec}. The schema, when there is one, validates what the decoder returns.
 */
export type Decoder = 'json' | 'text' | 'buffer' | Codec;

/** A decoder could not read a body: park with this reason and error. */
export class DecodeFailure extends Error {
  constructor(readonly reason: ParkReason, readonly error: InvalidPayloadError) {
    super(error.message);
  }
}

/** A decoder, validated once. */
export interface BodyDecoder {
  /** As named in errors: `json`, `text`, `buffer`, or the codec's name. */
  readonly name: string;
  /**
   * The payload, a promise of it (an asynchronous codec), or a {@link DecodeFailure}
   * thrown. A codec's rejection is passed through as it is (a timeout stays transient);
   * the caller turns any other rejection into a DecodeFailure with {@link codecFailure}.
   */
  decode(msg: amqp.Message): unknown;
  /** True when the decoder gives objects whose fields a message-id path can read. */
  readonly structured: boolean;
}

/** Body text, or a throw when the body is not valid UTF-8 (`toString` would quietly replace the bad bytes). */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function describeBody(msg: amqp.Message): string {
  return `${msg.content.length} bytes, content type ${typeof msg.properties.contentType === 'string' ? msg.properties.contentType : 'not set'}`;
}

function errorText(error: unknown): string {
  return describeFailure(error).message;
}

function decodeJson(msg: amqp.Message): unknown {
  let text: string;
  try {
    text = utf8.decode(msg.content);
  } catch (error) {
    throw new DecodeFailure('invalid-json', new InvalidPayloadError(`The body is not valid UTF-8, so it is not JSON; ${describeBody(msg)}.`, [], { cause: error }));
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new DecodeFailure('invalid-json', new InvalidPayloadError(`The body is not valid JSON (${errorText(error)}); ${describeBody(msg)}.`, [], { cause: error }));
  }
}

/** The `charset` parameter of a content type (`text/plain; charset=iso-8859-1`), if any. */
export function charsetOf(contentType: unknown): string | undefined {
  if (typeof contentType !== 'string') return undefined;
  const m = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(contentType);
  return m?.[1]?.toLowerCase();
}

const textDecoders = new Map<string, TextDecoder>([['utf-8', utf8]]);

function decodeText(msg: amqp.Message): string {
  const charset = charsetOf(msg.properties.contentType) ?? 'utf-8';
  let decoder = textDecoders.get(charset);
  if (decoder === undefined) {
    try {
      decoder = new TextDecoder(charset, { fatal: true, ignoreBOM: true });
    } catch (error) {
      throw new DecodeFailure('invalid-payload', new InvalidPayloadError(`The 'text' decoder does not know the charset '${charset}' of the content type; ${describeBody(msg)}. Decode it with a codec, or have the producer send UTF-8.`, [], { cause: error }));
    }
    if (textDecoders.size < 32) textDecoders.set(charset, decoder);
  }
  try {
    return decoder.decode(msg.content);
  } catch (error) {
    throw new DecodeFailure('invalid-payload', new InvalidPayloadError(`The 'text' decoder could not read the body as ${charset}; ${describeBody(msg)}.`, [], { cause: error }));
  }
}

/** The DecodeFailure of a codec that threw or rejected. */
export function codecFailure(name: string, msg: amqp.Message, error: unknown): DecodeFailure {
  return new DecodeFailure(
    'invalid-payload',
    new InvalidPayloadError(`The decoder '${name}' threw (${errorText(error)}); the body is treated as invalid (${describeBody(msg)}). Fix the decoder or the producer, then replay.`, [], { cause: error }),
  );
}

/** Validates the `decoder` option once. */
export function bodyDecoder(option: unknown): BodyDecoder {
  if (option === undefined || option === 'json') return { name: 'json', decode: decodeJson, structured: true };
  if (option === 'text') return { name: 'text', decode: decodeText, structured: false };
  // A copy: a handler that writes into its buffer must not change what is retried or parked.
  if (option === 'buffer') return { name: 'buffer', decode: (msg) => Buffer.from(msg.content), structured: false };
  if (typeof option === 'object' && option !== null && typeof (option as Codec).decode === 'function') {
    const codec = option as Codec;
    const rawName: unknown = codec.name;
    if (rawName !== undefined && (typeof rawName !== 'string' || rawName.length === 0 || rawName.length > 100)) {
      throw new InvalidOptionError('decoder.name', `${JSON.stringify(rawName)} is not a name of 1 to 100 characters`);
    }
    const name = rawName ?? 'codec';
    return {
      name,
      structured: true,
      decode: (msg) => {
        try {
          return codec.decode(Buffer.from(msg.content), { ...msg.properties, headers: { ...(msg.properties.headers ?? {}) } });
        } catch (error) {
          throw codecFailure(name, msg, error);
        }
      },
    };
  }
  throw new InvalidOptionError('decoder', `${typeof option === 'string' ? JSON.stringify(option) : 'that value'} is not a decoder`, "Use 'json', 'text', 'buffer', or a codec { name?, decode(body, properties) }.");
}
