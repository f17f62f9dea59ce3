import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { ClosedError, InvalidOptionError } from '../errors.js';
import { toLogger, type Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import { backoffDelay } from '../connection/index.js';
import { declareTopology } from '../topology/apply.js';
import { checkTopologyFeatures } from '../topology/broker-features.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import { checkPolicy } from '../retry-table/wait.js';
import { closeChannel } from '../connection/channel.js';
import { Breaker, breakerSettings, checkActor, controlSettings, verdictOf, type IntakeState, type ProbeStart } from '../breaker/index.js';
import type { ActionLog } from '../audit/entry.js';
import { AckLine } from './acks.js';
import { BlipMemory } from './blips.js';
import { Delivery, deliveryKey, idOf } from './delivery.js';
import { DEFAULT_COMMIT_TIMEOUT_MS, HandlerClock } from './handler-run.js';
import { decideFor, errorText, within, type ConsumerParts } from './parts.js';
import { bodyReaders } from './path.js';
import { Processor } from './process.js';
import { Settler } from './settle.js';
import type { ConsumerOptions, ConsumerStats, Handler } from './types.js';

const DEFAULTS = { prefetch: 20, concurrency: 10, timeoutMs: 60_000, shutdownTimeoutMs: 10_000, storeOutageHoldMs: 300_000 } as const;

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

/**
 * True for amqplib's errors of a channel or connection that went away under a request
 * (`Channel ended, no reply will be forthcoming`, `Connection closed`, a reset socket),
 * not the broker refusing it (a 404 or 403 names the operation and its code).
 */
function droppedMidway(error: unknown): boolean {
  const text = error instanceof Error ? `${error.message} ${(error as { code?: unknown }).code ?? ''}` : String(error);
  if (/\b40[34]\b|NOT[_-]FOUND|ACCESS[_-]REFUSED|PRECONDITION/i.test(text)) return false;
  return /Channel ended|Channel closed|Connection closed|Connection closing|ECONNRESET|EPIPE|socket hang up/i.test(text);
}

/** Options of {@link Consumer.pause} and {@link Consumer.resume}. */
export interface PauseOptions {
  /** Who did it, for the log and the action record. @default user@host */
  actor?: string;
  /** Where the pause or resume is recorded (a store's `store.actions`, or `fileActionLog(path)`). */
  audit?: ActionLog;
}

function int(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${v} is not a whole number from ${min} to ${max}`);
  return v;
}


/**
 * Consumes one work queue under warren's contract: ack on success; a permanent
 * error or bad payload parks at once; a transient error climbs the delay ladder and
 * parks at the cap; requeue only for messages never started when shutting down.
 * Every move is publish-with-confirm first, ack second.
 *
 * This class keeps the channel and the deliveries in flight (attach, reattach, the
 * pump, close); a delivery's way to its decision is the `Processor`'s, carrying
 * the decision out the `Settler`'s.
 *
 * Events: `outcome` ({@link Outcome}), `cancelled` (the broker cancelled the consumer),
 * `paused` and `resumed` (`{ consumer, by, reason, ... }`: the breaker or a hand pause,
 * see docs/breaker.md), `probe` (`{ consumer, result }`: a half-open breaker's message),
 * `error` is never emitted (failures are logged), so no listener is required.
 */
export class Consumer<T = unknown, Tx = undefined> extends EventEmitter {
  readonly name: string;
  readonly stats: ConsumerStats = { acked: 0, duplicate: 0, retried: 0, parked: 0, waiting: 0, requeued: 0, redeliveryMoved: 0, inFlight: 0, brokerCancels: 0, faultEventsFailed: 0 };
  private readonly prefetch: number;
  private readonly concurrency: number;
  private readonly shutdownTimeoutMs: number;
  private readonly logger: Logger;
  private channel: amqp.Channel | undefined;
  private consumerTag: string | undefined;
  private attaching: Promise<void> | undefined;
  private readonly waiting: Delivery[] = [];
  /**
   * Deliveries being processed (for what a closing channel had in flight), in slots a
   * finished one frees; {@link freeSlots} lists those free. Not a Set: a Set rebuilds its
   * hash table as entries come and go, and each old table keeps pointing at the new one
   * and at the entries it held. Once an old table has lived long enough to be promoted,
   * that chain keeps every later delivery alive through young-generation collections
   * until the next full one, and V8 grows the young generation to its maximum.
   */
  private readonly inFlight: (Delivery | undefined)[] = [];
  private readonly freeSlots: number[] = [];
  /** How many deliveries are in flight. */
  private running = 0;
  /** Called when the last delivery in flight finishes, while close() waits for them. */
  private drained: (() => void) | undefined;
  /** One clock for the timeouts of all this consumer's handler runs. */
  private readonly clock: HandlerClock;
  /** What this process knows of deliveries whose channel it saw close (see {@link BlipMemory}). */
  private readonly blips: BlipMemory;
  /** Per channel, the deliveries whose acks are coalesced (see {@link AckLine}). */
  private readonly lines = new Map<amqp.Channel, AckLine<Delivery>>();
  /** What the processor and the settler share with this consumer. */
  private readonly parts: ConsumerParts<T, Tx>;
  private readonly processor: Processor<T, Tx>;
  private readonly settler: Settler<T, Tx>;
  private stopping = false;
  private closed = false;
  private unregister: (() => void) | undefined;
  private reattachTimer: NodeJS.Timeout | undefined;
  private reattachAttempt = 0;
  /**
   * Deliveries whose work was done while their channel was gone or their consumer
   * cancelled (their ack never reached the broker), by {@link deliveryKey}: their
   * redelivery is acked by that outcome instead of being run again. Bounded, short-lived.
   */
  private readonly doneUnacked = new Map<number, { until: number; count: number; done: 'ack' | 'moved'; ackAs: 'acked' | 'duplicate' }>();
  /** The breaker and the hand pause: whether this consumer takes messages (see docs/breaker.md). */
  private readonly breaker: Breaker;
  /** The delivery a half-open breaker let through, until its decision. */
  private probing: Delivery | undefined;
  /** Intake changes, one after another (a cancel and a consume never cross). */
  private intakeWork: Promise<void> = Promise.resolve();

  constructor(
    private readonly connection: BrokerConnection,
    publisher: Publisher,
    private readonly topology: Topology,
    readonly declaration: ConsumerTopology,
    handler: Handler<T, Tx>,
    options: ConsumerOptions<T, Tx> = {},
  ) {
    // An async listener's rejection comes to the method below, not to the process.
    super({ captureRejections: true });
    this.name = declaration.name;
    if (typeof handler !== 'function') throw new InvalidOptionError('handler', 'expected a function (payload, context) => Promise<void>');
    this.prefetch = int(options.prefetch, DEFAULTS.prefetch, 'prefetch', 1, 65_535);
    this.concurrency = int(options.concurrency, Math.min(DEFAULTS.concurrency, this.prefetch), 'concurrency', 1, this.prefetch);
    const timeoutMs = int(options.timeoutMs, DEFAULTS.timeoutMs, 'timeoutMs', 1, 1_700_000);
    this.shutdownTimeoutMs = int(options.shutdownTimeoutMs, DEFAULTS.shutdownTimeoutMs, 'shutdownTimeoutMs', 0, 1_700_000);
    const storeOutageHoldMs = int(options.storeOutageHoldMs, DEFAULTS.storeOutageHoldMs, 'storeOutageHoldMs', 0, 1_500_000);
    const commitTimeoutMs = int(options.commitTimeoutMs, DEFAULT_COMMIT_TIMEOUT_MS, 'commitTimeoutMs', 1, 1_700_000);
    this.clock = new HandlerClock(timeoutMs, this.name, commitTimeoutMs);
    if (options.schema !== undefined && typeof options.schema?.['~standard']?.validate !== 'function') {
      throw new InvalidOptionError('schema', 'expected a Standard Schema (an object with a `~standard.validate` function), such as a zod schema');
    }
    if (options.classify !== undefined && typeof options.classify !== 'function') throw new InvalidOptionError('classify', 'expected a function (error) => "permanent" | "transient" | undefined');
    if (options.idempotency !== undefined && typeof options.idempotency?.run !== 'function') throw new InvalidOptionError('idempotency', 'expected a guard with a `run(messageId, consumer, work)` method, such as `store.idempotency()`');
    const { decoder, idReader } = bodyReaders(options);
    this.logger = options.logger === undefined ? toLogger(undefined) : guardedLogger(toLogger(options.logger));
    if (options.onOutcome !== undefined) {
      if (typeof options.onOutcome !== 'function') throw new InvalidOptionError('onOutcome', 'expected a function (outcome) => void');
      this.on('outcome', options.onOutcome);
    }
    if (options.retryTable !== undefined) {
      checkPolicy(options.retryTable);
      for (const rule of options.retryTable.rules ?? []) options.retryTable.table.nameDependency(rule.dependency);
    }
    this.blips = new BlipMemory(this.prefetch);
    this.parts = {
      name: this.name,
      declaration,
      topology,
      connection,
      publisher,
      options,
      logger: this.logger,
      stats: this.stats,
      blips: this.blips,
      timeoutMs,
      storeOutageHoldMs,
      retryQueueSet: new Set(declaration.retryQueues),
      current: (ch) => this.channel === ch,
      stopping: () => this.stopping,
      emit: (outcome) => void this.emit('outcome', outcome),
      decided: (d, decision) => this.decided(d, decision),
    };
    this.breaker = new Breaker(breakerSettings(options.breaker), {
      name: this.name,
      logger: this.logger,
      intakeChanged: () => this.intakeChanged(),
      probe: () => this.probe(),
      emit: (event, payload) => void this.emit(event, payload),
    }, controlSettings(options.control));
    this.settler = new Settler(this.parts);
    this.processor = new Processor(this.parts, handler, decoder, idReader, this.clock, this.settler);
  }

  /** A listener that returned a rejected promise: logged, like one that throws (see `Settler.count`). */
  [Symbol.for('nodejs.rejection')](error: unknown, event: string): void {
    this.logger.error('an outcome listener threw', { consumer: this.name, event, error: errorText(error) });
  }

  /** Attaches now and again after every reconnect. */
  async start(): Promise<void> {
    const hook = async (model: amqp.ChannelModel): Promise<void> => {
      if (this.stopping || this.closed) return;
      this.channel = undefined;
      // A retry inside the queue rejects with requeue: on a broker without it, a hot loop.
      checkTopologyFeatures(model, this.topology, this.name);
      await this.attach(model);
    };
    this.unregister = () => this.connection.offReady(hook);
    await this.breaker.start();
    try {
      await this.connection.onReady(hook);
    } catch (error) {
      if (droppedMidway(error) && !this.closed && !this.stopping) {
        // The connection dropped while the consumer attached: it attaches when the
        // connection is back (the hook stays registered), as after any later loss.
        this.logger.warn('the connection dropped while the consumer attached; it attaches again when the connection is back', { consumer: this.name, error: errorText(error) });
        this.scheduleReattach('the connection dropped while attaching');
        return;
      }
      // The first attach failed (no queue, no permission): leave nothing running behind.
      await this.close();
      throw error;
    }
  }

  /** True while the consumer is attached to its queue. */
  get attached(): boolean {
    return this.channel !== undefined && this.consumerTag !== undefined;
  }

  /** Whether the consumer takes messages, and if not why: its breaker, a hand pause (see docs/breaker.md). */
  get intake(): IntakeState {
    return this.breaker.intake();
  }

  /**
   * Stops taking messages until {@link resume}: the broker consumer is cancelled, the
   * deliveries that never started go back to the head of the queue (not moved, no
   * attempt counted), and those running finish as they would. The breaker never lifts a
   * hand pause. Logged, emitted as `paused`, and recorded in `audit` when given.
   * Resolves false when the consumer was already paused by hand.
   *
   * @example await consumer.pause('carrier maintenance until 14:00', { actor: 'alice' });
   */
  async pause(reason: string, options: PauseOptions = {}): Promise<boolean> {
    if (typeof reason !== 'string' || reason.trim() === '' || reason.length > 500) throw new InvalidOptionError('reason', `${JSON.stringify(reason)} is not a reason of 1 to 500 characters`, 'Say why, e.g. pause("carrier maintenance").');
    const actor = checkActor(options.actor);
    const done = this.breaker.pauseByHand(reason, actor);
    await this.intakeWork;
    if (done) await options.audit?.record({ actor, action: 'consumer.pause', consumer: this.name, count: 1, outcome: 'ok', detail: { reason } });
    return done;
  }

  /**
   * Lifts a hand pause made by {@link pause}: the consumer consumes again, unless its
   * breaker is open (it then probes as it would have) or a pause in the store (the
   * `control` option) is in force: only a resume there lifts that one. Resolves false
   * when there was no pause made by {@link pause}.
   */
  async resume(options: PauseOptions = {}): Promise<boolean> {
    const actor = checkActor(options.actor);
    const done = this.breaker.resumeByHand(actor);
    await this.intakeWork;
    if (done) await options.audit?.record({ actor, action: 'consumer.resume', consumer: this.name, count: 1, outcome: 'ok' });
    return done;
  }

  /** A delivery's decision, before it is carried out: what the breaker learns from. */
  private decided(d: Delivery, decision: Parameters<typeof verdictOf>[0]): void {
    const probe = d === this.probing;
    if (probe) this.probing = undefined;
    this.breaker.observe(verdictOf(decision), probe);
  }

  /** The breaker or a hand pause changed whether the consumer should take messages. */
  private intakeChanged(): void {
    this.intakeWork = this.intakeWork.then(() => this.syncIntake()).catch((error: unknown) => {
      this.logger.warn('could not change the consumer\'s intake; its next attach does', { consumer: this.name, error: errorText(error) });
    });
  }

  /** Cancels or re-creates the broker consumer, as the intake should be. */
  private async syncIntake(): Promise<void> {
    const ch = this.channel;
    if (ch === undefined || this.closed || this.stopping) return; // the next attach does as the intake says
    if (!this.breaker.intakeOpen) {
      const tag = this.consumerTag;
      if (tag === undefined) return;
      this.consumerTag = undefined;
      await ch.cancel(tag);
      const back = this.giveBack(ch);
      this.logger.info('consumer stopped taking messages', { consumer: this.name, queue: this.declaration.queue, givenBack: back, running: this.running });
      return;
    }
    const line = this.lines.get(ch);
    if (this.consumerTag !== undefined || line === undefined) return;
    await this.consumeOn(ch, line);
    this.logger.info('consumer takes messages again', { consumer: this.name, queue: this.declaration.queue });
    // Deliveries left waiting while paused (a redelivery held behind a run that ended then) start now.
    this.pump();
  }

  /**
   * What came on `ch` and never started goes back to the head of the queue, remembered as
   * a blip (its redelivery is no death). Not a copy to the back: the order is kept. Returns
   * how many went back.
   */
  private giveBack(ch: amqp.Channel): number {
    const back = this.waiting.filter((d) => d.ch === ch);
    this.forget(ch);
    for (const d of back) this.settler.requeue(d);
    return back.length;
  }

  private async consumeOn(ch: amqp.Channel, line: AckLine<Delivery>): Promise<void> {
    const reply = await ch.consume(this.declaration.queue, (msg) => this.onMessage(ch, line, msg), { noAck: false });
    if (this.channel !== ch || this.closed || this.stopping || !this.breaker.intakeOpen) {
      // Paused, closed or lost while the consume was on its way: what the broker sent
      // before the cancel took effect goes back too, or it would be held here unstarted
      // (a later resume consumes anew, and nothing would start these).
      if (this.channel === ch) {
        await ch.cancel(reply.consumerTag).catch(() => undefined);
        if (this.channel === ch) this.giveBack(ch);
      }
      return;
    }
    this.consumerTag = reply.consumerTag;
  }

  /** The half-open breaker's one message: taken with basic.get and run as any delivery. */
  private async probe(): Promise<ProbeStart> {
    const ch = this.channel;
    const line = ch === undefined ? undefined : this.lines.get(ch);
    if (ch === undefined || line === undefined || this.closed || this.stopping) return 'unavailable';
    const msg = await ch.get(this.declaration.queue, { noAck: false });
    if (msg === false) return 'empty';
    if (this.channel !== ch) return 'unavailable'; // its channel closed: the broker has it back
    const d = new Delivery(msg as unknown as amqp.ConsumeMessage, ch, line);
    line.arrived(d);
    // A redelivery of a run still going here is settled by that run: no verdict from it.
    if (msg.fields.redelivered && this.heldBehindFirst(d)) return 'unavailable';
    this.probing = d;
    this.logger.info('breaker half-open: one message goes through', { consumer: this.name, messageId: msg.properties.messageId as string | undefined });
    this.begin(d);
    return 'taken';
  }

  private attach(model: amqp.ChannelModel): Promise<void> {
    if (this.attaching) return this.attaching;
    this.attaching = (async () => {
      if (this.closed || this.stopping || this.channel) return;
      const ch = await model.createChannel();
      ch.on('error', (err: Error) => {
        if (/acknowledgement .*timed out|consumer[_ -]?timeout/i.test(err.message)) {
          // RabbitMQ before 4.3: a delivery held past the consumer timeout closes the channel.
          this.stats.brokerCancels += 1;
          this.logger.warn('the broker closed the consumer\'s channel: a delivery outlived the queue\'s consumer timeout; re-attaching (set the consumer timeout above the handler\'s timeoutMs, docs/brokers.md)', { consumer: this.name, queue: this.declaration.queue, error: err.message, heldLongestMs: this.heldLongestMs(ch) });
          this.emit('cancelled', { consumer: this.name, queue: this.declaration.queue });
          return;
        }
        this.logger.warn('consumer channel error', { consumer: this.name, error: err.message });
      });
      ch.on('close', () => this.onChannelClose(ch));
      // close() may have been called during any await: a consumer attached after it
      // would requeue every delivery in a loop.
      const abandon = async () => {
        if (!this.closed && !this.stopping) return false;
        await closeChannel(ch);
        return true;
      };
      await ch.prefetch(this.prefetch);
      if (await abandon()) return;
      this.channel = ch;
      const line = new AckLine<Delivery>(ch, this.settler.acked, 2 * this.prefetch + 64);
      this.lines.set(ch, line);
      if (this.breaker.intakeOpen) await this.consumeOn(ch, line);
      if (await abandon()) return;
      this.reattachAttempt = 0;
      this.logger.info(this.breaker.intakeOpen ? 'consumer attached' : 'consumer attached, paused: it takes no messages', { consumer: this.name, queue: this.declaration.queue });
    })().finally(() => {
      this.attaching = undefined;
    });
    return this.attaching;
  }

  private onChannelClose(ch: amqp.Channel): void {
    if (this.probing?.ch === ch) {
      this.probing = undefined;
      this.breaker.probeLost();
    }
    this.rememberInFlight(ch);
    // Deliveries waiting on this channel went back to the queue with it: never start them.
    this.forget(ch);
    if (this.channel !== ch) return;
    this.channel = undefined;
    this.consumerTag = undefined;
    if (!this.closed && !this.stopping) this.scheduleReattach('channel closed');
  }

  /**
   * Notes what `ch` held unsettled as it closed, and what was acked on it without proof
   * that the broker read the ack: those redeliveries are blips, not deaths.
   */
  private rememberInFlight(ch: amqp.Channel): void {
    const held: amqp.ConsumeMessage[] = [];
    for (const d of this.inFlight) {
      if (d === undefined) continue;
      if (d.ch === ch && !d.settled) held.push(d.msg);
      for (const t of d.twins ?? []) if (t.ch === ch) held.push(t.msg);
    }
    for (const d of this.waiting) if (d.ch === ch) held.push(d.msg);
    // Succeeded, their ack not written yet: the channel held them too.
    const line = this.lines.get(ch);
    this.lines.delete(ch);
    if (line !== undefined) for (const d of line.unacked()) held.push(d.msg);
    this.blips.channelLost(ch, held);
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
      if (this.channel && !this.consumerTag && this.breaker.intakeOpen) {
        const old = this.channel;
        this.channel = undefined;
        this.rememberInFlight(old);
        this.forget(old);
        await closeChannel(old);
      }
      await this.attach(model);
    } catch (error) {
      // The connection was closed for good: nothing to attach to, ever.
      if (error instanceof ClosedError) return;
      this.logger.warn('consumer could not re-attach; trying again', { consumer: this.name, why, error: errorText(error) });
      this.scheduleReattach(why);
    }
  }

  private onMessage(ch: amqp.Channel, line: AckLine<Delivery>, msg: amqp.ConsumeMessage | null): void {
    if (msg === null) {
      // The broker cancelled us: a consumer timeout (RabbitMQ 4.3 quorum queues cancel the
      // consumer that held a delivery past it), the queue was deleted, or it failed over.
      this.stats.brokerCancels += 1;
      const heldLongestMs = this.heldLongestMs(ch);
      const timeout = heldLongestMs > 0;
      this.logger.error(
        timeout
          ? 'the broker cancelled the consumer, most likely for a delivery held past the queue\'s consumer timeout (x-consumer-timeout or a consumer-timeout policy); re-attaching on a new channel (set the consumer timeout above the handler\'s timeoutMs, docs/brokers.md)'
          : 'the broker cancelled the consumer (its queue deleted, or failed over); re-declaring its queues and re-attaching',
        { consumer: this.name, queue: this.declaration.queue, heldLongestMs, cancels: this.stats.brokerCancels },
      );
      this.consumerTag = undefined;
      if (this.channel === ch) {
        // The broker has taken back what the cancelled consumer held: an ack of one of
        // its tags now acks nothing (and RabbitMQ 4.3 sends the cancel again later,
        // which amqplib takes for a connection error). Leave the channel now; the
        // runs still going finish, and their redeliveries are settled by their outcome.
        this.channel = undefined;
        this.rememberInFlight(ch);
        this.forget(ch);
        void closeChannel(ch);
      }
      this.emit('cancelled', { consumer: this.name, queue: this.declaration.queue });
      if (!this.closed && !this.stopping) this.scheduleReattach('cancelled');
      return;
    }
    const d = new Delivery(msg, ch, line);
    line.arrived(d);
    if (msg.fields.redelivered && this.heldBehindFirst(d)) return;
    this.waiting.push(d);
    if (this.stopping) return; // close() puts it back
    this.pump();
  }

  /** How long the oldest delivery still running on `ch` has been held, in ms (0 for none). */
  private heldLongestMs(ch: amqp.Channel): number {
    let oldest = Infinity;
    for (const d of this.inFlight) {
      if (d === undefined) continue;
      if (d.ch === ch && !d.settled && d.started > 0) oldest = Math.min(oldest, d.started);
      for (const t of d.twins ?? []) if (t.ch === ch) oldest = Math.min(oldest, t.started);
    }
    return oldest === Infinity ? 0 : Math.round(performance.now() - oldest);
  }

  private pump(): void {
    // Paused, the waiting deliveries are given back (see syncIntake), never started.
    while (!this.stopping && this.breaker.intakeOpen && this.running < this.concurrency && this.waiting.length > 0) this.begin(this.waiting.shift() as Delivery);
  }

  private begin(d: Delivery): void {
    d.slot = this.freeSlots.length > 0 ? (this.freeSlots.pop() as number) : this.inFlight.length;
    this.inFlight[d.slot] = d;
    this.running += 1;
    this.stats.inFlight = this.running;
    void this.deliver(d);
  }

  /**
   * A redelivery of a message this process is still running (on an older channel: the
   * broker took it back at a consumer timeout or a channel loss), or ran to its outcome
   * without its ack reaching the broker: never run beside or after that run. Held until
   * the run ends, then settled by its outcome ({@link releaseTwins}); or settled now.
   */
  private heldBehindFirst(d: Delivery): boolean {
    const key = deliveryKey(d.msg);
    const id = d.msg.properties.messageId as unknown;
    let first: Delivery | undefined;
    for (const f of this.inFlight) {
      if (f === undefined || f.ch === d.ch || f.msg.properties.messageId !== id || deliveryKey(f.msg) !== key) continue;
      if (first === undefined || (first.twins !== undefined && f.twins === undefined)) first = f;
    }
    if (first !== undefined) {
      d.started = performance.now(); // held from now (process() sets it again if it runs)
      (first.twins ??= []).push(d);
      this.logger.warn('a redelivery of a message still running here (the broker took it back); held until that run ends, then settled by its outcome', { consumer: this.name, messageId: idOf(d), runningMs: Math.round(performance.now() - first.started) });
      return true;
    }
    if (this.doneUnacked.size === 0) return false;
    const done = this.doneUnacked.get(key);
    if (done === undefined) return false;
    done.count -= 1;
    if (done.count <= 0 || done.until <= Date.now()) this.doneUnacked.delete(key);
    if (done.until <= Date.now()) return false;
    this.settleTwin(d, done.done, done.ackAs, false);
    return true;
  }

  /** Acks a redelivery whose work a run of this process already did; counts it if that run's ack never reached the broker. */
  private settleTwin(t: Delivery, done: 'ack' | 'moved', ackAs: 'acked' | 'duplicate', firstCounted: boolean): boolean {
    if (t.started === 0) t.started = performance.now();
    if (!this.settler.ack(t)) return false; // its channel is gone too: the broker redelivers it
    this.logger.info(done === 'ack' ? 'a redelivery of a message this process already handled; acked by that run\'s outcome' : 'a redelivery of a message this process already moved; acked, its copy carries on', { consumer: this.name, messageId: idOf(t) });
    if (done === 'ack') this.settler.count({ kind: firstCounted ? 'duplicate' : ackAs, messageId: idOf(t) }, t);
    return true;
  }

  /** The run of `d` ended: settle the redeliveries held behind it, or remember its outcome for one still to come. */
  private releaseTwins(d: Delivery): void {
    const twins = d.twins;
    d.twins = undefined;
    const done = d.done ?? (d.settled ? 'ack' : undefined);
    if (twins === undefined) {
      if (d.done !== undefined && !d.settled && !this.parts.current(d.ch)) this.rememberDone(d, d.done);
      return;
    }
    let counted = d.settled;
    for (const t of twins) {
      if (!this.parts.current(t.ch)) continue; // its channel is gone: the broker redelivers it
      if (done !== undefined) counted = this.settleTwin(t, done, d.ackAs, counted) || counted;
      else if (this.stopping) void this.settler.apply(t, {}, decideFor(this.parts, t, {}, 0, { kind: 'never-started' }));
      else this.waiting.unshift(t);
    }
  }

  private rememberDone(d: Delivery, done: 'ack' | 'moved'): void {
    const now = Date.now();
    if (this.doneUnacked.size >= 2 * this.prefetch + 64) {
      for (const [k, v] of this.doneUnacked) if (v.until <= now || this.doneUnacked.size >= 2 * this.prefetch + 64) this.doneUnacked.delete(k);
    }
    const key = deliveryKey(d.msg);
    const seen = this.doneUnacked.get(key);
    if (seen !== undefined && seen.until > now) {
      seen.count += 1;
      seen.until = now + 60_000;
    } else {
      this.doneUnacked.set(key, { until: now + 60_000, count: 1, done, ackAs: d.ackAs });
    }
  }

  /** Processes a delivery to its outcome, then makes room for the next. Never rejects. */
  private async deliver(d: Delivery): Promise<void> {
    try {
      await this.processor.process(d);
    } catch (error) {
      await this.settler.lastResort(d, error);
    }
    this.inFlight[d.slot] = undefined;
    this.freeSlots.push(d.slot);
    d.slot = -1;
    d.trace?.end(); // ends the span of a delivery that reached no outcome (no-op otherwise)
    this.releaseTwins(d);
    this.running -= 1;
    this.stats.inFlight = this.running;
    if (this.running === 0) this.drained?.();
    this.pump();
  }

  /**
   * Stops taking messages, requeues those that never started, lets running handlers
   * finish within `shutdownTimeoutMs`, then closes the channel (the broker requeues
   * any message whose handler was still running). A step that waits for the broker
   * (an attach on its way, the cancel, the channel's close) waits at most
   * `shutdownTimeoutMs`, within 1 to 5 s: past that, close() goes on, and the channel
   * is left to the connection's close (the broker requeues what it still holds).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.stopping = true;
    this.unregister?.();
    this.breaker.dispose();
    if (this.reattachTimer) clearTimeout(this.reattachTimer);
    const stepMs = Math.min(Math.max(this.shutdownTimeoutMs, 1_000), 5_000);
    const step = async (what: string, work: Promise<unknown>): Promise<void> => {
      if ((await within(work, stepMs)) === 'timeout') this.logger.warn(`the broker did not answer ${what} within ${stepMs} ms; closing goes on`, { consumer: this.name });
    };
    if (this.attaching) await step('the attach on its way', this.attaching);
    const ch = this.channel;
    if (ch && this.consumerTag) await step('the consumer\'s cancel', ch.cancel(this.consumerTag));
    await Promise.all(this.waiting.splice(0).map((d) => this.settler.apply(d, {}, decideFor(this.parts, d, {}, 0, { kind: 'never-started' })) ?? Promise.resolve()));
    if (this.running > 0) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), this.shutdownTimeoutMs)));
      const drained = new Promise<'done'>((r) => (this.drained = () => r('done')));
      const outcome = await Promise.race([drained, deadline]);
      this.drained = undefined;
      clearTimeout(timer);
      if (outcome === 'timeout') {
        this.logger.warn('handlers still running at the shutdown deadline; their messages will be redelivered', { consumer: this.name, running: this.running });
        for (const d of this.inFlight) d?.run?.abort(new ClosedError(`Consumer '${this.name}'`));
      }
    }
    // Runs that ignored their abort still time out, so their deliveries leave the
    // consumer; with none left the clock's timer is simply not set again.
    if (this.running === 0) this.clock.stop();
    this.closed = true;
    this.channel = undefined;
    // Acks that wait for the end of the turn are written before the channel closes.
    if (ch) this.lines.get(ch)?.flush();
    if (ch) await step('the channel\'s close', ch.close());
  }
}

