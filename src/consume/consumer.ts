import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { ClosedError, HandlerTimeoutError, InvalidOptionError, InvalidPayloadError, PublishNotConfirmedError, UnroutableError, WarrenError, type LateAnswer } from '../errors.js';
import { HEADER, MAX_HEADER_TABLE_BYTES, MAX_NAME_BYTES, type ParkReason } from '../headers.js';
import { toLogger, type Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import { backoffDelay } from '../connection/index.js';
import { declareTopology } from '../topology/apply.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import { describeFailure, failureHeaders, truncate, type FailureInfo } from '../park/failure.js';
import { copyProperties as copyMessageProperties, fitHeaders, headerTableBytes, withoutBrokerHeaders } from '../park/message.js';
import { readAttempts } from '../retry/attempts.js';
import { decideRetry } from '../retry/ladder.js';
import { uuidv7 } from '../publish/message-id.js';
import { checkPolicy, decideWait, DEFAULT_WAIT_ATTEMPTS, isWaitForCondition, recordedFailure, type RetryTablePolicy, type WaitDecision } from '../retry-table/wait.js';
import { retryRow } from '../retry-table/row.js';
import { classifyFailure } from './classify.js';
import { bodyDecoder, codecFailure, DecodeFailure, type BodyDecoder } from './decode.js';
import { messageIdReader, type MessageIdReader } from './message-id.js';
import { formatIssues } from './schema.js';
import { traceDelivery, type DeliveryTrace } from '../trace/index.js';
import type { ConsumerOptions, ConsumerStats, Handler, MessageContext, Outcome } from './types.js';

const DEFAULTS = { prefetch: 20, concurrency: 10, timeoutMs: 60_000, shutdownTimeoutMs: 10_000, storeOutageHoldMs: 300_000 } as const;

interface Delivery {
  readonly msg: amqp.ConsumeMessage;
  readonly ch: amqp.Channel;
  /** The id `messageIdFrom` found, for a message without a `message-id` property. */
  foundId?: string;
  /** performance.now() when its processing started, for the outcome's `durationMs`. */
  started?: number;
  /** The delivery's consumer span, from the start of its processing to its outcome. */
  trace?: DeliveryTrace;
  /** Acked or nacked by this process: nothing more may be done with it. */
  settled?: boolean;
}

/** What a move records if it must fall back to parking with minimal metadata. */
interface Fate {
  /** The reason to park with; a retry or crash-loop move that cannot be encoded parks as `unencodable-headers`. */
  readonly reason: ParkReason;
  readonly attempts: number;
  readonly failure: FailureInfo;
}

/**
 * The thrown value, or a stand-in when it cannot even be inspected (a Proxy whose traps
 * throw): the failure path asks what it is, and must get an answer.
 */
function inspectable(thrown: unknown): unknown {
  try {
    void (thrown instanceof Error);
    if (typeof thrown === 'object' && thrown !== null) void (thrown as { code?: unknown }).code;
    return thrown;
  } catch {
    return new Error('The handler threw a value that cannot be inspected (reading it throws, e.g. a Proxy whose traps throw)');
  }
}

/** Text for a log line about any thrown value; never throws. */
function errorText(error: unknown): string {
  return describeFailure(error).message;
}

/** A logger whose methods never throw: a user's logger must not become a message's failure. */
function guardedLogger(logger: Logger): Logger {
  const guard = (level: keyof Logger) => (message: string, fields?: Record<string, unknown>) => {
    try {
      logger[level](message, fields);
    } catch {
      // Nowhere left to say it.
    }
  };
  return { debug: guard('debug'), info: guard('info'), warn: guard('warn'), error: guard('error') };
}

/** An encoding refusal (a header table too large, a value of no AMQP type) somewhere in an error's causes. */
function isEncodingError(error: unknown): boolean {
  let e: unknown = error;
  for (let i = 0; i < 5 && e instanceof Error; i++) {
    if (e instanceof RangeError || e instanceof TypeError) return true;
    e = e.cause;
  }
  return false;
}

/** A header's value as a whole number at least `min`, or undefined: forged headers can hold anything. */
function wholeNumber(value: unknown, min: number): number | undefined {
  const n = typeof value === 'number' ? value : typeof value === 'bigint' ? Number(value) : typeof value === 'string' && /^\s*-?\d{1,16}\s*$/.test(value) ? Number(value) : NaN;
  return Number.isSafeInteger(n) && n >= min ? n : undefined;
}

/** A routing key or exchange name from a header, when it could be one (at most 255 bytes). */
function shortName(value: unknown): string | undefined {
  return typeof value === 'string' && value.length <= MAX_NAME_BYTES && Buffer.byteLength(value, 'utf8') <= MAX_NAME_BYTES ? value : undefined;
}

/** How long a move is tried again while the broker refuses the copy, before the delivery is nacked with requeue. */
const MOVE_GIVE_UP_MS = 5 * 60_000;

/** Deliveries this process saw in flight when their channel closed, kept this long. */
const SEEN_IN_FLIGHT_MS = 30 * 60_000;
const SEEN_IN_FLIGHT_MAX = 10_000;

/** Identifies a delivery across redeliveries: its message id, else its body and routing key. */
function deliveryKey(msg: amqp.ConsumeMessage): string {
  const id: unknown = msg.properties.messageId;
  if (typeof id === 'string' && id !== '' && id.length <= 1000) return `id:${id}`;
  return `body:${createHash('sha1').update(msg.fields.routingKey).update('\0').update(msg.content).digest('base64')}`;
}

function int(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${v} is not a whole number from ${min} to ${max}`);
  return v;
}

/** Why a delivery was parked before its handler ran, with the error to attach. */
class ParkNow extends Error {
  constructor(readonly reason: ParkReason, readonly error: unknown) {
    super(reason);
  }
}

/**
 * One handler run: the context the handler sees, its abort signal and its timer, in
 * one object (this is made once per message; closures per message cost throughput).
 * The AbortController is made when `signal` is first read: most handlers never read
 * it; an abort before the first read is kept.
 */
class HandlerRun<Tx> implements MessageContext<Tx> {
  private controller: AbortController | undefined;
  private abortReason: unknown;
  private aborted = false;
  timer: NodeJS.Timeout | undefined;
  timedOut: ((error: Error) => void) | undefined;

  constructor(
    readonly messageId: string | undefined,
    readonly routingKey: string,
    readonly headers: Readonly<Record<string, unknown>>,
    readonly attempt: number,
    readonly raw: amqp.ConsumeMessage,
    public tx: Tx,
  ) {}

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.abortReason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.abortReason = reason;
    this.controller?.abort(reason);
  }
}

function expireRun(run: HandlerRun<unknown>, consumer: string, timeoutMs: number): void {
  const error = new HandlerTimeoutError(consumer, timeoutMs);
  run.abort(error);
  run.timedOut?.(error);
}

/** A message that made the process die this many times is parked, not run again. */
export class CrashLoopError extends WarrenError {
  constructor(consumer: string, deliveries: number) {
    super('PERMANENT', `Consumer '${consumer}' was delivered this message ${deliveries} times without reaching an outcome (the process died or the channel closed while handling it); parked to stop the crash loop.`);
  }
}

/**
 * Consumes one work queue under warren's contract: ack on success; a permanent
 * error or bad payload parks at once; a transient error climbs the delay ladder and
 * parks at the cap; requeue only for messages never started when shutting down.
 * Every move is publish-with-confirm first, ack second.
 *
 * Events: `outcome` ({@link Outcome}), `cancelled` (the broker cancelled the consumer),
 * `error` is never emitted (failures are logged), so no listener is required.
 */
export class Consumer<T = unknown, Tx = undefined> extends EventEmitter {
  readonly name: string;
  readonly stats: ConsumerStats = { acked: 0, duplicate: 0, retried: 0, parked: 0, waiting: 0, requeued: 0, redeliveryMoved: 0, inFlight: 0 };
  private readonly prefetch: number;
  private readonly concurrency: number;
  private readonly timeoutMs: number;
  private readonly shutdownTimeoutMs: number;
  private readonly storeOutageHoldMs: number;
  private readonly logger: Logger;
  private readonly retryQueueSet: ReadonlySet<string>;
  private readonly decoder: BodyDecoder;
  private readonly idReader: MessageIdReader | undefined;
  private channel: amqp.Channel | undefined;
  private consumerTag: string | undefined;
  private attaching: Promise<void> | undefined;
  private readonly waiting: Delivery[] = [];
  private readonly active = new Set<Promise<void>>();
  /** Deliveries being processed, for what a closing channel had in flight. */
  private readonly inFlight = new Set<Delivery>();
  /**
   * Deliveries that were in flight (or waiting) when this process saw their channel
   * close, by {@link deliveryKey}, with when to forget them. Their redelivery is a blip
   * this process lived through, not a death: the crash-loop guard does not count it.
   * Counted per key: two deliveries with one id (a publish sent again after a lost
   * confirm) can be in flight together, and each comes back.
   */
  private readonly seenInFlight = new Map<string, { count: number; until: number }>();
  private readonly controllers = new Set<HandlerRun<unknown>>();
  private stopping = false;
  private closed = false;
  private unregister: (() => void) | undefined;
  private reattachTimer: NodeJS.Timeout | undefined;
  private reattachAttempt = 0;

  constructor(
    private readonly connection: BrokerConnection,
    private readonly publisher: Publisher,
    private readonly topology: Topology,
    readonly declaration: ConsumerTopology,
    private readonly handler: Handler<T, Tx>,
    private readonly options: ConsumerOptions<T, Tx> = {},
  ) {
    // An async listener's rejection comes to the method below, not to the process.
    super({ captureRejections: true });
    this.name = declaration.name;
    if (typeof handler !== 'function') throw new InvalidOptionError('handler', 'expected a function (payload, context) => Promise<void>');
    this.prefetch = int(options.prefetch, DEFAULTS.prefetch, 'prefetch', 1, 65_535);
    this.concurrency = int(options.concurrency, Math.min(DEFAULTS.concurrency, this.prefetch), 'concurrency', 1, this.prefetch);
    this.timeoutMs = int(options.timeoutMs, DEFAULTS.timeoutMs, 'timeoutMs', 1, 1_700_000);
    this.shutdownTimeoutMs = int(options.shutdownTimeoutMs, DEFAULTS.shutdownTimeoutMs, 'shutdownTimeoutMs', 0, 1_700_000);
    this.storeOutageHoldMs = int(options.storeOutageHoldMs, DEFAULTS.storeOutageHoldMs, 'storeOutageHoldMs', 0, 1_500_000);
    if (options.schema !== undefined && typeof options.schema?.['~standard']?.validate !== 'function') {
      throw new InvalidOptionError('schema', 'expected a Standard Schema (an object with a `~standard.validate` function), such as a zod schema');
    }
    if (options.classify !== undefined && typeof options.classify !== 'function') throw new InvalidOptionError('classify', 'expected a function (error) => "permanent" | "transient" | undefined');
    if (options.idempotency !== undefined && typeof options.idempotency?.run !== 'function') throw new InvalidOptionError('idempotency', 'expected a guard with a `run(messageId, consumer, work)` method, such as `store.idempotency()`');
    this.decoder = bodyDecoder(options.decoder);
    this.idReader = messageIdReader(options.messageIdFrom);
    if (this.idReader?.readsPayload && !this.decoder.structured) {
      throw new InvalidOptionError('messageIdFrom', `${this.idReader.source} is read from the decoded payload, and the '${this.decoder.name}' decoder gives no fields`, "Use { header: name } or a function, or the 'json' decoder or a codec.");
    }
    this.logger = options.logger === undefined ? toLogger(undefined) : guardedLogger(toLogger(options.logger));
    if (options.onOutcome !== undefined) {
      if (typeof options.onOutcome !== 'function') throw new InvalidOptionError('onOutcome', 'expected a function (outcome) => void');
      this.on('outcome', options.onOutcome);
    }
    this.retryQueueSet = new Set(declaration.retryQueues);
    if (options.retryTable !== undefined) {
      checkPolicy(options.retryTable);
      for (const rule of options.retryTable.rules ?? []) options.retryTable.table.nameDependency(rule.dependency);
    }
  }

  /** A listener that returned a rejected promise: logged, like one that throws (see {@link count}). */
  [Symbol.for('nodejs.rejection')](error: unknown, event: string): void {
    this.logger.error('an outcome listener threw', { consumer: this.name, event, error: errorText(error) });
  }

  /** Attaches now and again after every reconnect. */
  async start(): Promise<void> {
    try {
      this.unregister = await this.connection.onReady(async (model) => {
        if (this.stopping || this.closed) return;
        this.channel = undefined;
        await this.attach(model);
      });
    } catch (error) {
      // The first attach failed (no queue, no permission): leave nothing running behind.
      await this.close();
      throw error;
    }
  }

  /** True while the consumer is attached to its queue. */
  get attached(): boolean {
    return this.channel !== undefined && this.consumerTag !== undefined;
  }

  private attach(model: amqp.ChannelModel): Promise<void> {
    if (this.attaching) return this.attaching;
    this.attaching = (async () => {
      if (this.closed || this.stopping || this.channel) return;
      const ch = await model.createChannel();
      ch.on('error', (err: Error) => this.logger.warn('consumer channel error', { consumer: this.name, error: err.message }));
      ch.on('close', () => this.onChannelClose(ch));
      // close() may have been called during any await: a consumer attached after it
      // would requeue every delivery in a loop.
      const abandon = async () => {
        if (!this.closed && !this.stopping) return false;
        await ch.close().catch(() => undefined);
        return true;
      };
      await ch.prefetch(this.prefetch);
      if (await abandon()) return;
      this.channel = ch;
      const reply = await ch.consume(this.declaration.queue, (msg) => this.onMessage(ch, msg), { noAck: false });
      this.consumerTag = reply.consumerTag;
      if (await abandon()) return;
      this.reattachAttempt = 0;
      this.logger.info('consumer attached', { consumer: this.name, queue: this.declaration.queue });
    })().finally(() => {
      this.attaching = undefined;
    });
    return this.attaching;
  }

  private onChannelClose(ch: amqp.Channel): void {
    this.rememberInFlight(ch);
    // Deliveries waiting on this channel went back to the queue with it: never start them.
    this.forget(ch);
    if (this.channel !== ch) return;
    this.channel = undefined;
    this.consumerTag = undefined;
    if (!this.closed && !this.stopping) this.scheduleReattach('channel closed');
  }

  /** Notes what `ch` held unsettled as it closed: those redeliveries are blips, not deaths. */
  private rememberInFlight(ch: amqp.Channel): void {
    for (const d of this.inFlight) if (d.ch === ch && !d.settled) this.remember(d.msg);
    for (const d of this.waiting) if (d.ch === ch) this.remember(d.msg);
  }

  private remember(msg: amqp.ConsumeMessage): void {
    const now = Date.now();
    if (this.seenInFlight.size >= SEEN_IN_FLIGHT_MAX) {
      for (const [k, seen] of this.seenInFlight) if (seen.until <= now || this.seenInFlight.size >= SEEN_IN_FLIGHT_MAX) this.seenInFlight.delete(k);
    }
    const key = deliveryKey(msg);
    const seen = this.seenInFlight.get(key);
    if (seen !== undefined && seen.until > now) {
      seen.count += 1;
      seen.until = now + SEEN_IN_FLIGHT_MS;
    } else {
      this.seenInFlight.set(key, { count: 1, until: now + SEEN_IN_FLIGHT_MS });
    }
  }

  /** True (once per delivery noted) when this process saw the delivery's previous channel close with it unsettled. */
  private wasSeenInFlight(msg: amqp.ConsumeMessage): boolean {
    if (this.seenInFlight.size === 0) return false;
    const key = deliveryKey(msg);
    const seen = this.seenInFlight.get(key);
    if (seen === undefined) return false;
    seen.count -= 1;
    if (seen.count <= 0 || seen.until <= Date.now()) this.seenInFlight.delete(key);
    return seen.until > Date.now();
  }

  private forget(ch: amqp.Channel): void {
    for (let i = this.waiting.length - 1; i >= 0; i--) if (this.waiting[i]?.ch === ch) this.waiting.splice(i, 1);
  }

  private scheduleReattach(why: string): void {
    if (this.reattachTimer || this.closed || this.stopping) return;
    this.reattachAttempt += 1;
    const delay = backoffDelay(this.reattachAttempt, 200, 10_000);
    this.reattachTimer = setTimeout(() => {
      this.reattachTimer = undefined;
      void this.reattach(why);
    }, delay);
  }

  private async reattach(why: string): Promise<void> {
    if (this.closed || this.stopping) return;
    try {
      const model = await this.connection.waitReady(30_000);
      if (why === 'cancelled') await declareTopology(model, this.topology, this.name);
      if (this.channel && !this.consumerTag) {
        const old = this.channel;
        this.channel = undefined;
        this.rememberInFlight(old);
        this.forget(old);
        await old.close().catch(() => undefined);
      }
      await this.attach(model);
    } catch (error) {
      this.logger.warn('consumer could not re-attach; trying again', { consumer: this.name, why, error: errorText(error) });
      this.scheduleReattach(why);
    }
  }

  private onMessage(ch: amqp.Channel, msg: amqp.ConsumeMessage | null): void {
    if (msg === null) {
      // The broker cancelled us: the queue was deleted, or it failed over.
      this.logger.error('the broker cancelled the consumer; re-declaring its queues and re-attaching', { consumer: this.name, queue: this.declaration.queue });
      this.consumerTag = undefined;
      this.emit('cancelled', { consumer: this.name, queue: this.declaration.queue });
      if (!this.closed && !this.stopping) this.scheduleReattach('cancelled');
      return;
    }
    this.waiting.push({ msg, ch });
    if (this.stopping) return; // close() puts it back
    this.pump();
  }

  private pump(): void {
    while (!this.stopping && this.active.size < this.concurrency && this.waiting.length > 0) {
      const delivery = this.waiting.shift() as Delivery;
      this.inFlight.add(delivery);
      // One derived promise per delivery (this runs once per message).
      const run: Promise<void> = this.process(delivery).then(
        () => this.finished(run, delivery),
        (error: unknown) => this.lastResort(delivery, error).then(() => this.finished(run, delivery)),
      );
      this.active.add(run);
      this.stats.inFlight = this.active.size;
    }
  }

  private finished(run: Promise<void>, d: Delivery): void {
    this.inFlight.delete(d);
    d.trace?.end(); // ends the span of a delivery that reached no outcome (no-op otherwise)
    this.active.delete(run);
    this.stats.inFlight = this.active.size;
    this.pump();
  }

  /**
   * Nacks with requeue. `asBlip`: its redelivery is no death (a message never started);
   * otherwise (a move that kept failing, a failure path that threw) the crash-loop guard
   * counts it, so a message that can never be moved is not run again without end.
   */
  private requeue(d: Delivery, asBlip = true): void {
    try {
      d.ch.nack(d.msg, false, true);
      d.settled = true;
      if (asBlip) this.remember(d.msg);
      this.count({ kind: 'requeued', messageId: d.msg.properties.messageId as string | undefined }, d);
    } catch {
      // The channel is gone; the broker requeues the message itself.
    }
  }

  private count(outcome: Outcome, d?: Delivery): void {
    if (d?.started !== undefined) (outcome as { durationMs?: number }).durationMs = performance.now() - d.started;
    d?.trace?.end(outcome);
    switch (outcome.kind) {
      case 'acked': this.stats.acked++; break;
      case 'duplicate': this.stats.duplicate++; break;
      case 'retried': this.stats.retried++; break;
      case 'parked': this.stats.parked++; break;
      case 'waiting': this.stats.waiting++; break;
      case 'requeued': this.stats.requeued++; break;
      case 'redelivery-moved': this.stats.redeliveryMoved++; break;
    }
    try {
      this.emit('outcome', outcome);
    } catch (error) {
      // A listener's failure must not become the message's failure: it is already settled.
      this.logger.error('an outcome listener threw', { consumer: this.name, outcome: outcome.kind, error: errorText(error) });
    }
  }

  private ack(d: Delivery): boolean {
    try {
      d.ch.ack(d.msg);
      d.settled = true;
      return true;
    } catch {
      // The channel closed: the broker will redeliver, and idempotency makes that harmless.
      return false;
    }
  }

  private async process(d: Delivery): Promise<void> {
    const { msg } = d;
    d.started = performance.now();
    let messageId = msg.properties.messageId as string | undefined;
    const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
    const attempts = readAttempts(headers, this.retryQueueSet);
    if (attempts.warning) this.logger.warn('attempt count unreadable', { consumer: this.name, messageId, warning: attempts.warning });
    const trace = (d.trace = traceDelivery(this.declaration, msg, attempts.failed + 1));

    let payload: T | undefined;
    try {
      if (msg.fields.redelivered && (await this.guardCrashLoop(d, headers))) return;
      const body = this.decodeBody(msg);
      const value: unknown = body instanceof Promise ? await body : body;
      messageId = this.messageIdOf(d, value, messageId);
      const checked = this.validatePayload(value);
      payload = checked instanceof Promise ? await checked : checked;
      await trace.run(() => this.runHandler(d, payload as T, messageId, headers, attempts.failed));
    } catch (caught) {
      await this.fail(d, headers, inspectable(caught), payload, messageId, attempts.failed);
      return;
    }
    if (this.ack(d)) this.count({ kind: 'acked', messageId }, d);
  }

  /** Takes a failed delivery where it belongs: parked, the retry table, or the next retry tier. */
  private async fail(d: Delivery, headers: Record<string, unknown>, error: unknown, payload: T | undefined, messageId: string | undefined, failed: number): Promise<void> {
    if (error instanceof ParkNow) {
      await this.park(d, headers, error.reason, error.error, failed + 1);
      return;
    }
    if (error instanceof DuplicateDelivery) {
      if (this.ack(d)) this.count({ kind: 'duplicate', messageId }, d);
      return;
    }
    if (error instanceof StoreOutage) {
      await this.retry(d, headers, error.cause, failed, { countAttempt: false, tier: 0 });
      return;
    }
    // A permanent failure parks even when a broad rule would match it; only an explicit
    // WaitForConditionError overrides the classifier.
    const asksToWait = isWaitForCondition(error);
    const permanent = !asksToWait && this.classify(error, messageId) === 'permanent';
    const waiting = !permanent && (asksToWait || this.options.retryTable?.rules?.length) ? this.waitDecision(d, error, payload as T, messageId, headers, failed) : undefined;
    if (waiting !== undefined) {
      await this.wait(d, headers, error, waiting, failed);
      return;
    }
    if (permanent) {
      await this.park(d, headers, 'permanent-error', error, failed + 1);
      return;
    }
    await this.retry(d, headers, error, failed, { countAttempt: true });
  }

  /** The user's classifier, then warren's rules; a classifier that throws leaves the decision to warren's rules. */
  private classify(error: unknown, messageId: string | undefined): 'permanent' | 'transient' {
    try {
      return classifyFailure(error, this.options.classify);
    } catch (e) {
      this.logger.error("the `classify` option threw; warren's own rules decide (fix the classifier: it must return for any value)", { consumer: this.name, messageId, error: errorText(e) });
      return classifyFailure(error);
    }
  }

  /**
   * The last resort, for a delivery whose failure path itself threw (a bug, or user
   * code warren did not expect to throw): park it with minimal metadata. If even that
   * cannot be done, nack it with requeue, so the broker has it back at once rather than
   * after its consumer timeout. Never throws.
   */
  private async lastResort(d: Delivery, thrown: unknown): Promise<void> {
    const messageId = d.msg.properties.messageId as string | undefined;
    try {
      if (d.settled) {
        this.logger.error('a failure after the delivery was settled', { consumer: this.name, messageId, error: errorText(thrown) });
        return;
      }
      if (this.channel !== d.ch) {
        this.logger.error('the failure path threw and the channel is gone; the broker redelivers the message', { consumer: this.name, messageId, error: errorText(thrown) });
        return;
      }
      this.logger.error('the failure path threw; parking the message with minimal metadata', { consumer: this.name, messageId, error: errorText(thrown) });
      const headers = (d.msg.properties.headers ?? {}) as Record<string, unknown>;
      const attempts = readAttempts(headers, this.retryQueueSet).failed + 1;
      const fate: Fate = { reason: 'failure-path-error', attempts, failure: describeFailure(thrown) };
      if (await this.move(d, this.declaration.parkedQueue, this.minimalHeaders(d, fate, this.declaration.parkedQueue), fate)) {
        this.count({ kind: 'parked', messageId, reason: fate.reason, attempts, error: thrown }, d);
      }
    } catch (error) {
      if (d.settled || this.channel !== d.ch) return;
      this.logger.error('could not park a message whose failure path threw; nacked with requeue, so it will be delivered again', { consumer: this.name, messageId, error: errorText(error) });
      this.requeue(d, false);
    }
  }

  /**
   * A redelivered message had no outcome last time: the process died on it, or the
   * channel closed. A channel this process saw close is a blip, not a death, and is not
   * counted. Quorum queues count deliveries themselves; on classic queues the message is
   * moved to the back of the queue with warren's own count. Returns true when the
   * delivery was settled here.
   */
  private async guardCrashLoop(d: Delivery, headers: Record<string, unknown>): Promise<boolean> {
    if (this.wasSeenInFlight(d.msg)) return false;
    const limit = this.declaration.crashLimit;
    if (this.declaration.queueType === 'quorum') {
      const count = wholeNumber(headers['x-delivery-count'], 0) ?? 1;
      if (count >= limit) throw new ParkNow('crash-loop', new CrashLoopError(this.name, count + 1));
      return false;
    }
    const redeliveries = (wholeNumber(headers[HEADER.redeliveries], 0) ?? 0) + 1;
    if (redeliveries >= limit) throw new ParkNow('crash-loop', new CrashLoopError(this.name, redeliveries + 1));
    const fate: Fate = { reason: 'unencodable-headers', attempts: readAttempts(headers, this.retryQueueSet).failed, failure: describeFailure(new CrashLoopError(this.name, redeliveries + 1)) };
    const moved = await this.move(d, this.declaration.queue, { ...headers, ...this.origin(d, headers), [HEADER.redeliveries]: redeliveries }, fate);
    if (moved) this.count({ kind: 'redelivery-moved', messageId: d.msg.properties.messageId as string | undefined, redeliveries }, d);
    return true;
  }

  /**
   * The body as the decoder reads it: synchronous for the built-in decoders; a codec's
   * promise gets the handler's time. A body the decoder cannot read parks.
   */
  private decodeBody(msg: amqp.ConsumeMessage): unknown {
    let value: unknown;
    try {
      value = this.decoder.decode(msg);
    } catch (error) {
      if (error instanceof DecodeFailure) throw new ParkNow(error.reason, error.error);
      throw error;
    }
    if (!(value instanceof Promise)) return value;
    return this.withinTimeout(value, 'decoder').catch((error: unknown) => {
      if (error instanceof HandlerTimeoutError) throw error; // transient: the ladder takes it
      const failure = codecFailure(this.decoder.name, msg, error);
      throw new ParkNow(failure.reason, failure.error);
    });
  }

  /**
   * The message id: the producer's `message-id` property, else what `messageIdFrom` finds.
   * With an idempotency guard, a message with neither is parked: a duplicate could not be
   * told from new work.
   */
  private messageIdOf(d: Delivery, value: unknown, own: string | undefined): string | undefined {
    if (own !== undefined && own !== '') return own;
    const found = this.idReader?.read(d.msg, value);
    if (found?.id !== undefined) return (d.foundId = found.id);
    if (!this.options.idempotency) return this.idReader ? undefined : own;
    const why = found
      ? `The message has no message id: the producer set no message-id property, and ${found.why} (messageIdFrom: ${this.idReader?.source ?? ''}).`
      : 'The message has no message id.';
    throw new ParkNow('missing-message-id', new InvalidPayloadError(`${why} The idempotency guard cannot tell a duplicate from new work without one. Publish with a message id (warren stamps one)${found ? ', or fix messageIdFrom,' : ''} and replay it.`));
  }

  /** The payload the schema returns (or the value, without a schema); synchronous without a schema. */
  private validatePayload(value: unknown): T | Promise<T> {
    const schema = this.options.schema;
    if (!schema) return value as T;
    return this.validate(schema, value);
  }

  private async validate(schema: NonNullable<ConsumerOptions<T, Tx>['schema']>, value: unknown): Promise<T> {
    let result: Awaited<ReturnType<typeof schema['~standard']['validate']>>;
    try {
      const pending = schema['~standard'].validate(value);
      result = pending instanceof Promise ? await this.withinTimeout(pending) : pending;
    } catch (error) {
      if (error instanceof HandlerTimeoutError) throw error; // transient: the ladder takes it
      throw new ParkNow('invalid-payload', new InvalidPayloadError(`The schema threw instead of returning issues (${errorText(error)}); the payload is treated as invalid. Fix the schema so it returns issues for any value, then replay.`, [], { cause: error }));
    }
    if (typeof result !== 'object' || result === null) {
      throw new ParkNow('invalid-payload', new InvalidPayloadError('The schema returned neither a value nor issues; the payload is treated as invalid. Fix the schema, then replay.'));
    }
    if (result.issues) {
      const issues = formatIssues(result.issues);
      throw new ParkNow('invalid-payload', new InvalidPayloadError(`The payload does not match the schema: ${issues.slice(0, 10).join('; ')}`, issues));
    }
    return result.value;
  }

  /**
   * An asynchronous validate gets the handler's time: one that never settles would hold
   * the delivery until the broker's consumer timeout.
   */
  private withinTimeout<R>(pending: Promise<R>, part: 'schema' | 'decoder' = 'schema'): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => reject(new HandlerTimeoutError(this.name, this.timeoutMs, part)), this.timeoutMs);
      pending.then(
        (value) => { clearTimeout(timer); resolve(value); },
        (error: unknown) => { clearTimeout(timer); reject(error); },
      );
    });
  }

  private async runHandler(d: Delivery, payload: T, messageId: string | undefined, headers: Record<string, unknown>, failed: number): Promise<void> {
    const routingKey = typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : d.msg.fields.routingKey;
    const run = new HandlerRun<Tx>(messageId, routingKey, headers, failed + 1, d.msg, undefined as Tx);
    this.controllers.add(run as HandlerRun<unknown>);
    try {
      const guard = this.options.idempotency;
      let work: Promise<void>;
      if (guard) {
        work = this.runGuarded(
          guard,
          messageId as string,
          async (tx) => {
            run.tx = tx;
            this.arm(run);
            await this.handler(payload, run);
          },
          run.signal,
        );
      } else {
        this.arm(run);
        work = this.callHandler(payload, run);
      }
      // One promise for "the work settled or the time ran out" (not a race of two):
      // this runs once per message. After a timeout the work may still settle; its
      // late rejection lands in `reject` of a settled promise and is not news.
      await new Promise<void>((resolve, reject) => {
        run.timedOut = reject;
        work.then(resolve, reject);
      });
    } finally {
      clearTimeout(run.timer);
      this.controllers.delete(run as HandlerRun<unknown>);
    }
  }

  /**
   * Starts a run's clock. It starts when the handler starts: time spent waiting for the
   * database (an outage, or another transaction holding SQLite) is the guard's to bound,
   * and must not be counted as a failed attempt.
   */
  private arm(run: HandlerRun<Tx>): void {
    if (run.timer === undefined) run.timer = setTimeout(expireRun, this.timeoutMs, run, this.name, this.timeoutMs);
  }

  /** Runs the handler; a synchronous throw becomes a rejection. */
  private async callHandler(payload: T, context: MessageContext<Tx>): Promise<void> {
    await this.handler(payload, context);
  }

  /**
   * Runs the guard, holding the message while the database is unreachable or busy (a
   * twin of this message still running). `signal` lets the guard roll back a handler
   * that times out, even one that never settles.
   */
  private async runGuarded(guard: NonNullable<ConsumerOptions<T, Tx>['idempotency']>, messageId: string, work: (tx: Tx) => Promise<void>, signal: AbortSignal): Promise<void> {
    const holdUntil = Date.now() + this.storeOutageHoldMs;
    for (let attempt = 1; ; attempt++) {
      let result: 'done' | 'duplicate';
      try {
        result = await guard.run(messageId, this.name, work, signal);
      } catch (error) {
        if (!(error instanceof WarrenError && error.code === 'STORE_UNAVAILABLE')) throw error;
        if (Date.now() >= holdUntil || this.stopping) throw new StoreOutage(error);
        this.logger.warn('database unavailable; holding the message and trying again', { consumer: this.name, messageId, attempt, error: error.message });
        await new Promise((r) => setTimeout(r, Math.min(backoffDelay(attempt, 100, 5000), Math.max(1, holdUntil - Date.now()))));
        continue;
      }
      if (result === 'duplicate') throw new DuplicateDelivery();
      return;
    }
  }

  /** Where a failure makes the message wait, or undefined when the retry ladder takes it. */
  private waitDecision(d: Delivery, error: unknown, payload: T, messageId: string | undefined, headers: Record<string, unknown>, failed: number): WaitDecision | undefined {
    const policy = this.options.retryTable;
    const context = { messageId, routingKey: d.msg.fields.routingKey, headers, attempt: failed + 1, raw: d.msg, tx: undefined, signal: AbortSignal.abort() };
    let decision: WaitDecision | undefined;
    try {
      decision = decideWait(error, policy, payload, context, new Date());
    } catch (e) {
      this.logger.error('the retry-table policy threw (a tenant function?); the retry ladder takes the message', { consumer: this.name, messageId, error: errorText(e) });
      return undefined;
    }
    if (decision !== undefined && policy === undefined) {
      this.logger.error('the handler asked to wait for a condition, but this consumer has no `retryTable` option; the retry ladder takes the message', { consumer: this.name, messageId, dependency: decision.dependency });
      return undefined;
    }
    return decision;
  }

  /**
   * Stores the message as a retry-table row and acks it once the row is committed. At
   * the policy's cap it is parked instead. While the database is unreachable the message
   * is held unacked and the insert tried again; past `storeOutageHoldMs` it goes to the
   * first retry tier without counting an attempt, and comes back to try again.
   */
  private async wait(d: Delivery, headers: Record<string, unknown>, error: unknown, decision: WaitDecision, failed: number): Promise<void> {
    const policy = this.options.retryTable as RetryTablePolicy<T>;
    const messageId = d.msg.properties.messageId as string | undefined;
    const recorded = recordedFailure(error);
    const recordedInfo = describeFailure(recorded);
    const waits = (wholeNumber(headers[HEADER.waits], 0) ?? 0) + 1;
    if (waits > (policy.maxAttempts ?? DEFAULT_WAIT_ATTEMPTS)) {
      await this.park(d, headers, 'max-attempts', recorded, failed + 1);
      return;
    }
    let rowId = messageId !== undefined && messageId !== '' ? messageId : d.foundId;
    if (rowId === undefined && this.idReader === undefined && !this.options.idempotency) rowId = uuidv7();
    if (rowId === undefined) {
      // No id yet (the decoder did not finish): a row under a made-up id would come back
      // as a message the guard cannot match with its other copies. The ladder takes it,
      // and the copy's id is read again when it decodes.
      await this.retry(d, headers, error, failed, { countAttempt: true });
      return;
    }
    const origin = this.origin(d, headers);
    const row = retryRow({
      messageId: rowId,
      content: d.msg.content,
      properties: d.msg.properties,
      headers: d.trace?.headers(headers) ?? headers,
      exchange: origin[HEADER.exchange] as string,
      routingKey: origin[HEADER.routingKey] as string,
      consumer: this.name,
      queue: this.declaration.queue,
      parkedQueue: this.declaration.parkedQueue,
      waits,
      failure: recordedInfo,
      decision,
      now: new Date(),
    });
    const holdUntil = Date.now() + this.storeOutageHoldMs;
    let stored: { id: string; paused: boolean };
    for (let attempt = 1; ; attempt++) {
      if (this.channel !== d.ch) return; // its channel is gone: the broker redelivers it
      try {
        stored = await policy.table.insert(row);
        break;
      } catch (e) {
        const outage = e instanceof WarrenError && e.code === 'STORE_UNAVAILABLE';
        if (outage && Date.now() < holdUntil && !this.stopping) {
          this.logger.warn('database unavailable; holding the message and trying the retry table again', { consumer: this.name, messageId, attempt, error: e.message });
          await new Promise((r) => setTimeout(r, Math.min(backoffDelay(attempt, 100, 5000), Math.max(1, holdUntil - Date.now()))));
          continue;
        }
        if (outage) {
          this.logger.error('database still unavailable; the message goes round the first retry tier (no attempt counted) and will ask again', { consumer: this.name, messageId, error: e.message });
          await this.retry(d, headers, error, failed, { countAttempt: false, tier: 0 });
          return;
        }
        // Not an outage: the same insert would fail again. The ladder takes the message,
        // counting the attempt, so it is parked at the cap rather than going round forever.
        this.logger.error('could not store the message in the retry table; the retry ladder takes it', { consumer: this.name, messageId, error: errorText(e) });
        await this.retry(d, headers, error, failed, { countAttempt: true });
        return;
      }
    }
    if (!this.ack(d)) return; // redelivered; the row is updated, not doubled, next time
    this.logger.info(`message waits in the retry table for '${decision.dependency}' (${recordedInfo.errorClass}: ${firstLine(recordedInfo.message)})`, { consumer: this.name, messageId, waits, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused, errorClass: recordedInfo.errorClass, error: recordedInfo.message });
    this.count({ kind: 'waiting', messageId, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused, nextAttemptAt: decision.nextAttemptAt, error: recorded }, d);
  }

  private async retry(d: Delivery, headers: Record<string, unknown>, error: unknown, failed: number, how: { countAttempt: boolean; tier?: number }): Promise<void> {
    const messageId = d.msg.properties.messageId as string | undefined;
    const decision = how.countAttempt ? decideRetry(failed, this.declaration.delaysMs, this.declaration.maxAttempts) : ({ action: 'retry', tier: how.tier ?? 0, attempts: failed } as const);
    if (decision.action === 'park') {
      await this.park(d, headers, 'max-attempts', error, decision.attempts);
      return;
    }
    const queue = this.declaration.retryQueues[decision.tier] as string;
    const failure = describeFailure(error);
    const next = {
      ...headers,
      ...this.origin(d, headers),
      ...failureHeaders(failure, headers, new Date()),
      [HEADER.attempts]: decision.attempts,
      [HEADER.consumer]: this.name,
    };
    if (await this.move(d, queue, next, { reason: 'unencodable-headers', attempts: decision.attempts, failure })) {
      this.logger.info(`handler failed (${failure.errorClass}: ${firstLine(failure.message)}); retrying in ${this.declaration.delaysMs[decision.tier] ?? 0} ms`, {
        consumer: this.name, messageId, attempts: decision.attempts, maxAttempts: this.declaration.maxAttempts, tier: decision.tier, delayMs: this.declaration.delaysMs[decision.tier], queue,
        errorClass: failure.errorClass, error: failure.message,
      });
      this.count({ kind: 'retried', messageId, attempts: decision.attempts, queue, error }, d);
    }
  }

  private async park(d: Delivery, headers: Record<string, unknown>, reason: ParkReason, error: unknown, attempts: number): Promise<void> {
    const messageId = d.msg.properties.messageId as string | undefined;
    const now = new Date();
    const failure = describeFailure(error);
    const next = {
      ...headers,
      ...this.origin(d, headers),
      ...failureHeaders(failure, headers, now),
      [HEADER.attempts]: attempts,
      [HEADER.consumer]: this.name,
      [HEADER.parkedReason]: reason,
      [HEADER.parkedAt]: now.toISOString(),
    };
    if (await this.move(d, this.declaration.parkedQueue, next, { reason, attempts, failure })) {
      this.logger.warn(`message parked (${reason}; ${failure.errorClass}: ${firstLine(failure.message)})`, { consumer: this.name, messageId, reason, attempts, queue: this.declaration.parkedQueue, errorClass: failure.errorClass, error: failure.message });
      this.count({ kind: 'parked', messageId, reason, attempts, error }, d);
    }
  }

  /**
   * The original exchange and routing key, kept from the first failure on. A header that
   * could not be a name (not text, or over 255 bytes) is forged: the delivery's own is used.
   */
  private origin(d: Delivery, headers: Record<string, unknown>): Record<string, string> {
    return {
      [HEADER.exchange]: shortName(headers[HEADER.exchange]) ?? d.msg.fields.exchange,
      [HEADER.routingKey]: shortName(headers[HEADER.routingKey]) ?? d.msg.fields.routingKey,
    };
  }

  /**
   * The headers of a copy parked with minimal metadata, when the full ones cannot be
   * encoded: warren's essentials, bounded small, and the producer's headers (warren's
   * old ones dropped). Producer headers that alone exceed the limit are dropped, largest
   * first, and named in `warren-dropped-headers`.
   */
  private minimalHeaders(d: Delivery, fate: Fate, queue: string): Record<string, unknown> {
    const headers = (d.msg.properties.headers ?? {}) as Record<string, unknown>;
    const now = new Date().toISOString();
    const own: Record<string, unknown> = {
      ...this.origin(d, headers),
      [HEADER.consumer]: this.name,
      [HEADER.attempts]: fate.attempts,
      [HEADER.parkedReason]: queue === this.declaration.parkedQueue ? fate.reason : 'unencodable-headers',
      [HEADER.parkedAt]: now,
      [HEADER.errorClass]: truncate(fate.failure.errorClass, 100),
      [HEADER.errorMessage]: truncate(fate.failure.message, 300),
      [HEADER.lastFailedAt]: now,
    };
    const producer: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(headers)) if (!k.startsWith('warren-')) producer[k] = v;
    const fitted = fitHeaders(own, producer, MAX_HEADER_TABLE_BYTES - 1_200);
    if (fitted.dropped.length > 0) fitted.headers[HEADER.droppedHeaders] = truncate(fitted.dropped.join(', '), 1_000);
    return fitted.headers;
  }

  /**
   * Publishes a copy to `queue` (through the default exchange, so it reaches that
   * queue alone) and waits for the confirm, then acks the original. While the publish
   * fails, the original stays unacked and the move is tried again; if the channel
   * closes meanwhile the broker redelivers it. A copy whose headers cannot be encoded
   * (the producer's own headers fill the table) is never tried again as it is: it is
   * parked with minimal metadata (see {@link minimalHeaders}), counted here. Returns true
   * when moved as asked and acked.
   */
  private async move(d: Delivery, queue: string, headers: Record<string, unknown>, fate: Fate): Promise<boolean> {
    let target = queue;
    let table = withoutBrokerHeaders(d.trace?.headers(headers) ?? headers);
    let minimal = false;
    const fallBack = (why: string): void => {
      this.logger.error('the copy\'s headers cannot be encoded; parking it with minimal metadata instead', { consumer: this.name, messageId: d.msg.properties.messageId as string | undefined, queue, why });
      target = this.declaration.parkedQueue;
      table = this.minimalHeaders(d, fate, queue);
      minimal = true;
    };
    if (headerTableBytes(table) > MAX_HEADER_TABLE_BYTES) fallBack(`${headerTableBytes(table)} bytes of headers, more than ${MAX_HEADER_TABLE_BYTES}`);
    const giveUpAt = Date.now() + MOVE_GIVE_UP_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it
      if (Date.now() > giveUpAt) {
        // Bounded: well before the broker's consumer timeout (30 min) closes the channel
        // and takes every other delivery on it back too.
        this.logger.error(`could not move a message for ${MOVE_GIVE_UP_MS / 60_000} minutes; nacked with requeue, so it will be delivered again`, { consumer: this.name, queue: target, messageId: d.msg.properties.messageId as string | undefined });
        this.requeue(d, false);
        return false;
      }
      const landed = (): boolean => {
        const acked = this.ack(d);
        if (!minimal) return acked;
        // Parked instead of moved as asked: counted here, and the caller's outcome is not.
        if (acked) this.count({ kind: 'parked', messageId: d.msg.properties.messageId as string | undefined, reason: String(table[HEADER.parkedReason]), attempts: fate.attempts, error: fate.failure }, d);
        return false;
      };
      try {
        await this.publisher.send({ exchange: '', routingKey: target, content: d.msg.content, properties: copyProperties(d.msg, table) });
        return landed();
      } catch (error) {
        if (error instanceof ClosedError) return false;
        if (error instanceof PublishNotConfirmedError && error.late !== undefined) {
          // The copy was written and its channel is open: it may still land. Writing
          // another now would add a copy per timeout for as long as the broker is slow,
          // so wait for the broker's answer (bounded by the move's give-up time).
          this.logger.warn('no confirm yet for a moved copy; waiting for the broker\'s answer before writing another', { consumer: this.name, queue: target, attempt, messageId: d.msg.properties.messageId as string | undefined });
          const answer = await lateAnswer(error.late, giveUpAt - Date.now());
          if (answer === 'confirmed') {
            if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it (a duplicate at most)
            return landed();
          }
          if (answer === 'timeout') continue;
          // Nacked, lost with its channel, or returned: the copy is not there; write it again.
        }
        if (isEncodingError(error)) {
          if (minimal) throw error; // the last resort nacks it
          fallBack(errorText(error));
          continue;
        }
        this.logger.error('could not move a message; it stays unacked and the move is tried again', { consumer: this.name, queue: target, attempt, error: errorText(error) });
        if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it
        if (error instanceof UnroutableError) {
          // Someone deleted a retry or parked queue: declare this consumer's queues again.
          await this.connection
            .waitReady(5000)
            .then((model) => declareTopology(model, this.topology, this.name))
            .catch((e: unknown) => this.logger.error('could not declare the queues again', { consumer: this.name, error: errorText(e) }));
        }
        await new Promise((r) => setTimeout(r, backoffDelay(attempt, 200, 5000)));
      }
    }
  }

  /**
   * Puts a delivery that never started back in its queue. A nack would mark it
   * redelivered, which the crash-loop guard counts as a death; a confirmed copy keeps
   * its counts as they were. If the copy cannot be made, the nack is the fallback.
   */
  private async putBack(d: Delivery): Promise<void> {
    const messageId = d.msg.properties.messageId as string | undefined;
    try {
      if (this.channel !== d.ch) return; // its channel is gone: the broker has it back already
      await this.publisher.send({ exchange: '', routingKey: this.declaration.queue, content: d.msg.content, properties: copyProperties(d.msg, d.msg.properties.headers ?? {}) });
      if (this.ack(d)) this.count({ kind: 'requeued', messageId }, d);
    } catch {
      this.requeue(d);
    }
  }

  /**
   * Stops taking messages, requeues those that never started, lets running handlers
   * finish within `shutdownTimeoutMs`, then closes the channel (the broker requeues
   * any message whose handler was still running).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.stopping = true;
    this.unregister?.();
    if (this.reattachTimer) clearTimeout(this.reattachTimer);
    if (this.attaching) await this.attaching.catch(() => undefined);
    const ch = this.channel;
    if (ch && this.consumerTag) await ch.cancel(this.consumerTag).catch(() => undefined);
    await Promise.all(this.waiting.splice(0).map((d) => this.putBack(d)));
    if (this.active.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), this.shutdownTimeoutMs)));
      const outcome = await Promise.race([Promise.allSettled([...this.active]).then(() => 'done' as const), deadline]);
      clearTimeout(timer);
      if (outcome === 'timeout') {
        this.logger.warn('handlers still running at the shutdown deadline; their messages will be redelivered', { consumer: this.name, running: this.active.size });
        for (const c of this.controllers) c.abort(new ClosedError(`Consumer '${this.name}'`));
      }
    }
    this.closed = true;
    this.channel = undefined;
    if (ch) await ch.close().catch(() => undefined);
  }
}

/** The properties of a delivery for its copy in another queue (no expiration: a copy waits as long as its queue says). */
function copyProperties(msg: amqp.ConsumeMessage, headers: Record<string, unknown>): amqp.Options.Publish {
  return copyMessageProperties(msg.properties, headers) as amqp.Options.Publish;
}

class DuplicateDelivery extends Error {}

class StoreOutage extends Error {
  constructor(override readonly cause: unknown) {
    super('store outage');
  }
}

/** The first line of an error message, cut to 200 characters, for a log line's text (the whole message is a field). */
function firstLine(message: string): string {
  const line = message.split('\n', 1)[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}

/** The broker's late answer to a copy, or 'timeout' after `ms`. */
function lateAnswer(late: Promise<LateAnswer>, ms: number): Promise<LateAnswer | 'timeout'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), Math.max(0, ms));
    void late.then((answer) => {
      clearTimeout(timer);
      resolve(answer);
    });
  });
}
