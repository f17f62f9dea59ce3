/**
 * A delivery's way to its decision, one path for the consumer and `warren/testing`: the
 * attempts its headers count, the crash-loop guard for a redelivery, the decoder, the
 * message id (`messageIdFrom`), the schema, the handler, then `decide()` (`classify`, a
 * timeout, the retry table's rules and tenant functions), and for a message that is to
 * wait, the id its retry-table row takes. Also what both say of a decision carried out:
 * the retry-table row and the log lines. The caller runs the handler (the consumer on its
 * clock, in its span, holding the message through a database outage; `warren/testing`
 * plainly) and carries the decision out. Loads no AMQP client.
 */
import type * as amqp from 'amqplib';
import { HEADER, MAX_HEADER_TABLE_BYTES } from '../headers.js';
import type { Logger } from '../logger.js';
import { describeFailure, type FailureInfo } from '../park/failure.js';
import { headerTableBytes } from '../park/message.js';
import { uuidv7 } from '../publish/message-id.js';
import { readAttempts, readInQueueAttempts } from '../retry/attempts.js';
import { retryRow } from '../retry-table/row.js';
import type { RetryRowInput } from '../retry-table/types.js';
import type { ConsumerTopology } from '../topology/declaration.js';
import { InvalidOptionError } from '../errors.js';
import { decide, type Decision, type Happening } from './contract.js';
import { originHeaders } from './copy-headers.js';
import { bodyDecoder, type BodyDecoder } from './decode.js';
import { idOf, type Identified } from './delivery.js';
import { happening, HandlerRun } from './handler-run.js';
import { messageIdReader, type MessageIdReader } from './message-id.js';
import { decodeBody, messageIdOf, validatePayload } from './payload.js';
import type { ConsumerOptions, MessageContext } from './types.js';

/** What the path reads of its consumer (the consumer's `ConsumerParts` has it all). */
export interface PathParts<T, Tx> {
  readonly name: string;
  readonly declaration: ConsumerTopology;
  readonly options: ConsumerOptions<T, Tx>;
  readonly logger: Logger;
  readonly timeoutMs: number;
  /** The consumer's retry queues, for reading attempts. */
  readonly retryQueueSet: ReadonlySet<string>;
  /** The time retry-table rows are counted from. @default the time of each decision */
  readonly now?: Date | undefined;
}

/** What the path carries of one delivery (the consumer's `Delivery`). */
export interface Travelling extends Identified {
  /** The payload its handler is given, while it runs. */
  payload: unknown;
  /** Its handler's run, while the handler runs. */
  run: HandlerRun<unknown> | undefined;
}

/** Runs the handler of a delivery whose `payload` and `run` are set; settles as `runHandler` does. */
export type HandlerStart<D extends Travelling> = (d: D) => Promise<void>;

/** Carries a decision out (the consumer's settler); the promise of what goes on after it returns, if anything. */
export type DecisionTaker<D extends Travelling> = (d: D, headers: Record<string, unknown>, decision: Decision) => Promise<void> | undefined;

/** The `decoder` and `messageIdFrom` options, validated together. */
export function bodyReaders(options: Pick<ConsumerOptions<unknown, unknown>, 'decoder' | 'messageIdFrom'>): { decoder: BodyDecoder; idReader: MessageIdReader | undefined } {
  const decoder = bodyDecoder(options.decoder);
  const idReader = messageIdReader(options.messageIdFrom);
  if (idReader?.readsPayload && !decoder.structured) {
    throw new InvalidOptionError('messageIdFrom', `${idReader.source} is read from the decoded payload, and the '${decoder.name}' decoder gives no fields`, "Use { header: name } or a function, or the 'json' decoder or a codec.");
  }
  return { decoder, idReader };
}

/** What `decide` is told of a handler that resolved (one object for every delivery). */
const RESOLVED: Happening = Object.freeze({ kind: 'resolved' });

/** One consumer's way from a delivery to its decision. */
export class DeliveryPath<T, Tx, D extends Travelling = Travelling> {
  constructor(
    private readonly parts: PathParts<T, Tx>,
    private readonly decoder: BodyDecoder,
    private readonly idReader: MessageIdReader | undefined,
    private readonly start: HandlerStart<D>,
    private readonly take: DecisionTaker<D>,
    /** The handler's `tx` when no guard gives one (`warren/testing`'s fake). */
    private readonly tx?: Tx,
  ) {}

  /** Failed runs before this delivery, from its headers (an unreadable count is logged); with `inQueue`, the broker's delivery count too. */
  attempts(msg: amqp.ConsumeMessage, headers: Readonly<Record<string, unknown>>): number {
    const attempts = this.parts.declaration.inQueue !== undefined ? readInQueueAttempts(headers, msg.fields.redelivered, this.parts.retryQueueSet) : readAttempts(headers, this.parts.retryQueueSet);
    if (attempts.warning) this.parts.logger.warn('attempt count unreadable', { consumer: this.parts.name, messageId: msg.properties.messageId as string | undefined, warning: attempts.warning });
    return attempts.failed;
  }

  /**
   * Takes `d` to its decision and hands that to the taker: `failed` runs before it (see
   * {@link attempts}); `seenInFlight`, for a redelivery, whether this process saw its
   * channel close with it unsettled. What any step before the decision throws is
   * decided; rejects only when the taker does. One async call per delivery, with the
   * taking inside it (no second promise per message).
   */
  async process(d: D, headers: Record<string, unknown>, failed: number, seenInFlight: boolean): Promise<void> {
    const { parts } = this;
    const { msg } = d;
    let payload: T | undefined;
    let decision: Decision | undefined;
    // Whether the message's id was looked for (the decoder finished), and why none was found.
    let looked = false;
    let why: string | undefined;
    try {
      if (msg.fields.redelivered) {
        const guard = decideFor(parts, d, headers, failed, { kind: 'redelivered', seenInFlight });
        if (guard.kind !== 'run') decision = guard;
      }
      if (decision === undefined) {
        const body = decodeBody(this.decoder, msg, parts.timeoutMs, parts.name);
        const value: unknown = body instanceof Promise ? await body : body;
        let messageId = msg.properties.messageId as string | undefined;
        // The producer's id, when there is one, is the id (see messageIdOf).
        if (messageId === undefined || messageId === '') {
          const id = messageIdOf(this.idReader, msg, value, messageId, parts.options.idempotency !== undefined);
          if (id.found && id.id !== undefined) d.foundId = id.id;
          messageId = id.id;
          why = id.why;
        }
        looked = true;
        const schema = parts.options.schema;
        payload = schema ? await validatePayload(schema, value, parts.timeoutMs, parts.name) : (value as T);
        const routingKey = typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : msg.fields.routingKey;
        d.payload = payload;
        d.run = new HandlerRun<Tx>(messageId, routingKey, headers, failed + 1, msg, this.tx as Tx) as HandlerRun<unknown>;
        await this.start(d);
        decision = decideFor(parts, d, headers, failed, RESOLVED);
      }
    } catch (caught) {
      decision = decideFor(parts, d, headers, failed, happening(caught), payload);
    }
    d.run = undefined;
    d.payload = undefined;
    if (decision.kind === 'wait' && idOf(d) === undefined) decision = this.waitWithoutId(d, headers, decision, looked, why);
    const taking = this.take(d, headers, decision);
    if (taking !== undefined) await taking;
  }

  /**
   * A message without an id is to wait, and a row needs one. When none can be found (its
   * id was looked for, or there is nowhere to look and no guard to match copies by), the
   * row takes a made-up id, which its copy keeps from then on. When it was not looked for
   * yet (the decoder did not finish) and `messageIdFrom` or a guard would need it, a
   * made-up id would come back as a message the guard cannot match with its other
   * copies: the ladder takes it, and the copy's id is read when it decodes.
   */
  private waitWithoutId(d: D, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'wait' }>, looked: boolean, why: string | undefined): Decision {
    const { parts, idReader } = this;
    if (looked || (idReader === undefined && parts.options.idempotency === undefined)) {
      d.madeUpId = uuidv7();
      if (idReader !== undefined) {
        parts.logger.warn(`messageIdFrom found no id (${why ?? 'none'}); the message waits in the retry table under a made-up id, which its copy keeps`, { consumer: parts.name, messageId: d.madeUpId, messageIdFrom: idReader.source, dependency: decision.dependency });
      }
      return decision;
    }
    parts.logger.warn(`the message has no id yet (its decoder did not finish), so it cannot wait in the retry table for '${decision.dependency}' under its own; the retry ladder takes it, and its copy's id is read when it decodes`, { consumer: parts.name, messageId: undefined, dependency: decision.dependency });
    return decideFor(parts, d, headers, decision.attempts, { kind: 'not-stored', error: decision.cause, outage: false });
  }
}

/**
 * What `decide` passes to the retry table's tenant functions for a failed delivery. Its
 * signal (already aborted: no handler runs now) is made only if read: AbortSignal.abort()
 * builds a DOMException, a stack trace on every delivery.
 */
class DecisionContext implements MessageContext<undefined> {
  readonly tx = undefined;

  constructor(
    readonly messageId: string | undefined,
    readonly routingKey: string,
    readonly headers: Readonly<Record<string, unknown>>,
    readonly attempt: number,
    readonly raw: amqp.ConsumeMessage,
  ) {}

  get signal(): AbortSignal {
    return AbortSignal.abort();
  }
}

/** The contract's decision for this delivery (see {@link decide}), its notes logged. */
export function decideFor<T, Tx>(parts: PathParts<T, Tx>, d: Identified, headers: Record<string, unknown>, failed: number, happened: Happening, payload?: T): Decision {
  const messageId = idOf(d);
  // Only a failure's decision reads the context (the retry table's tenant functions).
  const context = happened.kind === 'threw' || happened.kind === 'timed-out' ? new DecisionContext(messageId, d.msg.fields.routingKey, headers, failed + 1, d.msg) : undefined;
  const decision = decide({ happened, attempts: failed, headers, consumer: parts.declaration, classify: parts.options.classify, retryTable: parts.options.retryTable, payload, context, now: parts.now });
  if (decision.notes !== undefined) for (const note of decision.notes) parts.logger.error(note.message, { consumer: parts.name, messageId, ...(note.error === undefined ? {} : { error: errorText(note.error) }) });
  return decision;
}

/** Text for a log line about any thrown value; never throws. */
export function errorText(error: unknown): string {
  return describeFailure(error).message;
}

/** The retry-table row a wait decision stores: `headers` are the delivery's (with a trace's, when traced). */
export function waitingRow(parts: Pick<PathParts<unknown, unknown>, 'name' | 'declaration'>, d: Identified, messageId: string, headers: Readonly<Record<string, unknown>>, decision: Extract<Decision, { kind: 'wait' }>, failure: FailureInfo, now: Date): RetryRowInput {
  const origin = originHeaders(headers, d.msg.fields);
  return retryRow({
    messageId,
    content: d.msg.content,
    properties: d.msg.properties,
    headers,
    exchange: origin[HEADER.exchange] as string,
    routingKey: origin[HEADER.routingKey] as string,
    consumer: parts.name,
    queue: parts.declaration.queue,
    parkedQueue: parts.declaration.parkedQueue,
    waits: decision.waits,
    failure,
    decision,
    now,
  });
}

/** The line a retry logs once its copy is confirmed. */
export function logRetried(parts: Pick<PathParts<unknown, unknown>, 'name' | 'declaration' | 'logger'>, messageId: string | undefined, decision: Extract<Decision, { kind: 'retry' }>, failure: FailureInfo): void {
  parts.logger.info(`handler failed (${failure.errorClass}: ${firstLine(failure.message)}); retrying in ${decision.delayMs} ms`, {
    consumer: parts.name, messageId, attempts: decision.attempts, maxAttempts: parts.declaration.maxAttempts, tier: decision.tier, delayMs: decision.delayMs, queue: decision.queue,
    errorClass: failure.errorClass, error: failure.message,
  });
}

/** The line a park logs once its copy is confirmed (none for a minimal park: its cause was logged). */
export function logParked(parts: Pick<PathParts<unknown, unknown>, 'name' | 'declaration' | 'logger'>, messageId: string | undefined, decision: Extract<Decision, { kind: 'park' }>, failure: FailureInfo): void {
  if (decision.minimal) return;
  const { reason, attempts } = decision;
  parts.logger.warn(`message parked (${reason}; ${failure.errorClass}: ${firstLine(failure.message)})`, { consumer: parts.name, messageId, reason, attempts, queue: parts.declaration.parkedQueue, errorClass: failure.errorClass, error: failure.message });
}

/** The line a wait logs once its row is stored and the message acked (`stored`: the row's id and pause; unknown without a table). */
export function logWaiting(parts: Pick<PathParts<unknown, unknown>, 'name' | 'logger'>, messageId: string, decision: Extract<Decision, { kind: 'wait' }>, failure: FailureInfo, stored: { readonly id: string; readonly paused: boolean } | undefined): void {
  parts.logger.info(`message waits in the retry table for '${decision.dependency}' (${failure.errorClass}: ${firstLine(failure.message)})`, {
    consumer: parts.name, messageId, waits: decision.waits, dependency: decision.dependency, tenant: decision.tenant, row: stored?.id, paused: stored?.paused, errorClass: failure.errorClass, error: failure.message,
  });
}

/** Why a copy's header table cannot be published (more encoded bytes than warren publishes), or undefined when it can. */
export function oversizeHeaders(table: Readonly<Record<string, unknown>>): string | undefined {
  const bytes = headerTableBytes(table);
  return bytes > MAX_HEADER_TABLE_BYTES ? `${bytes} bytes of headers, more than ${MAX_HEADER_TABLE_BYTES}` : undefined;
}

/** The line of a copy whose headers cannot be encoded, parked with warren's essentials instead (that park logs no line of its own). */
export function logUnencodable(parts: Pick<PathParts<unknown, unknown>, 'name' | 'logger'>, messageId: string | undefined, queue: string, why: string): void {
  parts.logger.error("the copy's headers cannot be encoded; parking it with minimal metadata instead", { consumer: parts.name, messageId, queue, why });
}

/** The first line of an error message, cut to 200 characters, for a log line's text (the whole message is a field). */
function firstLine(message: string): string {
  const line = message.split('\n', 1)[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}
