import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { ClosedError, HandlerTimeoutError, InvalidOptionError, InvalidPayloadError, UnroutableError, WarrenError } from '../errors.js';
import { HEADER, type ParkReason } from '../headers.js';
import { silentLogger, type Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import { backoffDelay } from '../connection/index.js';
import { declareTopology } from '../topology/apply.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import { describeFailure, failureHeaders } from '../park/failure.js';
import { copyProperties as copyMessageProperties } from '../park/message.js';
import { readAttempts } from '../retry/attempts.js';
import { decideRetry } from '../retry/ladder.js';
import { uuidv7 } from '../publish/message-id.js';
import { checkPolicy, decideWait, DEFAULT_WAIT_ATTEMPTS, isWaitForCondition, recordedFailure, type RetryTablePolicy, type WaitDecision } from '../retry-table/wait.js';
import { retryRow } from '../retry-table/row.js';
import { classifyFailure } from './classify.js';
import { formatIssues } from './schema.js';
import { traceDelivery, type DeliveryTrace } from '../trace/index.js';
import type { ConsumerOptions, ConsumerStats, Handler, MessageContext, Outcome } from './types.js';

const DEFAULTS = { prefetch: 20, concurrency: 10, timeoutMs: 60_000, shutdownTimeoutMs: 10_000, storeOutageHoldMs: 300_000 } as const;

interface Delivery {
  readonly msg: amqp.ConsumeMessage;
  readonly ch: amqp.Channel;
  /** performance.now() when its processing started, for the outcome's `durationMs`. */
  started?: number;
  /** The delivery's consumer span, from the start of its processing to its outcome. */
  trace?: DeliveryTrace;
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
  private channel: amqp.Channel | undefined;
  private consumerTag: string | undefined;
  private attaching: Promise<void> | undefined;
  private readonly waiting: Delivery[] = [];
  private readonly active = new Set<Promise<void>>();
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
    super();
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
    this.logger = options.logger ?? silentLogger;
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
    // Deliveries waiting on this channel went back to the queue with it: never start them.
    this.forget(ch);
    if (this.channel !== ch) return;
    this.channel = undefined;
    this.consumerTag = undefined;
    if (!this.closed && !this.stopping) this.scheduleReattach('channel closed');
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
        this.forget(old);
        await old.close().catch(() => undefined);
      }
      await this.attach(model);
    } catch (error) {
      this.logger.warn('consumer could not re-attach; trying again', { consumer: this.name, why, error: error instanceof Error ? error.message : String(error) });
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
      // One derived promise per delivery (this runs once per message).
      const run: Promise<void> = this.process(delivery).then(
        () => this.finished(run, delivery),
        (error: unknown) => {
          this.logger.error('unexpected failure while settling a delivery; it will be redelivered', { consumer: this.name, error: error instanceof Error ? error.message : String(error) });
          this.finished(run, delivery);
        },
      );
      this.active.add(run);
      this.stats.inFlight = this.active.size;
    }
  }

  private finished(run: Promise<void>, d: Delivery): void {
    d.trace?.end(); // ends the span of a delivery that reached no outcome (no-op otherwise)
    this.active.delete(run);
    this.stats.inFlight = this.active.size;
    this.pump();
  }

  private requeue(d: Delivery): void {
    try {
      d.ch.nack(d.msg, false, true);
      this.count({ kind: 'requeued', messageId: d.msg.properties.messageId as string | undefined });
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
      this.logger.error('an outcome listener threw', { consumer: this.name, outcome: outcome.kind, error: error instanceof Error ? error.message : String(error) });
    }
  }

  private ack(d: Delivery): boolean {
    try {
      d.ch.ack(d.msg);
      return true;
    } catch {
      // The channel closed: the broker will redeliver, and idempotency makes that harmless.
      return false;
    }
  }

  private async process(d: Delivery): Promise<void> {
    const { msg } = d;
    d.started = performance.now();
    const messageId = msg.properties.messageId as string | undefined;
    const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
    const attempts = readAttempts(headers, this.retryQueueSet);
    if (attempts.warning) this.logger.warn('attempt count unreadable', { consumer: this.name, messageId, warning: attempts.warning });
    const trace = (d.trace = traceDelivery(this.declaration, msg, attempts.failed + 1));

    let payload: T | undefined;
    try {
      if (msg.fields.redelivered && (await this.guardCrashLoop(d, headers))) return;
      const decoded = this.decode(msg, messageId);
      payload = decoded instanceof Promise ? await decoded : decoded;
      await trace.run(() => this.runHandler(d, payload as T, messageId, headers, attempts.failed));
    } catch (error) {
      if (error instanceof ParkNow) {
        await this.park(d, headers, error.reason, error.error, attempts.failed + 1);
        return;
      }
      if (error instanceof DuplicateDelivery) {
        if (this.ack(d)) this.count({ kind: 'duplicate', messageId }, d);
        return;
      }
      if (error instanceof StoreOutage) {
        await this.retry(d, headers, error.cause, attempts.failed, { countAttempt: false, tier: 0 });
        return;
      }
      // A permanent failure parks even when a broad rule would match it; only an explicit
      // WaitForConditionError overrides the classifier.
      const permanent = !isWaitForCondition(error) && classifyFailure(error, this.options.classify) === 'permanent';
      const waiting = !permanent && (isWaitForCondition(error) || this.options.retryTable?.rules?.length) ? this.waitDecision(d, error, payload as T, messageId, headers, attempts.failed) : undefined;
      if (waiting !== undefined) {
        await this.wait(d, headers, error, waiting, attempts.failed);
        return;
      }
      if (permanent) {
        await this.park(d, headers, 'permanent-error', error, attempts.failed + 1);
        return;
      }
      await this.retry(d, headers, error, attempts.failed, { countAttempt: true });
      return;
    }
    if (this.ack(d)) this.count({ kind: 'acked', messageId }, d);
  }

  /**
   * A redelivered message had no outcome last time: the process died on it, or the
   * channel closed. Quorum queues count deliveries themselves; on classic queues the
   * message is moved to the back of the queue with warren's own count. Returns true
   * when the delivery was settled here.
   */
  private async guardCrashLoop(d: Delivery, headers: Record<string, unknown>): Promise<boolean> {
    const limit = this.declaration.crashLimit;
    if (this.declaration.queueType === 'quorum') {
      const count = Number(headers['x-delivery-count'] ?? 1);
      if (Number.isFinite(count) && count >= limit) throw new ParkNow('crash-loop', new CrashLoopError(this.name, count + 1));
      return false;
    }
    const previous = Number(headers[HEADER.redeliveries] ?? 0);
    const redeliveries = (Number.isInteger(previous) && previous >= 0 ? previous : 0) + 1;
    if (redeliveries >= limit) throw new ParkNow('crash-loop', new CrashLoopError(this.name, redeliveries + 1));
    const moved = await this.move(d, this.declaration.queue, { ...headers, ...this.origin(d, headers), [HEADER.redeliveries]: redeliveries });
    if (moved) this.count({ kind: 'redelivery-moved', messageId: d.msg.properties.messageId as string | undefined, redeliveries }, d);
    return true;
  }

  /** Parses (and validates, when there is a schema) the body; synchronous without a schema. */
  private decode(msg: amqp.ConsumeMessage, messageId: string | undefined): T | Promise<T> {
    let value: unknown;
    try {
      value = JSON.parse(msg.content.toString('utf8'));
    } catch (error) {
      throw new ParkNow('invalid-json', new InvalidPayloadError(`The body is not valid JSON (${error instanceof Error ? error.message : String(error)}); ${msg.content.length} bytes, content type ${msg.properties.contentType ?? 'not set'}.`, [], { cause: error }));
    }
    if (messageId === undefined || messageId === '') {
      if (this.options.idempotency) {
        throw new ParkNow('missing-message-id', new InvalidPayloadError('The message has no message id, so the idempotency guard cannot tell a duplicate from new work. Publish with a message id (warren stamps one) and replay it.'));
      }
    }
    const schema = this.options.schema;
    if (!schema) return value as T;
    return this.validate(schema, value);
  }

  private async validate(schema: NonNullable<ConsumerOptions<T, Tx>['schema']>, value: unknown): Promise<T> {
    const result = await schema['~standard'].validate(value);
    if (result.issues) {
      const issues = formatIssues(result.issues);
      throw new ParkNow('invalid-payload', new InvalidPayloadError(`The payload does not match the schema: ${issues.slice(0, 10).join('; ')}`, issues));
    }
    return result.value;
  }

  private async runHandler(d: Delivery, payload: T, messageId: string | undefined, headers: Record<string, unknown>, failed: number): Promise<void> {
    const routingKey = typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : d.msg.fields.routingKey;
    const run = new HandlerRun<Tx>(messageId, routingKey, headers, failed + 1, d.msg, undefined as Tx);
    this.controllers.add(run as HandlerRun<unknown>);
    try {
      const guard = this.options.idempotency;
      let work: Promise<void>;
      if (guard) {
        work = this.runGuarded(guard, messageId as string, async (tx) => {
          run.tx = tx;
          this.arm(run);
          await this.handler(payload, run);
        });
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

  /** Runs the guard, holding the message while the database is unreachable. */
  private async runGuarded(guard: NonNullable<ConsumerOptions<T, Tx>['idempotency']>, messageId: string, work: (tx: Tx) => Promise<void>): Promise<void> {
    const holdUntil = Date.now() + this.storeOutageHoldMs;
    for (let attempt = 1; ; attempt++) {
      let result: 'done' | 'duplicate';
      try {
        result = await guard.run(messageId, this.name, work);
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
      this.logger.error('the retry-table policy threw (a tenant function?); the retry ladder takes the message', { consumer: this.name, messageId, error: e instanceof Error ? e.message : String(e) });
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
    const previous = Number(headers[HEADER.waits] ?? 0);
    const waits = (Number.isInteger(previous) && previous > 0 ? previous : 0) + 1;
    if (waits > (policy.maxAttempts ?? DEFAULT_WAIT_ATTEMPTS)) {
      await this.park(d, headers, 'max-attempts', recorded, failed + 1);
      return;
    }
    const origin = this.origin(d, headers);
    const row = retryRow({
      messageId: messageId !== undefined && messageId !== '' ? messageId : uuidv7(),
      content: d.msg.content,
      properties: d.msg.properties,
      headers: d.trace?.headers(headers) ?? headers,
      exchange: origin[HEADER.exchange] as string,
      routingKey: origin[HEADER.routingKey] as string,
      consumer: this.name,
      queue: this.declaration.queue,
      parkedQueue: this.declaration.parkedQueue,
      waits,
      failure: describeFailure(recorded),
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
        this.logger.error('could not store the message in the retry table; the retry ladder takes it', { consumer: this.name, messageId, error: e instanceof Error ? e.message : String(e) });
        await this.retry(d, headers, error, failed, { countAttempt: true });
        return;
      }
    }
    if (!this.ack(d)) return; // redelivered; the row is updated, not doubled, next time
    this.logger.info('message waits in the retry table', { consumer: this.name, messageId, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused });
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
    const next = {
      ...headers,
      ...this.origin(d, headers),
      ...failureHeaders(describeFailure(error), headers, new Date()),
      [HEADER.attempts]: decision.attempts,
      [HEADER.consumer]: this.name,
    };
    if (await this.move(d, queue, next)) {
      this.logger.info('handler failed; retrying later', { consumer: this.name, messageId, attempts: decision.attempts, queue });
      this.count({ kind: 'retried', messageId, attempts: decision.attempts, queue, error }, d);
    }
  }

  private async park(d: Delivery, headers: Record<string, unknown>, reason: ParkReason, error: unknown, attempts: number): Promise<void> {
    const messageId = d.msg.properties.messageId as string | undefined;
    const now = new Date();
    const next = {
      ...headers,
      ...this.origin(d, headers),
      ...failureHeaders(describeFailure(error), headers, now),
      [HEADER.attempts]: attempts,
      [HEADER.consumer]: this.name,
      [HEADER.parkedReason]: reason,
      [HEADER.parkedAt]: now.toISOString(),
    };
    if (await this.move(d, this.declaration.parkedQueue, next)) {
      this.logger.warn('message parked', { consumer: this.name, messageId, reason, attempts, error: describeFailure(error).message });
      this.count({ kind: 'parked', messageId, reason, attempts, error }, d);
    }
  }

  /** The original exchange and routing key, kept from the first failure on. */
  private origin(d: Delivery, headers: Record<string, unknown>): Record<string, string> {
    return {
      [HEADER.exchange]: typeof headers[HEADER.exchange] === 'string' ? (headers[HEADER.exchange] as string) : d.msg.fields.exchange,
      [HEADER.routingKey]: typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : d.msg.fields.routingKey,
    };
  }

  /**
   * Publishes a copy to `queue` (through the default exchange, so it reaches that
   * queue alone) and waits for the confirm, then acks the original. While the publish
   * fails, the original stays unacked and the move is tried again; if the channel
   * closes meanwhile the broker redelivers it. Returns true when acked.
   */
  private async move(d: Delivery, queue: string, headers: Record<string, unknown>): Promise<boolean> {
    const properties = copyProperties(d.msg, d.trace?.headers(headers) ?? headers);
    for (let attempt = 1; ; attempt++) {
      if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it
      try {
        await this.publisher.send({ exchange: '', routingKey: queue, content: d.msg.content, properties });
        return this.ack(d);
      } catch (error) {
        if (error instanceof ClosedError) return false;
        this.logger.error('could not move a message; it stays unacked and the move is tried again', { consumer: this.name, queue, attempt, error: error instanceof Error ? error.message : String(error) });
        if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it
        if (error instanceof UnroutableError) {
          // Someone deleted a retry or parked queue: declare this consumer's queues again.
          await this.connection
            .waitReady(5000)
            .then((model) => declareTopology(model, this.topology, this.name))
            .catch((e: unknown) => this.logger.error('could not declare the queues again', { consumer: this.name, error: e instanceof Error ? e.message : String(e) }));
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
      if (this.ack(d)) this.count({ kind: 'requeued', messageId });
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
