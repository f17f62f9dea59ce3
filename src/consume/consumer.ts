import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { ClosedError, InvalidOptionError, PublishNotConfirmedError, UnroutableError, WarrenError } from '../errors.js';
import { HEADER, MAX_HEADER_TABLE_BYTES } from '../headers.js';
import { toLogger, type Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import { backoffDelay } from '../connection/index.js';
import { declareTopology } from '../topology/apply.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import { describeFailure } from '../park/failure.js';
import { copyProperties as copyMessageProperties, hasBrokerHeader, headerTableBytes, withoutBrokerHeaders } from '../park/message.js';
import { readAttempts } from '../retry/attempts.js';
import { uuidv7 } from '../publish/message-id.js';
import { checkPolicy, type RetryTablePolicy } from '../retry-table/wait.js';
import { retryRow } from '../retry-table/row.js';
import { bodyDecoder, type BodyDecoder } from './decode.js';
import { messageIdReader, type MessageIdReader } from './message-id.js';
import { decide, type Decision, type Happening } from './contract.js';
import { DuplicateDelivery, happening, HandlerClock, HandlerRun, runHandler, StoreOutage } from './handler-run.js';
import { copyHeaders, minimalHeaders, originHeaders } from './copy-headers.js';
import { decodeBody, messageIdOf, validatePayload } from './payload.js';
import { traceDelivery, type DeliveryTrace } from '../trace/index.js';
import type { ConsumerOptions, ConsumerStats, Handler, MessageContext, Outcome } from './types.js';
import { closeChannel } from '../connection/channel.js';

const DEFAULTS = { prefetch: 20, concurrency: 10, timeoutMs: 60_000, shutdownTimeoutMs: 10_000, storeOutageHoldMs: 300_000 } as const;

/** One delivery, from its arrival to its outcome. Every field is declared here, so its shape never changes on the way. */
class Delivery {
  /** The id `messageIdFrom` found, for a message without a `message-id` property. */
  foundId: string | undefined = undefined;
  /** performance.now() when its processing started, for the outcome's `durationMs`; 0 before. */
  started = 0;
  /** The delivery's consumer span, from the start of its processing to its outcome. */
  trace: DeliveryTrace | undefined = undefined;
  /** Acked or nacked by this process: nothing more may be done with it. */
  settled = false;
  /** Its slot among the deliveries in flight; -1 while it waits. */
  slot = -1;
  /** The payload its handler is given. */
  payload: unknown = undefined;
  /** Its handler's run, while the handler runs (aborted if it outlives a shutdown). */
  run: HandlerRun<unknown> | undefined = undefined;

  constructor(
    readonly msg: amqp.ConsumeMessage,
    readonly ch: amqp.Channel,
  ) {}
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

/** The delivery's message id: the producer's property, else what `messageIdFrom` found. */
function idOf(d: Delivery): string | undefined {
  const own = d.msg.properties.messageId as string | undefined;
  return own !== undefined && own !== '' ? own : d.foundId;
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

/** How long a move is tried again while the broker refuses the copy, before the delivery is nacked with requeue. */
const MOVE_GIVE_UP_MS = 5 * 60_000;

/** Deliveries this process saw in flight when their channel closed, kept this long. */
const SEEN_IN_FLIGHT_MS = 30 * 60_000;
const SEEN_IN_FLIGHT_MAX = 10_000;
/**
 * How long after an ack its channel is asked for proof that the broker read it. An ack
 * is only written to the socket: a connection that dies before the broker reads it
 * loses it, and the message comes back redelivered. Only the broker's reply to a
 * later request on the same channel proves it read the ack (its frames in the other
 * direction, heartbeats included, keep coming while it reads nothing).
 */
const ACK_PROOF_MS = 1000;
/**
 * How long after a channel's loss a redelivery nobody noted may be one that was in
 * transit then: such deliveries go back to the queue at once and come straight back
 * (to this process after its reattach, or to another consumer).
 */
const IN_TRANSIT_MS = 60_000;

/** Identifies a delivery across redeliveries: its message id, else its body and routing key. */
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

/**
 * Identifies a delivery across redeliveries, as a number: a 53-bit hash of its message
 * id, else (negative) 48 bits of the SHA-1 of its routing key and body. A number, not a
 * string: every ack keeps its key for a second or two (see {@link UnprovenAcks}), and
 * numbers in a Float64Array keep nothing alive on the heap. Two messages share a key
 * with odds of about one in 10^12 for 10,000 keys held; in such a pair one message's
 * redelivery would be taken for a blip and the other's blip counted as a death. The
 * hash is seeded at random per process, so a producer cannot choose ids that clash.
 */
function deliveryKey(msg: amqp.ConsumeMessage): number {
  const id: unknown = msg.properties.messageId;
  if (typeof id === 'string' && id !== '') return hash53(id);
  return -1 - createHash('sha1').update(msg.fields.routingKey).update('\0').update(msg.content).digest().readUIntBE(0, 6);
}

/** This process's seed for {@link hash53}: ids that clash in one process do not in another, nor can be found ahead. */
const HASH_SEED: readonly [number, number] = ((b: Buffer) => [b.readUInt32LE(0), b.readUInt32LE(4)] as const)(randomBytes(8));

/** A 53-bit hash of a string (two 32-bit multiplicative hashes, mixed), never negative. */
export function hash53(text: string): number {
  let h1 = HASH_SEED[0];
  let h2 = HASH_SEED[1];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507);
  h1 ^= Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507);
  h2 ^= Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

/** Acks written on one channel that the broker has not yet been seen to read: their {@link deliveryKey}s, in a ring. */
class UnprovenAcks {
  /** Allocated at the first ack, {@link SEEN_IN_FLIGHT_MAX} keys; key number `n` is at `n % length`. */
  private keys: Float64Array | undefined;
  /** Keys ever added. */
  added = 0;
  /** Keys before this number are gone (proven, or dropped past the bound). */
  first = 0;
  timer: NodeJS.Timeout | undefined;
  /** A request for proof is awaiting its reply. */
  asking = false;

  get size(): number {
    return this.added - this.first;
  }

  add(key: number): void {
    const keys = (this.keys ??= new Float64Array(SEEN_IN_FLIGHT_MAX));
    if (this.size >= keys.length) this.first += 1;
    keys[this.added % keys.length] = key;
    this.added += 1;
  }

  /** The broker read every ack before key number `upTo`. */
  proven(upTo: number): void {
    this.first = Math.max(this.first, upTo);
  }

  /** The keys still unproven, oldest first. */
  unproven(): number[] {
    const out: number[] = [];
    const keys = this.keys;
    if (keys !== undefined) for (let n = this.first; n < this.added; n++) out.push(keys[n % keys.length] as number);
    return out;
  }
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
  /** The delivery whose handler {@link startHandler} starts (trace.run calls it at once). */
  private starting: Delivery | undefined;
  /**
   * Deliveries that were in flight (or waiting) when this process saw their channel
   * close, by {@link deliveryKey}, with when to forget them. Their redelivery is a blip
   * this process lived through, not a death: the crash-loop guard does not count it.
   * Counted per key: two deliveries with one id (a publish sent again after a lost
   * confirm) can be in flight together, and each comes back.
   */
  private readonly seenInFlight = new Map<number, { count: number; until: number }>();
  /**
   * Per channel, the {@link deliveryKey}s of deliveries acked on it that the broker has
   * not yet been seen to read (see {@link ACK_PROOF_MS}). When the channel closes they
   * are in doubt and noted like deliveries in flight: their redelivery is a blip.
   */
  private readonly unprovenAcks = new Map<amqp.Channel, UnprovenAcks>();
  /** How many redeliveries nobody noted may be deliveries lost in transit at the last channel loss (see {@link rememberInFlight}). */
  private inTransit: { count: number; until: number } | undefined;
  /** Channels whose loss was noted (a reattach and the close both note it). */
  private readonly transitNoted = new WeakSet<amqp.Channel>();
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
    this.clock = new HandlerClock(this.timeoutMs, this.name);
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
    const hook = async (model: amqp.ChannelModel): Promise<void> => {
      if (this.stopping || this.closed) return;
      this.channel = undefined;
      await this.attach(model);
    };
    this.unregister = () => this.connection.offReady(hook);
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
        await closeChannel(ch);
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

  /**
   * Notes what `ch` held unsettled as it closed, and what was acked on it without proof
   * that the broker read the ack: those redeliveries are blips, not deaths.
   */
  private rememberInFlight(ch: amqp.Channel): void {
    let held = 0;
    for (const d of this.inFlight) {
      if (d !== undefined && d.ch === ch && !d.settled) {
        this.remember(d.msg);
        held += 1;
      }
    }
    for (const d of this.waiting) {
      if (d.ch === ch) {
        this.remember(d.msg);
        held += 1;
      }
    }
    const unproven = this.unprovenAcks.get(ch);
    if (unproven !== undefined) {
      this.unprovenAcks.delete(ch);
      clearTimeout(unproven.timer);
      for (const key of unproven.unproven()) this.remember(key);
    }
    // Deliveries the broker had sent that never arrived (in the socket buffers, on the
    // wire) come back redelivered too, and this process never saw them. Which they were
    // is unknown; how many there could be is not: the prefetch, less what the channel
    // held. (Acks in doubt do not lower it: an ack the broker did read freed its slot
    // for a delivery that may be in transit now.) That many redeliveries nobody noted
    // are let through as blips for a short while.
    if (!this.transitNoted.has(ch)) {
      this.transitNoted.add(ch);
      const unseen = Math.max(0, this.prefetch - held);
      if (unseen > 0) this.inTransit = { count: unseen, until: Date.now() + IN_TRANSIT_MS };
    }
  }

  /** Keeps an ack on `d.ch` in doubt until the broker answers a request written after it. */
  private ackWritten(d: Delivery): void {
    let unproven = this.unprovenAcks.get(d.ch);
    if (unproven === undefined) this.unprovenAcks.set(d.ch, (unproven = new UnprovenAcks()));
    unproven.add(deliveryKey(d.msg));
    this.askForProof(d.ch, unproven);
  }

  /**
   * Asks the broker, on `ch`, for a reply that proves it read every ack written before
   * the request: a `basic.qos` with the channel's own prefetch (it changes nothing).
   * One request at a time, at most one a second.
   */
  private askForProof(ch: amqp.Channel, unproven: UnprovenAcks): void {
    if (unproven.asking || unproven.timer !== undefined) return;
    unproven.timer = setTimeout(() => {
      unproven.timer = undefined;
      if (this.unprovenAcks.get(ch) !== unproven || unproven.size === 0) return;
      const upTo = unproven.added;
      unproven.asking = true;
      ch.prefetch(this.prefetch).then(
        () => {
          unproven.asking = false;
          if (this.unprovenAcks.get(ch) !== unproven) return;
          unproven.proven(upTo);
          if (unproven.size > 0) this.askForProof(ch, unproven);
          else this.unprovenAcks.delete(ch);
        },
        () => {
          // The channel is closing: its close notes the acks still in doubt.
          unproven.asking = false;
        },
      );
    }, ACK_PROOF_MS);
    unproven.timer.unref();
  }

  private remember(msgOrKey: amqp.ConsumeMessage | number): void {
    const now = Date.now();
    if (this.seenInFlight.size >= SEEN_IN_FLIGHT_MAX) {
      for (const [k, seen] of this.seenInFlight) if (seen.until <= now || this.seenInFlight.size >= SEEN_IN_FLIGHT_MAX) this.seenInFlight.delete(k);
    }
    const key = typeof msgOrKey === 'number' ? msgOrKey : deliveryKey(msgOrKey);
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
    const key = deliveryKey(msg);
    const seen = this.seenInFlight.size === 0 ? undefined : this.seenInFlight.get(key);
    if (seen === undefined) return this.wasInTransit();
    seen.count -= 1;
    if (seen.count <= 0 || seen.until <= Date.now()) this.seenInFlight.delete(key);
    return seen.until > Date.now();
  }

  /** True (for as many as may have been in transit) for a redelivery nobody noted, soon after a channel's loss. */
  private wasInTransit(): boolean {
    const transit = this.inTransit;
    if (transit === undefined) return false;
    if (transit.until <= Date.now()) {
      this.inTransit = undefined;
      return false;
    }
    transit.count -= 1;
    if (transit.count <= 0) this.inTransit = undefined;
    return true;
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

  private onMessage(ch: amqp.Channel, msg: amqp.ConsumeMessage | null): void {
    if (msg === null) {
      // The broker cancelled us: the queue was deleted, or it failed over.
      this.logger.error('the broker cancelled the consumer; re-declaring its queues and re-attaching', { consumer: this.name, queue: this.declaration.queue });
      this.consumerTag = undefined;
      this.emit('cancelled', { consumer: this.name, queue: this.declaration.queue });
      if (!this.closed && !this.stopping) this.scheduleReattach('cancelled');
      return;
    }
    this.waiting.push(new Delivery(msg, ch));
    if (this.stopping) return; // close() puts it back
    this.pump();
  }

  private pump(): void {
    while (!this.stopping && this.running < this.concurrency && this.waiting.length > 0) {
      const d = this.waiting.shift() as Delivery;
      d.slot = this.freeSlots.length > 0 ? (this.freeSlots.pop() as number) : this.inFlight.length;
      this.inFlight[d.slot] = d;
      this.running += 1;
      this.stats.inFlight = this.running;
      void this.deliver(d);
    }
  }

  /** Processes a delivery to its outcome, then makes room for the next. Never rejects. */
  private async deliver(d: Delivery): Promise<void> {
    try {
      await this.process(d);
    } catch (error) {
      await this.lastResort(d, error);
    }
    this.inFlight[d.slot] = undefined;
    this.freeSlots.push(d.slot);
    d.slot = -1;
    d.trace?.end(); // ends the span of a delivery that reached no outcome (no-op otherwise)
    this.running -= 1;
    this.stats.inFlight = this.running;
    if (this.running === 0) this.drained?.();
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
      this.count({ kind: 'requeued', messageId: idOf(d) }, d);
    } catch {
      // The channel is gone; the broker requeues the message itself.
    }
  }

  private count(outcome: Outcome, d?: Delivery): void {
    if (d !== undefined && d.started > 0 && outcome.durationMs === undefined) (outcome as { durationMs?: number }).durationMs = performance.now() - d.started;
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
      this.ackWritten(d);
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
    let decision: Decision | undefined;
    try {
      if (msg.fields.redelivered) {
        const guard = this.decide(d, headers, attempts.failed, { kind: 'redelivered', seenInFlight: this.wasSeenInFlight(msg) });
        if (guard.kind === 'move-back') return await this.apply(d, headers, guard);
        if (guard.kind !== 'run') decision = guard;
      }
      if (decision === undefined) {
        const body = decodeBody(this.decoder, msg, this.timeoutMs, this.name);
        const value: unknown = body instanceof Promise ? await body : body;
        // The producer's id, when there is one, is the id (see messageIdOf).
        if (messageId === undefined || messageId === '') {
          const id = messageIdOf(this.idReader, msg, value, messageId, this.options.idempotency !== undefined);
          if (id.found && id.id !== undefined) d.foundId = id.id;
          messageId = id.id;
        }
        const schema = this.options.schema;
        payload = schema ? await validatePayload(schema, value, this.timeoutMs, this.name) : (value as T);
        const routingKey = typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : msg.fields.routingKey;
        d.payload = payload;
        d.run = new HandlerRun<Tx>(messageId, routingKey, headers, attempts.failed + 1, msg, undefined as Tx) as HandlerRun<unknown>;
        this.starting = d;
        await trace.run(this.startHandler);
        decision = this.decide(d, headers, attempts.failed, RESOLVED);
      }
    } catch (caught) {
      decision = this.decide(d, headers, attempts.failed, happening(caught), payload);
    }
    d.run = undefined;
    d.payload = undefined;
    const applying = this.apply(d, headers, decision);
    if (applying !== undefined) await applying;
  }

  /** The contract's decision for this delivery (see {@link decide}), its notes logged. */
  private decide(d: Delivery, headers: Record<string, unknown>, failed: number, happened: Happening, payload?: T): Decision {
    const messageId = idOf(d);
    // Only a failure's decision reads the context (the retry table's tenant functions).
    const context = happened.kind === 'threw' || happened.kind === 'timed-out' ? new DecisionContext(messageId, d.msg.fields.routingKey, headers, failed + 1, d.msg) : undefined;
    const decision = decide({ happened, attempts: failed, headers, consumer: this.declaration, classify: this.options.classify, retryTable: this.options.retryTable, payload, context });
    if (decision.notes !== undefined) for (const note of decision.notes) this.logger.error(note.message, { consumer: this.name, messageId, ...(note.error === undefined ? {} : { error: errorText(note.error) }) });
    return decision;
  }

  /**
   * Carries out a decision: the ack, the move, the retry-table row or the put-back.
   * Returns the promise of what goes on after it returns, or undefined when it is done
   * (an ack: no promise made for the most common outcome).
   */
  private apply(d: Delivery, headers: Record<string, unknown>, decision: Decision): Promise<void> | undefined {
    switch (decision.kind) {
      case 'ack':
        if (this.ack(d)) this.count({ kind: decision.duplicate ? 'duplicate' : 'acked', messageId: idOf(d), durationMs: performance.now() - d.started }, d);
        return undefined;
      case 'retry':
        return this.retry(d, headers, decision);
      case 'park':
        return this.park(d, headers, decision);
      case 'wait':
        return this.wait(d, headers, decision);
      case 'move-back':
        return this.moveBack(d, headers, decision);
      case 'requeue':
        if (decision.blip) return this.putBack(d);
        this.requeue(d, false);
        return undefined;
      case 'run':
        return undefined;
    }
  }

  private async moveBack(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'move-back' }>): Promise<void> {
    if (await this.move(d, this.declaration.queue, copyHeaders(decision, headers, d.msg.fields, this.name, new Date()), decision)) {
      this.count({ kind: 'redelivery-moved', messageId: idOf(d), redeliveries: decision.redeliveries }, d);
    }
  }

  /**
   * The last resort, for a delivery whose failure path itself threw (a bug, or user
   * code warren did not expect to throw): park it with minimal metadata. If even that
   * cannot be done, nack it with requeue, so the broker has it back at once rather than
   * after its consumer timeout. Never throws.
   */
  private async lastResort(d: Delivery, thrown: unknown): Promise<void> {
    const messageId = idOf(d);
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
      await this.apply(d, headers, this.decide(d, headers, readAttempts(headers, this.retryQueueSet).failed, { kind: 'failure-path-threw', error: thrown }));
    } catch (error) {
      if (d.settled || this.channel !== d.ch) return;
      this.logger.error('could not park a message whose failure path threw; nacked with requeue, so it will be delivered again', { consumer: this.name, messageId, error: errorText(error) });
      this.requeue(d, false);
    }
  }

  /**
   * Runs the handler of {@link starting} (its payload and run set by `process`): what
   * `trace.run` calls, at once, with the delivery's span active. One function for all
   * deliveries rather than a closure made for each.
   */
  private readonly startHandler = (): Promise<void> => {
    const d = this.starting;
    this.starting = undefined;
    if (d === undefined || d.run === undefined) return Promise.reject(new Error('no delivery to run the handler of'));
    const run = d.run as HandlerRun<Tx>;
    const guard = this.options.idempotency;
    return runHandler(this.handler, d.payload as T, run, this.timeoutMs, this.name, guard && ((work, signal) => this.runGuarded(guard, run.messageId as string, work, signal)), this.clock);
  };

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

  /**
   * Stores the message as a retry-table row and acks it once the row is committed.
   * While the database is unreachable the message is held unacked and the insert tried
   * again; a row that cannot be stored is decided again (`not-stored`).
   */
  private async wait(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'wait' }>): Promise<void> {
    const policy = this.options.retryTable as RetryTablePolicy<T>;
    const messageId = idOf(d);
    const recordedInfo = describeFailure(decision.error);
    let rowId = messageId;
    if (rowId === undefined && this.idReader === undefined && !this.options.idempotency) rowId = uuidv7();
    if (rowId === undefined) {
      // No id yet (the decoder did not finish): a row under a made-up id would come back
      // as a message the guard cannot match with its other copies. The ladder takes it,
      // and the copy's id is read again when it decodes.
      await this.apply(d, headers, this.decide(d, headers, decision.attempts, { kind: 'not-stored', error: decision.cause, outage: false }));
      return;
    }
    const origin = originHeaders(headers, d.msg.fields);
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
      waits: decision.waits,
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
        if (outage) this.logger.error('database still unavailable; the message goes round the first retry tier (no attempt counted) and will ask again', { consumer: this.name, messageId, error: e.message });
        else this.logger.error('could not store the message in the retry table; the retry ladder takes it', { consumer: this.name, messageId, error: errorText(e) });
        await this.apply(d, headers, this.decide(d, headers, decision.attempts, { kind: 'not-stored', error: decision.cause, outage }));
        return;
      }
    }
    if (!this.ack(d)) return; // redelivered; the row is updated, not doubled, next time
    this.logger.info(`message waits in the retry table for '${decision.dependency}' (${recordedInfo.errorClass}: ${firstLine(recordedInfo.message)})`, { consumer: this.name, messageId, waits: decision.waits, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused, errorClass: recordedInfo.errorClass, error: recordedInfo.message });
    this.count({ kind: 'waiting', messageId, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused, nextAttemptAt: decision.nextAttemptAt, error: decision.error }, d);
  }

  private async retry(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'retry' }>): Promise<void> {
    const messageId = idOf(d);
    // Described once, for the copy's headers and the log line.
    const failure = describeFailure(decision.error);
    if (await this.move(d, decision.queue, copyHeaders(decision, headers, d.msg.fields, this.name, new Date(), failure), decision)) {
      this.logger.info(`handler failed (${failure.errorClass}: ${firstLine(failure.message)}); retrying in ${decision.delayMs} ms`, {
        consumer: this.name, messageId, attempts: decision.attempts, maxAttempts: this.declaration.maxAttempts, tier: decision.tier, delayMs: decision.delayMs, queue: decision.queue,
        errorClass: failure.errorClass, error: failure.message,
      });
      this.count({ kind: 'retried', messageId, attempts: decision.attempts, queue: decision.queue, error: decision.error }, d);
    }
  }

  private async park(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'park' }>): Promise<void> {
    const messageId = idOf(d);
    const { reason, attempts } = decision;
    const failure = describeFailure(decision.error);
    if (await this.move(d, this.declaration.parkedQueue, copyHeaders(decision, headers, d.msg.fields, this.name, new Date(), failure), decision)) {
      if (!decision.minimal) this.logger.warn(`message parked (${reason}; ${failure.errorClass}: ${firstLine(failure.message)})`, { consumer: this.name, messageId, reason, attempts, queue: this.declaration.parkedQueue, errorClass: failure.errorClass, error: failure.message });
      this.count({ kind: 'parked', messageId, reason, attempts, error: decision.error }, d);
    }
  }

  /**
   * Publishes a copy to `queue` (through the default exchange, so it reaches that
   * queue alone) and waits for the confirm, then acks the original. While the publish
   * fails, the original stays unacked and the move is tried again; if the channel
   * closes meanwhile the broker redelivers it. A copy whose headers cannot be encoded
   * (the producer's own headers fill the table) is never tried again as it is: it is
   * parked with minimal metadata (see {@link minimalHeaders}), counted here. Returns true
   * when moved as asked and acked. `headers` are the copy's own (made for it alone), so
   * they are copied again only to drop the broker's headers, when they hold any.
   */
  private async move(d: Delivery, queue: string, headers: Record<string, unknown>, intended: Decision): Promise<boolean> {
    let target = queue;
    let table = d.trace?.headers(headers) ?? headers;
    if (hasBrokerHeader(table)) table = withoutBrokerHeaders(table);
    let minimal = false;
    let fate = intended;
    const fallBack = (why: string): void => {
      this.logger.error('the copy\'s headers cannot be encoded; parking it with minimal metadata instead', { consumer: this.name, messageId: idOf(d), queue, why });
      fate = this.decide(d, headers, 0, { kind: 'unencodable', intended });
      target = this.declaration.parkedQueue;
      table = minimalHeaders(fate as Extract<Decision, { kind: 'park' }>, (d.msg.properties.headers ?? {}) as Record<string, unknown>, d.msg.fields, this.name, new Date());
      minimal = true;
    };
    const bytes = headerTableBytes(table);
    if (bytes > MAX_HEADER_TABLE_BYTES) fallBack(`${bytes} bytes of headers, more than ${MAX_HEADER_TABLE_BYTES}`);
    const giveUpAt = Date.now() + MOVE_GIVE_UP_MS;
    for (let attempt = 1; ; attempt++) {
      if (this.channel !== d.ch) return false; // its channel is gone: the broker redelivers it
      if (Date.now() > giveUpAt) {
        // Bounded: well before the broker's consumer timeout (30 min) closes the channel
        // and takes every other delivery on it back too.
        this.logger.error(`could not move a message for ${MOVE_GIVE_UP_MS / 60_000} minutes; nacked with requeue, so it will be delivered again`, { consumer: this.name, queue: target, messageId: idOf(d) });
        await this.apply(d, headers, this.decide(d, headers, 0, { kind: 'move-failed' }));
        return false;
      }
      const landed = (): boolean => {
        const acked = this.ack(d);
        if (!minimal) return acked;
        // Parked instead of moved as asked: counted here, and the caller's outcome is not.
        if (acked) this.count({ kind: 'parked', messageId: idOf(d), reason: String(table[HEADER.parkedReason]), attempts: 'attempts' in fate ? fate.attempts : 0, error: describeFailure('error' in fate ? fate.error : undefined) }, d);
        return false;
      };
      try {
        await this.publisher.send({ exchange: '', routingKey: target, content: d.msg.content, properties: copyProperties(d.msg, table, true) });
        return landed();
      } catch (error) {
        if (error instanceof ClosedError) return false;
        if (error instanceof PublishNotConfirmedError && error.late !== undefined) {
          // The copy was written and its channel is open: it may still land. Writing
          // another now would add a copy per timeout for as long as the broker is slow,
          // so wait for the broker's answer (bounded by the move's give-up time).
          this.logger.warn('no confirm yet for a moved copy; waiting for the broker\'s answer before writing another', { consumer: this.name, queue: target, attempt, messageId: idOf(d) });
          const answer = await orTimeout(error.late, giveUpAt - Date.now());
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
    const messageId = idOf(d);
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
   * any message whose handler was still running). A step that waits for the broker
   * (an attach on its way, the cancel, the channel's close) waits at most
   * `shutdownTimeoutMs`, within 1 to 5 s: past that, close() goes on, and the channel
   * is left to the connection's close (the broker requeues what it still holds).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.stopping = true;
    this.unregister?.();
    if (this.reattachTimer) clearTimeout(this.reattachTimer);
    const stepMs = Math.min(Math.max(this.shutdownTimeoutMs, 1_000), 5_000);
    const step = async (what: string, work: Promise<unknown>): Promise<void> => {
      if ((await within(work, stepMs)) === 'timeout') this.logger.warn(`the broker did not answer ${what} within ${stepMs} ms; closing goes on`, { consumer: this.name });
    };
    if (this.attaching) await step('the attach on its way', this.attaching);
    const ch = this.channel;
    if (ch && this.consumerTag) await step('the consumer\'s cancel', ch.cancel(this.consumerTag));
    await Promise.all(this.waiting.splice(0).map((d) => this.apply(d, {}, this.decide(d, {}, 0, { kind: 'never-started' })) ?? Promise.resolve()));
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
    if (ch) await step('the channel\'s close', ch.close());
  }
}

/** What `work` resolves to, or 'timeout' after `ms` (none below 0), whichever is first. `work` must not reject. */
function orTimeout<T>(work: Promise<T>, ms: number): Promise<T | 'timeout'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), Math.max(0, ms));
    void work.then((value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

/** 'done' when `work` settles (either way), or 'timeout' after `ms`, whichever is first. */
function within(work: Promise<unknown>, ms: number): Promise<'done' | 'timeout'> {
  const done = (): 'done' => 'done';
  return orTimeout(work.then(done, done), ms);
}

/** The properties of a delivery for its copy in another queue (no expiration: a copy waits as long as its queue says). */
function copyProperties(msg: amqp.ConsumeMessage, headers: Record<string, unknown>, owned = false): amqp.Options.Publish {
  return copyMessageProperties(msg.properties, headers, owned) as amqp.Options.Publish;
}

/** What `decide` is told of a handler that resolved (one object for every delivery). */
const RESOLVED: Happening = Object.freeze({ kind: 'resolved' });

/** The first line of an error message, cut to 200 characters, for a log line's text (the whole message is a field). */
function firstLine(message: string): string {
  const line = message.split('\n', 1)[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 199)}…` : line;
}
