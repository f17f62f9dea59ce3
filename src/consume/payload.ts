/**
 * From body to payload: the decoder (UTF-8 JSON by default), the message id when a guard
 * needs one, the schema.
 * Shared by the consumer and `warren/testing`, so both refuse the same payloads.
 */
import { HandlerTimeoutError, InvalidPayloadError } from '../errors.js';
import type * as amqp from 'amqplib';
import { describeFailure } from '../park/failure.js';
import { codecFailure, DecodeFailure, type BodyDecoder } from './decode.js';
import type { MessageIdReader } from './message-id.js';
import type { InvalidReason } from './contract.js';
import { formatIssues, type StandardSchemaV1 } from './schema.js';

/** A body or payload refused before the handler ran: parked with `reason` and `error`. */
export class PayloadRefused extends Error {
  constructor(readonly reason: InvalidReason, readonly error: unknown) {
    super(reason);
  }
}

/**
 * The body as `decoder` reads it: synchronous for the built-in decoders; a codec's
 * promise gets the handler's time (`timeoutMs`, a transient {@link HandlerTimeoutError}
 * past it). A body the decoder cannot read throws {@link PayloadRefused}.
 */
export function decodeBody(decoder: BodyDecoder, msg: amqp.Message, timeoutMs: number, consumer: string): unknown {
  let value: unknown;
  try {
    value = decoder.decode(msg);
  } catch (error) {
    if (error instanceof DecodeFailure) throw new PayloadRefused(error.reason as InvalidReason, error.error);
    throw error;
  }
  if (!(value instanceof Promise)) return value;
  return withinTimeout(value, timeoutMs, consumer, 'decoder').catch((error: unknown) => {
    if (error instanceof HandlerTimeoutError) throw error; // transient: the ladder takes it
    const failure = codecFailure(decoder.name, msg, error);
    throw new PayloadRefused(failure.reason as InvalidReason, failure.error);
  });
}

/**
 * The message id: the producer's `message-id` property (`own`), else what `reader`
 * (the `messageIdFrom` option) finds, as `found`. With an idempotency guard (`guarded`),
 * a message with neither throws {@link PayloadRefused} `missing-message-id`: a duplicate
 * could not be told from new work; without one, `why` says where the reader looked.
 */
export function messageIdOf(reader: MessageIdReader | undefined, msg: amqp.Message, value: unknown, own: string | undefined, guarded: boolean): { id: string | undefined; found: boolean; why?: string } {
  if (own !== undefined && own !== '') return { id: own, found: false };
  const result = reader?.read(msg, value);
  if (result?.id !== undefined) return { id: result.id, found: true };
  if (!guarded) return result === undefined ? { id: own, found: false } : { id: undefined, found: false, why: result.why };
  const why = result
    ? `The message has no message id: the producer set no message-id property, and ${result.why} (messageIdFrom: ${reader?.source ?? ''}).`
    : 'The message has no message id.';
  throw new PayloadRefused('missing-message-id', new InvalidPayloadError(`${why} The idempotency guard cannot tell a duplicate from new work without one. Publish with a message id (warren stamps one)${result ? ', or fix messageIdFrom,' : ''} and replay it.`));
}

/**
 * Runs the schema; throws {@link PayloadRefused} `invalid-payload` for issues, a schema
 * that throws or one that returns nonsense. An asynchronous validate gets the handler's
 * time (`timeoutMs`): one that never settles fails with a {@link HandlerTimeoutError},
 * a transient failure, rather than holding the delivery until the broker's timeout.
 */
export async function validatePayload<T>(schema: StandardSchemaV1<unknown, T>, value: unknown, timeoutMs: number, consumer: string): Promise<T> {
  let result: Awaited<ReturnType<typeof schema['~standard']['validate']>>;
  try {
    const pending = schema['~standard'].validate(value);
    result = pending instanceof Promise ? await withinTimeout(pending, timeoutMs, consumer, 'schema') : pending;
  } catch (error) {
    if (error instanceof HandlerTimeoutError) throw error; // transient: the ladder takes it
    throw new PayloadRefused('invalid-payload', new InvalidPayloadError(`The schema threw instead of returning issues (${describeFailure(error).message}); the payload is treated as invalid. Fix the schema so it returns issues for any value, then replay.`, [], { cause: error }));
  }
  if (typeof result !== 'object' || result === null) {
    throw new PayloadRefused('invalid-payload', new InvalidPayloadError('The schema returned neither a value nor issues; the payload is treated as invalid. Fix the schema, then replay.'));
  }
  if (result.issues) {
    const issues = formatIssues(result.issues);
    throw new PayloadRefused('invalid-payload', new InvalidPayloadError(`The payload does not match the schema: ${issues.slice(0, 10).join('; ')}`, issues));
  }
  return result.value;
}

function withinTimeout<R>(pending: Promise<R>, timeoutMs: number, consumer: string, part: 'schema' | 'decoder'): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const timer = setTimeout(() => reject(new HandlerTimeoutError(consumer, timeoutMs, part)), timeoutMs);
    pending.then(
      (value) => { clearTimeout(timer); resolve(value); },
      (error: unknown) => { clearTimeout(timer); reject(error); },
    );
  });
}
