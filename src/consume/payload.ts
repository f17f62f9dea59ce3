/**
 * From body to payload: UTF-8 JSON, a message id when a guard needs one, the schema.
 * Shared by the consumer and `warren/testing`, so both refuse the same payloads.
 */
import { HandlerTimeoutError, InvalidPayloadError } from '../errors.js';
import { describeFailure } from '../park/failure.js';
import type { InvalidReason } from './contract.js';
import { formatIssues, type StandardSchemaV1 } from './schema.js';

/** A body or payload refused before the handler ran: parked with `reason` and `error`. */
export class PayloadRefused extends Error {
  constructor(readonly reason: InvalidReason, readonly error: unknown) {
    super(reason);
  }
}

/** Body text, or undefined when the body is not valid UTF-8 (`toString` would quietly replace the bad bytes). */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body as JSON (whatever the content type says); throws {@link PayloadRefused} `invalid-json`. */
export function parseJsonBody(content: Buffer, contentType: unknown): unknown {
  let text: string;
  try {
    text = utf8.decode(content);
  } catch (error) {
    throw new PayloadRefused('invalid-json', new InvalidPayloadError(`The body is not valid UTF-8, so it is not JSON; ${content.length} bytes, content type ${String(contentType ?? 'not set')}.`, [], { cause: error }));
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new PayloadRefused('invalid-json', new InvalidPayloadError(`The body is not valid JSON (${describeFailure(error).message}); ${content.length} bytes, content type ${String(contentType ?? 'not set')}.`, [], { cause: error }));
  }
}

/** With an idempotency guard, a message needs an id; throws {@link PayloadRefused} `missing-message-id`. */
export function requireMessageId(messageId: string | undefined, guarded: boolean): void {
  if (guarded && (messageId === undefined || messageId === '')) {
    throw new PayloadRefused('missing-message-id', new InvalidPayloadError('The message has no message id, so the idempotency guard cannot tell a duplicate from new work. Publish with a message id (warren stamps one) and replay it.'));
  }
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
    result = pending instanceof Promise ? await withinTimeout(pending, timeoutMs, consumer) : pending;
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

function withinTimeout<R>(pending: Promise<R>, timeoutMs: number, consumer: string): Promise<R> {
  return new Promise<R>((resolve, reject) => {
    const timer = setTimeout(() => reject(new HandlerTimeoutError(consumer, timeoutMs, 'schema')), timeoutMs);
    pending.then(
      (value) => { clearTimeout(timer); resolve(value); },
      (error: unknown) => { clearTimeout(timer); reject(error); },
    );
  });
}
