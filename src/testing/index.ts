/**
 * `warren/testing`: run a handler against one message and get the outcome the real
 * consumer would reach (acked, retried to tier N after D ms, parked with reason R and
 * the headers it would write, a retry-table row) with no broker, in milliseconds.
 *
 * It runs the consumer's own path to the decision (src/consume/path.ts: the decoder, the
 * message id, the schema, the handler clock, `classify`, `decide()`, the retry table's
 * rules and tenant functions, the id a waiting row takes), and says what the consumer would
 * write and log. Only the handler's start is its own: no span, and a database outage is not
 * held. It loads no AMQP client.
 *
 * @example
 * import { runDelivery } from 'warren/testing';
 * const result = await runDelivery(topology.consumer('billing'), chargeOrder, { payload: { orderId: 1 }, attempt: 3 });
 * expect(result).toMatchObject({ kind: 'retried', tier: 2 });
 */
import type * as amqp from 'amqplib';
import { WarrenError } from '../errors.js';
import { HEADER, type ParkReason } from '../headers.js';
import type { Logger } from '../logger.js';
import type { Decision, DecisionNote } from '../consume/contract.js';
import { copyHeaders } from '../consume/copy-headers.js';
import { idOf } from '../consume/delivery.js';
import { DuplicateDelivery, type HandlerRun, runHandler, StoreOutage } from '../consume/handler-run.js';
import { bodyReaders, decideFor, DeliveryPath, logParked, logRetried, logUnencodable, logWaiting, oversizeHeaders, waitingRow, type PathParts } from '../consume/path.js';
import type { ConsumerOptions, Handler, MessageContext } from '../consume/types.js';
import { describeFailure, type FailureInfo } from '../park/failure.js';
import { withoutBrokerHeaders } from '../park/message.js';
import { uuidv7 } from '../publish/message-id.js';
import type { RetryRowInput } from '../retry-table/types.js';
import type { ConsumerTopology } from '../topology/declaration.js';

/** The message to run, as the consumer would receive it. */
export interface TestMessage {
  /** The payload, sent as JSON. Ignored when `body` is given. @default {} */
  payload?: unknown;
  /** The raw body instead of a payload (to test what is not JSON). */
  body?: Buffer | string;
  /** The message id; `null` for none. @default a fresh UUIDv7 */
  messageId?: string | null;
  /** The routing key it was published with. @default the consumer's first binding, with `*` and `#` read as `x` */
  routingKey?: string;
  /** The exchange it was published to. @default 'warren.events' */
  exchange?: string;
  /** Its headers, warren's own included (`warren-waits`, `warren-redeliveries`, ...). @default {} */
  headers?: Record<string, unknown>;
  /**
   * This run's number as the handler sees it (`context.attempt`): sets `warren-attempts`
   * to `attempt - 1` unless `headers` has it.
   * @default 1
   */
  attempt?: number;
  /** The broker's `redelivered` flag: the crash-loop guard looks at the message first. @default false */
  redelivered?: boolean;
  /** @default 'application/json' */
  contentType?: string;
}

/** The consumer options the outcome depends on, as `warren.consume()` takes them. */
export interface TestOptions<T = unknown, Tx = undefined> extends Pick<ConsumerOptions<T, Tx>, 'schema' | 'classify' | 'timeoutMs' | 'commitTimeoutMs' | 'retryTable' | 'idempotency' | 'decoder' | 'messageIdFrom'> {
  /**
   * The handler's `context.tx` when there is no `idempotency` guard: a fake, or a real
   * transaction you opened. With a guard (e.g. the SQLite store's), the guard opens it.
   */
  tx?: Tx;
  /** The time a retry-table row's next attempt and the failure headers are counted from. @default new Date() */
  now?: Date;
}

/** What the consumer would do with the message. */
export interface TestOutcome {
  /** The outcome the consumer would report (its `outcome` event's `kind`). */
  readonly kind: 'acked' | 'duplicate' | 'retried' | 'parked' | 'waiting' | 'requeued' | 'redelivery-moved';
  /** `decide()`'s decision, as the consumer would apply it. */
  readonly decision: Decision;
  /** The queue the copy is published to: a retry tier, the parked queue, or the work queue (a crash-loop move). */
  readonly queue: string | undefined;
  /** The copy's headers, as published (the broker's own dropped). */
  readonly headers: Readonly<Record<string, unknown>> | undefined;
  /** Retry tier and its delay, when retried. */
  readonly tier: number | undefined;
  readonly delayMs: number | undefined;
  /** Why it was parked, when parked. */
  readonly reason: ParkReason | undefined;
  /** `warren-attempts` on the copy (failed runs so far), when copied. */
  readonly attempts: number | undefined;
  /** The retry-table row the consumer would insert, when waiting (nothing is inserted). */
  readonly row: RetryRowInput | undefined;
  /** True when the handler ran. */
  readonly ran: boolean;
  /** What the handler threw (or the payload's, schema's, timeout's error); undefined when it resolved. */
  readonly error: unknown;
  /** What the consumer would log about the decision (a `classify` that threw, a missing `retryTable`). */
  readonly notes: readonly DecisionNote[];
  /**
   * The message id the consumer would report in its outcome: the producer's `message-id`,
   * else what `messageIdFrom` found, else (a message that waits) the id its row is given.
   */
  readonly messageId: string | undefined;
  /**
   * Every line the consumer would log about this delivery, in order: the notes, the
   * line of its outcome (`handler failed (...); retrying in 5000 ms`, `message parked
   * (...)`, `message waits in the retry table for '...'`), and warnings such as a row
   * under a made-up id. A waiting line has no `row` or `paused` (nothing is inserted).
   */
  readonly log: readonly LogLine[];
}

/** A line the consumer would log, as its logger is called. */
export interface LogLine {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields: Readonly<Record<string, unknown>>;
}

const DEFAULT_TIMEOUT_MS = 60_000;

/**
 * Runs `handler` against one message as `consumer` would (a declaration from your
 * topology: `topology.consumer('billing')`), and says what the consumer would do.
 * Nothing is published or acked; a retry-table row is returned, not inserted; an
 * idempotency guard you pass does run (its transaction commits or rolls back as in
 * production). A database outage is not held for `storeOutageHoldMs`: the outcome is
 * the one the consumer reaches when the hold runs out.
 */
export async function runDelivery<T = unknown, Tx = undefined>(
  consumer: ConsumerTopology,
  // `Tx` from the options' guard, as in `warren.consume()`: a handler that needs a transaction needs the guard.
  handler: Handler<T, NoInfer<Tx>>,
  message: TestMessage = {},
  options: TestOptions<T, Tx> = {},
): Promise<TestOutcome> {
  const now = options.now ?? new Date();
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const msg = consumeMessage(consumer, message);
  const headers = msg.properties.headers as Record<string, unknown>;
  const log: LogLine[] = [];
  const parts: PathParts<T, Tx> = { name: consumer.name, declaration: consumer, options, logger: keeper(log), timeoutMs, retryQueueSet: new Set(consumer.retryQueues), now };
  const { decoder, idReader } = bodyReaders(options);
  const guard = guardRunner(options, consumer.name);
  let ran = false;
  // The consumer's own path to the decision, with the handler run plainly (no hold through an outage).
  const start = (d: TestDelivery): Promise<void> => {
    ran = true;
    const run = d.run as HandlerRun<Tx>;
    return runHandler(handler, d.payload as T, run, timeoutMs, consumer.name, guard && ((work, signal) => guard(run.messageId as string, work, signal)), undefined, options.commitTimeoutMs);
  };
  let decision: Decision | undefined;
  const path = new DeliveryPath<T, Tx, TestDelivery>(parts, decoder, idReader, start, (_d, _headers, decided) => void (decision = decided), options.tx);
  const d: TestDelivery = { msg, foundId: undefined, madeUpId: undefined, payload: undefined, run: undefined };
  await path.process(d, headers, path.attempts(msg, headers), false);
  return outcome(parts, d, decision as Decision, now, ran, log);
}

/** A delivery on its way through the path (the consumer's `Delivery`, without a channel). */
interface TestDelivery {
  readonly msg: amqp.ConsumeMessage;
  foundId: string | undefined;
  madeUpId: string | undefined;
  payload: unknown;
  run: HandlerRun<unknown> | undefined;
}

/** A logger that keeps the lines, in the order logged. */
function keeper(lines: LogLine[]): Logger {
  const at = (level: LogLine['level']) => (message: string, fields: Record<string, unknown> = {}) => void lines.push({ level, message, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** The guard called as the consumer calls it (without holding the message through an outage). */
function guardRunner<T, Tx>(options: TestOptions<T, Tx>, consumer: string): ((messageId: string, work: (tx: Tx) => Promise<void>, signal: AbortSignal) => Promise<void>) | undefined {
  const guard = options.idempotency;
  if (guard === undefined) return undefined;
  return async (messageId, work, signal) => {
    let result: 'done' | 'duplicate';
    try {
      result = await guard.run(messageId, consumer, work, signal);
    } catch (error) {
      if (error instanceof WarrenError && error.code === 'STORE_UNAVAILABLE') throw new StoreOutage(error);
      throw error;
    }
    if (result === 'duplicate') throw new DuplicateDelivery();
  };
}

/** The decision as the consumer would carry it out: which queue, which headers, which row, which log line. */
function outcome<T, Tx>(parts: PathParts<T, Tx>, d: TestDelivery, decided: Decision, now: Date, ran: boolean, log: LogLine[]): TestOutcome {
  const consumer = parts.declaration;
  const { msg } = d;
  const headers = msg.properties.headers as Record<string, unknown>;
  const messageId = idOf(d);
  let decision = decided;
  const base = { messageId, decision, ran, error: failureOf(decided), notes: decided.notes ?? [], log, queue: undefined, headers: undefined, tier: undefined, delayMs: undefined, reason: undefined, attempts: undefined, row: undefined };
  switch (decision.kind) {
    case 'ack':
      return { ...base, kind: decision.duplicate ? 'duplicate' : 'acked' };
    case 'requeue':
    case 'run':
      return { ...base, kind: 'requeued' };
    case 'wait': {
      const failure = describeFailure(decision.error);
      // The path gives every message that is to wait an id.
      const row = waitingRow(parts, d, messageId as string, headers, decision, failure, now);
      logWaiting(parts, messageId as string, decision, failure, undefined);
      return { ...base, kind: 'waiting', row };
    }
    case 'retry':
    case 'park':
    case 'move-back': {
      let queue = decision.kind === 'retry' ? decision.queue : decision.kind === 'park' ? consumer.parkedQueue : consumer.queue;
      const failure = decision.kind === 'move-back' ? undefined : describeFailure(decision.error);
      let copy = withoutBrokerHeaders(copyHeaders(decision, headers, msg.fields, consumer.name, now, failure));
      const oversize = oversizeHeaders(copy);
      if (oversize !== undefined) {
        // As the consumer does: a copy that cannot carry its headers is parked with warren's essentials.
        logUnencodable(parts, messageId, queue, oversize);
        decision = decideFor(parts, d, headers, 0, { kind: 'unencodable', intended: decision });
        queue = consumer.parkedQueue;
        copy = withoutBrokerHeaders(copyHeaders(decision as Extract<Decision, { kind: 'park' }>, headers, msg.fields, consumer.name, now));
      }
      if (decision.kind === 'retry') logRetried(parts, messageId, decision, failure as FailureInfo);
      else if (decision.kind === 'park') logParked(parts, messageId, decision, failure ?? describeFailure(decision.error));
      const kind = decision.kind === 'retry' ? 'retried' : decision.kind === 'park' ? 'parked' : 'redelivery-moved';
      return {
        ...base,
        decision,
        kind,
        queue,
        headers: copy,
        tier: decision.kind === 'retry' ? decision.tier : undefined,
        delayMs: decision.kind === 'retry' ? decision.delayMs : undefined,
        reason: decision.kind === 'park' ? decision.reason : undefined,
        attempts: decision.kind === 'move-back' ? undefined : (decision as { attempts: number }).attempts,
      };
    }
  }
}

/** What failed, as the decision carries it: what was thrown (a wait's own error, not its cause); none for the crash-loop guard's. */
function failureOf(decision: Decision): unknown {
  if (decision.kind === 'wait') return decision.cause;
  if (decision.kind === 'move-back' || (decision.kind === 'park' && decision.reason === 'crash-loop')) return undefined;
  return 'error' in decision ? decision.error : undefined;
}

/** A routing key that one of the consumer's bindings matches. */
function defaultRoutingKey(consumer: ConsumerTopology): string {
  const binding = consumer.bindings[0] ?? 'test';
  return binding.split('.').map((w) => (w === '*' || w === '#' ? 'x' : w)).join('.');
}

/** The delivery as amqplib would hand it to the consumer. */
function consumeMessage(consumer: ConsumerTopology, m: TestMessage): amqp.ConsumeMessage {
  const headers: Record<string, unknown> = { ...(m.headers ?? {}) };
  const attempt = m.attempt ?? 1;
  if (!Number.isInteger(attempt) || attempt < 1) throw new TypeError(`attempt: ${String(attempt)} is not a run number (1 for the first delivery)`);
  if (headers[HEADER.attempts] === undefined && attempt > 1) headers[HEADER.attempts] = attempt - 1;
  const content = m.body !== undefined ? (typeof m.body === 'string' ? Buffer.from(m.body) : m.body) : Buffer.from(JSON.stringify(m.payload ?? {}));
  const messageId = m.messageId === null ? undefined : (m.messageId ?? uuidv7());
  return {
    content,
    fields: { deliveryTag: 1, redelivered: m.redelivered ?? false, exchange: m.exchange ?? 'warren.events', routingKey: m.routingKey ?? defaultRoutingKey(consumer), consumerTag: 'warren-testing' },
    properties: {
      contentType: m.contentType ?? 'application/json', contentEncoding: undefined, headers, deliveryMode: 2, priority: undefined, correlationId: undefined,
      replyTo: undefined, expiration: undefined, messageId, timestamp: undefined, type: undefined, userId: undefined, appId: undefined, clusterId: undefined,
    },
  } as amqp.ConsumeMessage;
}

/** What {@link messageContext} fills in. */
export interface ContextOptions<Tx = undefined> {
  /** @default a fresh UUIDv7 */
  messageId?: string | undefined;
  /** @default 'test' */
  routingKey?: string;
  /** @default {} */
  headers?: Record<string, unknown>;
  /** @default 1 */
  attempt?: number;
  /** @default an AbortSignal that never aborts */
  signal?: AbortSignal;
  /** The handler's `tx`. */
  tx?: Tx;
  /** The body of `raw`. @default {} */
  payload?: unknown;
}

/**
 * A {@link MessageContext} for calling a handler directly in a unit test, with `raw`
 * filled in as amqplib would.
 *
 * @example
 * await chargeOrder({ orderId: 1 }, messageContext({ attempt: 2, tx: fakeTx }));
 */
export function messageContext<Tx = undefined>(options: ContextOptions<Tx> = {}): MessageContext<Tx> {
  const messageId = 'messageId' in options ? options.messageId : uuidv7();
  const routingKey = options.routingKey ?? 'test';
  const headers = options.headers ?? {};
  const raw = consumeMessage({ bindings: [routingKey] } as unknown as ConsumerTopology, { payload: options.payload ?? {}, messageId: messageId ?? null, routingKey, headers });
  // `tx` is there at run time either way, as in the consumer; the type has it only with a `Tx`.
  return { messageId, routingKey, headers, attempt: options.attempt ?? 1, signal: options.signal ?? new AbortController().signal, tx: options.tx as Tx, raw } as unknown as MessageContext<Tx>;
}

export type { Decision, DecisionNote } from '../consume/contract.js';
