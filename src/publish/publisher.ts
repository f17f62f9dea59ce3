import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { BrokerUnreachableError, ClosedError, InvalidOptionError, PublishNackedError, PublishNotConfirmedError, PublishNotSentError, UnroutableError, type LateAnswer } from '../errors.js';
import { HEADER } from '../headers.js';
import { toLogger, type Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import { redactUrl } from '../connection/url.js';
import { checkRoutingKey, encodePayload, hasDefaultProperties, isoTime, messageIdOf, NO_OPTIONS, occurredAtOf, stampProperties, type PublishOptions } from './stamp.js';
import { stampTrace, tracePublish, tracing } from '../trace/index.js';
import { closeChannel } from '../connection/channel.js';

export type { PublishOptions };

/** Options of a {@link Publisher}. */
export interface PublisherOptions {
  /**
   * Publishes awaiting their confirm at once; further calls wait for a free slot.
   * @default 1000
   */
  maxInFlight?: number;
  /**
   * How long a publish waits for a connection when the broker is away (never longer
   * than what is left of `confirmTimeoutMs`).
   * @default 10000
   */
  connectTimeoutMs?: number;
  /**
   * How long a whole publish may take, from the call to the broker's confirm: waiting
   * for a slot (`maxInFlight`), for the connection, for a socket that does not drain,
   * for a broker that blocked the connection, and for the confirm. Past it the publish
   * is rejected: with {@link PublishNotSentError} if it was never written (it never
   * will be), or {@link PublishNotConfirmedError} if it was (the broker may have it:
   * publish again, same id). A broker under a memory or disk alarm blocks publishing
   * connections and stops reading them; without this bound a publish, a consumer's
   * move and an outbox row would wait for as long as the alarm lasts.
   * @default 30000
   */
  confirmTimeoutMs?: number;
  /**
   * What `publish()` does while the connection is down (the broker went away, or the
   * application started without it: `startWithoutBroker`). `'wait'`: wait for it, at most
   * `connectTimeoutMs` (and within `confirmTimeoutMs`), then reject with
   * {@link BrokerUnreachableError}. `'fail'`: reject at once with BrokerUnreachableError
   * ("not connected"), nothing written, so that a request can answer now (a 503) or the
   * message can go to the outbox instead. Only `publish()`: `send()`, which the outbox
   * relay, the retry scheduler and the consumers' moves use, always waits.
   * @default 'wait'
   */
  whenDisconnected?: 'wait' | 'fail';
  /** @default a logger that drops everything */
  logger?: Logger;
}

/**
 * What a publish is, for the `settled` event (and the publish metrics): an application's
 * `publish()`; an outbox row sent by the relay (`outbox`), a retry-table row sent back to
 * its consumer (`retry-table`) or parked by an operator (`retry-table-park`); a consumer's
 * copy to a retry tier (`retry`), to its parked queue (`park`), or back to its own work
 * queue (`put-back`: the crash-loop guard's, or a message a consumer that is closing never
 * started); a parked message replayed (`replay`).
 */
export type PublishKind = 'publish' | 'outbox' | 'retry-table' | 'retry-table-park' | 'retry' | 'park' | 'put-back' | 'replay';

/**
 * Told of each publish as it settles, with the `settled` event's arguments: its error
 * (undefined when confirmed), the milliseconds from its write to the broker's answer
 * (undefined for a copy committed in a transaction, which has no confirm of its own),
 * and its kind. The metrics' `observePublish` is one.
 */
export type PublishObserver = (error: Error | undefined, ms: number | undefined, kind: PublishKind) => void;

/** Every {@link PublishKind}. */
export const PUBLISH_KINDS: readonly PublishKind[] = ['publish', 'outbox', 'retry-table', 'retry-table-park', 'retry', 'park', 'put-back', 'replay'];

/** A message ready to go out, as warren moves it between queues. */
export interface OutgoingMessage {
  readonly exchange: string;
  readonly routingKey: string;
  readonly content: Buffer;
  readonly properties: amqp.Options.Publish;
}

/** What a confirmed publish returns. */
export interface PublishReceipt {
  readonly messageId: string;
}

/**
 * One publish, from the call to its outcome: what to write, where it waits, and how it
 * settles. One object per publish, its methods on the prototype: no closures per
 * publish but the promise's resolving functions and, once written, the confirm callback.
 *
 * A publish may wait for a slot behind thousands of others, so it keeps only what it
 * must while it waits: the body (taken at the call: a payload changed after `publish()`
 * does not change what is sent), the id, the time of the call and how to settle it. A
 * plain `publish()` (no headers, occurred-at, correlation id, type or trace context) has
 * its properties built from those when it is written, and dropped once they are.
 */
class Outgoing {
  /** Neighbours in the publisher's list of written, unconfirmed publishes (write order). */
  prev: Outgoing | undefined = undefined;
  next: Outgoing | undefined = undefined;
  /** True while in that list. */
  linked = false;
  settled = false;
  /**
   * When it was written (Date.now()), for the confirm latency in `settled`; undefined
   * until then, so that a waiting publish holds no number of its own for it.
   */
  sentAt: number | undefined = undefined;
  /** Set by a basic.return, which comes before the confirm: `replyCode replyText`. */
  returned: string | undefined = undefined;
  /** Set when the deadline gave it up: takes the broker's answer if it still comes. */
  late: ((answer: LateAnswer) => void) | undefined = undefined;
  /** The promise's, set by {@link capture} as the promise is made. */
  resolve!: (value: PublishReceipt | undefined) => void;
  reject!: (error: Error) => void;

  constructor(
    readonly exchange: string,
    readonly routingKey: string,
    readonly content: Buffer,
    readonly messageId: string | undefined,
    /** The AMQP properties, or undefined for a plain publish: built when written, from `messageId` and `at`. */
    readonly properties: amqp.Options.Publish | undefined,
    /** When `publish()` or `send()` was called (Date.now()): its deadline is `confirmTimeoutMs` later. */
    readonly at: number,
    /** Resolve with a {@link PublishReceipt} (made at the confirm, not kept while waiting) rather than nothing. */
    readonly receipt: boolean,
    /** What the publish is, for `settled`. */
    readonly kind: PublishKind,
  ) {}
}

/** The publish whose promise {@link capture} is about to take the resolving functions of. */
let capturing: Outgoing | undefined;

/**
 * The executor of every publish's promise: one function for all, where a closure per
 * publish would hold the publish (the executor runs within `new Promise`, synchronously).
 */
function capture(resolve: (value: PublishReceipt | undefined) => void, reject: (error: Error) => void): void {
  const entry = capturing as Outgoing;
  entry.resolve = resolve;
  entry.reject = reject;
}

/** The properties a plain publish is written with (see {@link Outgoing}): built anew at each write. */
function plainProperties(entry: Outgoing): amqp.Options.Publish {
  const properties: amqp.Options.Publish = stampProperties(entry.messageId as string, entry.at, NO_OPTIONS);
  properties.mandatory = true;
  return properties;
}

/**
 * A plain publish as amqplib's own encoder reads it: the `basic.publish` fields and the
 * properties in one object, in amqplib's names (`deliveryMode`, not `persistent`).
 */
export interface WireFields {
  readonly exchange: string;
  readonly routingKey: string;
  readonly mandatory: true;
  readonly immediate: false;
  readonly ticket: 0;
  readonly contentType: 'application/json';
  readonly deliveryMode: 2;
  readonly messageId: string;
  readonly timestamp: number;
  readonly headers: Record<string, unknown>;
}

/** What a plain publish (see {@link Outgoing}) is written with, on a channel with amqplib's internals: its fields and properties. */
export function plainWire(exchange: string, routingKey: string, messageId: string, at: number): WireFields {
  return {
    exchange,
    routingKey,
    mandatory: true,
    immediate: false,
    ticket: 0,
    contentType: 'application/json',
    deliveryMode: 2,
    messageId,
    timestamp: Math.floor(at / 1000),
    headers: { 'warren-occurred-at': isoTime(at) } satisfies Record<typeof HEADER.occurredAt, string>,
  };
}

/** The parts of amqplib's channel under `publish()`: write a message's frames, then queue its confirm callback. */
interface ChannelInternals {
  sendMessage(fields: WireFields, properties: WireFields, content: Buffer): boolean;
  pushConfirmCallback(cb: (err: unknown) => void): void;
}

/**
 * True when `ch` has amqplib's internals that {@link Publisher} writes a plain publish
 * with (`sendMessage`, `pushConfirmCallback`). `ConfirmChannel.publish` is those two calls
 * after `Args.publish`, which copies the options into a fresh object whose headers
 * inherit from the caller's: encoding headers reached through a prototype takes V8's
 * slow path, and that was the largest single cost of a plain publish. Another amqplib
 * without them gets `publish()` as before.
 */
function hasInternals(ch: amqp.ConfirmChannel): boolean {
  const inner = ch as unknown as Partial<ChannelInternals>;
  return typeof inner.sendMessage === 'function' && typeof inner.pushConfirmCallback === 'function';
}

const DEFAULTS = { maxInFlight: 1000, connectTimeoutMs: 10_000, confirmTimeoutMs: 30_000 } as const;

/**
 * Publishes with publisher confirms and `mandatory`: `publish()` resolves only once the
 * broker has confirmed the message, and rejects with {@link UnroutableError} when no
 * queue is bound for the key, {@link PublishNackedError} on a nack,
 * {@link PublishNotConfirmedError} when the connection drops first or the confirm is
 * overdue, and {@link PublishNotSentError} when it could not be written in time (a
 * broker that blocked the connection, a socket that does not drain). It never reports
 * a message as confirmed that was not, and never writes a message after its publish
 * was given up.
 *
 * Events: `settled` (error or undefined; milliseconds: from the write to the broker's
 * answer or to giving up, or, for a publish never written, from the call; and the
 * publish's {@link PublishKind}) once per publish. Nothing is computed for it while no
 * one listens.
 *
 * Across a channel's loss nothing is written twice or on a dead channel: publishes the
 * closed channel never carried wait for the next one within their deadline, and
 * `close()` settles every publish still unanswered.
 *
 * @example
 * const { messageId } = await warren.publisher.publish('order.created', { orderId: 42 });
 */
export class Publisher extends EventEmitter {
  private readonly maxInFlight: number;
  private readonly connectTimeoutMs: number;
  private readonly confirmTimeoutMs: number;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly logger: Logger;
  private channel: amqp.ConfirmChannel | undefined;
  /** The channel when it has the internals a plain publish is written with (see {@link hasInternals}). */
  private direct: amqp.ConfirmChannel | undefined;
  private opening: Promise<amqp.ConfirmChannel> | undefined;
  /**
   * Publishes written and awaiting their confirm, oldest first: a list linked through
   * the publishes themselves, so adding and removing one costs no allocation or hashing.
   */
  private head: Outgoing | undefined;
  private tail: Outgoing | undefined;
  private inFlight = 0;
  /** Publishes waiting for a slot, oldest first, from `slotHead` on (a queue without O(n) shifts). */
  private slotWaiters: Array<Outgoing | undefined> = [];
  private slotHead = 0;
  /** Publishes holding a slot and waiting to be written, oldest first. */
  private writeWaiters: Outgoing[] = [];
  /** The channel whose write buffer is full, until it drains (or closes). */
  private fullChannel: amqp.ConfirmChannel | undefined;
  private closed = false;
  /** Why the broker closed a channel (e.g. a publish to an exchange that does not exist). */
  private readonly closeReasons = new WeakMap<amqp.ConfirmChannel, string>();
  private unregister: (() => void) | undefined;
  private readonly onUnblocked = (): void => this.pump();
  /** Waiting for the connection on behalf of the write line (see ensureChannel). */
  private acquiring = false;
  /** `whenDisconnected: 'fail'`. */
  private readonly failDisconnected: boolean;

  constructor(
    private readonly connection: BrokerConnection,
    private readonly exchange: string,
    options: PublisherOptions = {},
  ) {
    super();
    const max = options.maxInFlight ?? DEFAULTS.maxInFlight;
    if (!Number.isInteger(max) || max < 1 || max > 100_000) throw new InvalidOptionError('maxInFlight', `${max} is not a whole number from 1 to 100000`);
    this.maxInFlight = max;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs;
    const confirm = options.confirmTimeoutMs ?? DEFAULTS.confirmTimeoutMs;
    if (!Number.isInteger(confirm) || confirm < 10 || confirm > 3_600_000) throw new InvalidOptionError('confirmTimeoutMs', `${confirm} is not a whole number of milliseconds from 10 to 3600000`);
    this.confirmTimeoutMs = confirm;
    const whenDisconnected = options.whenDisconnected ?? 'wait';
    if (whenDisconnected !== 'wait' && whenDisconnected !== 'fail') throw new InvalidOptionError('whenDisconnected', `${JSON.stringify(whenDisconnected)} is not 'wait' or 'fail'`);
    this.failDisconnected = whenDisconnected === 'fail';
    this.logger = toLogger(options.logger);
  }

  /** Opens the confirm channel now and after every reconnect. */
  async start(): Promise<void> {
    // One sweep for every publish rather than a timer each: the publish path stays cheap.
    this.sweeper = setInterval(() => this.expire(), Math.min(1000, Math.ceil(this.confirmTimeoutMs / 4)));
    this.sweeper.unref();
    this.connection.on('unblocked', this.onUnblocked);
    this.unregister = await this.connection.onReady(async (model) => {
      this.channel = undefined;
      await this.openChannel(model);
      this.pump();
    });
  }

  /**
   * Rejects every publish past its deadline, wherever it waits: for a slot, to be
   * written, or for its confirm. A late confirm then changes nothing, and a publish
   * given up before it was written is never written.
   */
  private expire(): void {
    // Due: called `confirmTimeoutMs` or longer ago.
    const due = Date.now() - this.confirmTimeoutMs;
    const blocked = this.connection.blocked;
    // Deadlines in the slot line rise from head to tail: stop at the first one not due.
    for (let i = this.slotHead; i < this.slotWaiters.length; i++) {
      const w = this.slotWaiters[i];
      if (w && w.at > due) break;
      if (w) {
        this.slotWaiters[i] = undefined;
        // Never held a slot: failing it frees none.
        this.failWaiting(w, this.notSent(w.messageId, `no free slot within ${this.confirmTimeoutMs} ms (${this.maxInFlight} publishes were awaiting confirms)`, blocked));
      }
    }
    this.skipEmptySlots();
    if (this.writeWaiters.some((w) => w.at <= due)) {
      const keep: Outgoing[] = [];
      const late: Outgoing[] = [];
      for (const w of this.writeWaiters) (w.at > due ? keep : late).push(w);
      // The line is replaced before anyone is failed: a failure frees a slot, and the
      // publish that takes it may join the line at once.
      this.writeWaiters = keep;
      const reason = this.channel === undefined ? `no channel to write it on within ${this.confirmTimeoutMs} ms (the connection is away, or its channel did not open)` : `the connection's socket did not drain within ${this.confirmTimeoutMs} ms (the broker is not reading it)`;
      for (const w of late) this.settle(w, this.notSent(w.messageId, reason, blocked));
    }
    // A publish given up here stays in the list until the broker answers it, so that a
    // late return is charged to it and not to a caller's retry with the same id.
    for (let entry = this.head; entry !== undefined; entry = entry.next) {
      if (!entry.settled && entry.at <= due) {
        const why = blocked === undefined ? 'it may be blocked by a memory or disk alarm' : `the broker blocked publishing on this connection: ${blocked}`;
        const given = entry;
        const late = new Promise<LateAnswer>((r) => (given.late = r));
        this.settle(entry, new PublishNotConfirmedError(entry.messageId, `no confirm from the broker within ${this.confirmTimeoutMs} ms (${why})`, { late }));
      }
    }
  }

  /** The error of a publish given up before it was written; while blocked, the broker's reason. */
  private notSent(messageId: string | undefined, reason: string, blocked: string | undefined): PublishNotSentError {
    if (blocked === undefined) return new PublishNotSentError(messageId, reason);
    return new PublishNotSentError(messageId, `the broker blocked publishing on this connection (${blocked}) and did not unblock within ${this.confirmTimeoutMs} ms`, blocked);
  }

  /** Messages sent and not yet confirmed. */
  get pending(): number {
    return this.inFlight;
  }

  private openChannel(model: amqp.ChannelModel): Promise<amqp.ConfirmChannel> {
    if (this.opening) return this.opening;
    this.opening = (async () => {
      const ch = await model.createConfirmChannel();
      // Closed while it opened: nothing would close a channel kept now, nor write on it.
      if (this.closed) {
        await closeChannel(ch);
        throw new ClosedError('The publisher');
      }
      ch.on('error', (err: Error) => {
        this.closeReasons.set(ch, err.message);
        this.logger.warn('publish channel error', { error: err.message });
      });
      ch.on('return', (msg: amqp.Message) => this.onReturn(msg));
      ch.on('drain', () => {
        if (this.fullChannel === ch) this.fullChannel = undefined;
        this.pump();
      });
      ch.on('close', () => {
        if (this.channel === ch) this.channel = undefined;
        if (this.fullChannel === ch) this.fullChannel = undefined;
        // Those in line go on the next channel (a new one on this connection when only
        // the channel closed, as a publish to a missing exchange closes it).
        if (this.writeWaiters.length > 0 && !this.closed) queueMicrotask(() => this.pump());
      });
      this.channel = ch;
      if (hasInternals(ch)) this.direct = ch;
      return ch;
    })();
    return this.opening.finally(() => {
      this.opening = undefined;
    });
  }

  /**
   * Returns carry no delivery tag, so a return is charged to a written publish alike in
   * message id, exchange and routing key that has no return yet, given up or not (one
   * given up stays listed until answered, so its late return is not charged to a retry
   * with the same id). When several are alike, the one whose body and headers are the
   * returned message's: on a headers exchange the same key routes by headers. Publishes
   * alike in all of that route alike and are interchangeable. A return comes just before
   * its publish's confirm, so the walk from the oldest is short.
   */
  private onReturn(msg: amqp.Message): void {
    const messageId = msg.properties.messageId as string | undefined;
    const { exchange, routingKey } = msg.fields;
    let first: Outgoing | undefined;
    let others: Outgoing[] | undefined;
    for (let entry = this.head; entry !== undefined; entry = entry.next) {
      if (entry.returned === undefined && entry.messageId === messageId && entry.exchange === exchange && entry.routingKey === routingKey) {
        if (first === undefined) first = entry;
        else (others ??= []).push(entry);
      }
    }
    if (first === undefined) return;
    let charged = first;
    if (others !== undefined && !sameMessage(first, msg)) charged = others.find((entry) => sameMessage(entry, msg)) ?? first;
    charged.returned = `${(msg.fields as { replyCode?: number }).replyCode ?? 312} ${(msg.fields as { replyText?: string }).replyText ?? 'NO_ROUTE'}`;
  }

  /**
   * Gets a channel for the publishes waiting in the write line: waits for the connection
   * (at most `connectTimeoutMs`; past it, those waiting then are failed with why), opens
   * the channel, and writes the line. Those waiting stay where the sweep sees them, so
   * a channel that never opens (a stalled socket) fails them at their deadline.
   */
  private ensureChannel(): void {
    if (this.channel !== undefined || this.opening !== undefined || this.acquiring || this.closed) return;
    this.acquiring = true;
    this.connection
      .waitReady(this.connectTimeoutMs)
      .then((model) => (this.closed ? undefined : (this.channel ?? this.openChannel(model))))
      .then(
        () => {
          this.acquiring = false;
          this.pump();
        },
        (error: unknown) => {
          this.acquiring = false;
          if (this.channel !== undefined) return this.pump();
          // The connection did not come back in time, or was closed for good: fail those
          // waiting, as a publish that waited `connectTimeoutMs` for it always was.
          // Anything else (the channel would not open on a connection that just dropped)
          // leaves them in line for the reconnect, bounded by their deadlines.
          if (!(error instanceof BrokerUnreachableError || error instanceof ClosedError)) return;
          const waiting = this.writeWaiters;
          this.writeWaiters = [];
          for (const w of waiting) this.settle(w, error);
        },
      );
  }

  /** Moves `slotHead` past waiters that gave up, compacting now and then. */
  private skipEmptySlots(): void {
    while (this.slotHead < this.slotWaiters.length && this.slotWaiters[this.slotHead] === undefined) this.slotHead += 1;
    if (this.slotHead >= 1024 && this.slotHead * 2 >= this.slotWaiters.length) {
      this.slotWaiters = this.slotWaiters.slice(this.slotHead);
      this.slotHead = 0;
    }
  }

  /**
   * Passes the slot straight to the oldest waiter, so a publish that arrives meanwhile
   * cannot take it and send the waiter to the back. With thousands of publishes waiting,
   * `Array.shift()` here was quadratic and took most of the publisher's time.
   */
  private releaseSlot(): void {
    this.skipEmptySlots();
    if (this.slotHead < this.slotWaiters.length) {
      const next = this.slotWaiters[this.slotHead];
      this.slotWaiters[this.slotHead] = undefined;
      this.slotHead += 1;
      this.skipEmptySlots();
      if (next !== undefined) this.withSlot(next);
      return;
    }
    this.inFlight -= 1;
  }

  /**
   * Publishes a JSON payload to the topology's default exchange (or `options.exchange`:
   * `publish('', payload, { exchange: 'shop.broadcast' })`), stamped with a message id,
   * the occurred-at time, JSON content type and persistent delivery; in a PRODUCER span
   * (ended at the confirm) when an OpenTelemetry SDK is registered.
   */
  publish(routingKey: string, payload: unknown, options: PublishOptions = NO_OPTIONS): Promise<PublishReceipt> {
    const exchange = options.exchange ?? this.exchange;
    // Without an SDK, no span and no closure to hand the context through.
    if (!tracing()) return this.stampAndEnqueue(exchange, routingKey, payload, options, undefined);
    return tracePublish(exchange, routingKey, (traceContext) => this.stampAndEnqueue(exchange, routingKey, payload, options, traceContext));
  }

  /**
   * {@link publish}'s stamp, checked in the call: the body, the id and the time are
   * taken now. The properties are built now only when the options or a trace context
   * add to them (`tracePublish` hands a context only when an SDK is registered), and
   * otherwise when the publish is written: a publish waiting for a slot holds no
   * properties, headers or time text.
   */
  private stampAndEnqueue(exchange: string, routingKey: string, payload: unknown, options: PublishOptions, traceContext: unknown): Promise<PublishReceipt> {
    const at = Date.now();
    let content: Buffer;
    let messageId: string;
    let properties: amqp.Options.Publish | undefined;
    try {
      checkRoutingKey(routingKey, options);
      content = Buffer.from(encodePayload(payload));
      messageId = messageIdOf(options, at);
      if (traceContext !== undefined || !hasDefaultProperties(options)) {
        const stamped = stampProperties(messageId, occurredAtOf(options, at), options);
        stampTrace(stamped.headers, traceContext);
        // Fresh properties of our own: `mandatory` goes on them, no copy at the write.
        stamped.mandatory = true;
        properties = stamped;
      }
    } catch (error) {
      return Promise.reject(error as Error);
    }
    if (this.failDisconnected && !this.connection.connected && !this.closed) return this.notConnected(messageId);
    // The receipt is what the publish resolves with: no second promise to map to it.
    return this.enqueue(exchange, routingKey, content, messageId, properties, at, true, 'publish') as Promise<PublishReceipt>;
  }

  /**
   * Publishes a prepared message with confirm and `mandatory`; resolves when confirmed,
   * and settles within `confirmTimeoutMs` of the call. warren moves messages between
   * queues with this.
   *
   * One promise per publish, settled from the confirm callback: where nothing has to
   * wait (a free slot, a channel, a writable socket) the message is written in this
   * call, with no await in between. The deadline is kept by the publisher's one sweep.
   * `kind` says what the message is, for `settled` (the relay and the consumers pass theirs).
   */
  send(message: OutgoingMessage, kind: PublishKind = 'publish'): Promise<void> {
    const properties = message.properties;
    return this.enqueue(message.exchange, message.routingKey, message.content, properties.messageId, properties, Date.now(), false, kind) as Promise<unknown> as Promise<void>;
  }

  /** A publish refused at once (`whenDisconnected: 'fail'`): never written, settled now. */
  private notConnected(messageId: string): Promise<PublishReceipt> {
    const down = this.connection.lastError === undefined ? '' : ` (last attempt: ${this.connection.lastError})`;
    const error = new BrokerUnreachableError(redactUrl(this.connection.url), `not connected${down}, and the publisher fails at once while disconnected (whenDisconnected: 'fail'); message ${messageId} was not sent`);
    if (this.listenerCount('settled') > 0) {
      try {
        this.emit('settled', error, 0, 'publish');
      } catch {
        // A listener's failure is not the publish's.
      }
    }
    return Promise.reject(error);
  }

  /** {@link send}, resolving with a receipt (`receipt`) or nothing at the confirm. */
  private enqueue(exchange: string, routingKey: string, content: Buffer, messageId: string | undefined, properties: amqp.Options.Publish | undefined, at: number, receipt: boolean, kind: PublishKind): Promise<PublishReceipt | undefined> {
    if (this.closed) return Promise.reject(new ClosedError('The publisher'));
    const entry = new Outgoing(exchange, routingKey, content, messageId, properties, at, receipt, kind);
    capturing = entry;
    const promise = new Promise<PublishReceipt | undefined>(capture);
    capturing = undefined;
    if (this.inFlight < this.maxInFlight && this.slotHead === this.slotWaiters.length) {
      this.inFlight += 1;
      this.withSlot(entry);
    } else {
      // In line for a slot; `releaseSlot` passes one on, `expire` or `close` fails it.
      this.slotWaiters.push(entry);
    }
    return promise;
  }

  /** A publish holding a slot: written now if it may be, else in line for the channel or the socket. */
  private withSlot(entry: Outgoing): void {
    if (this.closed) return this.settle(entry, new ClosedError('The publisher'));
    const ch = this.channel;
    if (ch !== undefined) return this.sendOn(ch, entry);
    // No channel (a reconnect, or the broker closed it): wait in the write line.
    this.writeWaiters.push(entry);
    this.ensureChannel();
  }

  /** True when a write may go out now: the broker has not blocked the connection, the socket drained, nobody is ahead. */
  private writable(): boolean {
    return this.connection.blocked === undefined && this.fullChannel === undefined && this.writeWaiters.length === 0;
  }

  private sendOn(ch: amqp.ConfirmChannel, entry: Outgoing): void {
    if (this.writable()) return this.publishOn(ch, entry);
    // Wait in line, unwritten: a publish given up here is never written later, so a
    // caller's retry after a timeout does not pile copies into the socket buffers.
    this.writeWaiters.push(entry);
  }

  /** Writes waiting publishes, in order, for as long as the connection takes them. */
  private pump(): void {
    while (this.writeWaiters.length > 0 && this.connection.blocked === undefined && this.fullChannel === undefined) {
      // Read each time: a write that finds the channel closed drops it.
      const ch = this.channel;
      if (ch === undefined) return this.ensureChannel();
      this.publishOn(ch, this.writeWaiters.shift() as Outgoing);
    }
  }

  /**
   * Settles a publish that holds a slot, once: a confirm that comes after the deadline
   * gave the publish up changes nothing. The slot goes to the next in line first.
   */
  private settle(entry: Outgoing, error?: Error): void {
    if (entry.settled) return;
    entry.settled = true;
    this.releaseSlot();
    if (error) entry.reject(error);
    else entry.resolve(entry.receipt ? { messageId: entry.messageId as string } : undefined);
    this.emitSettled(entry, error);
  }

  /** Fails a publish still waiting for a slot (it holds none to free). */
  private failWaiting(entry: Outgoing, error: Error): void {
    if (entry.settled) return;
    entry.settled = true;
    entry.reject(error);
    this.emitSettled(entry, error);
  }

  /**
   * `settled`, once per publish: with the time from its write to the broker's answer,
   * or, for one never written, from the call to its failure.
   */
  private emitSettled(entry: Outgoing, error: Error | undefined): void {
    if (this.listenerCount('settled') === 0) return;
    const since = entry.sentAt ?? entry.at;
    try {
      this.emit('settled', error, Date.now() - since, entry.kind);
    } catch {
      // A listener's failure is not the publish's: it is settled already.
    }
  }

  private link(entry: Outgoing): void {
    entry.linked = true;
    entry.prev = this.tail;
    entry.next = undefined;
    if (this.tail === undefined) this.head = entry;
    else this.tail.next = entry;
    this.tail = entry;
  }

  private unlink(entry: Outgoing): void {
    entry.linked = false;
    if (entry.prev === undefined) this.head = entry.next;
    else entry.prev.next = entry.next;
    if (entry.next === undefined) this.tail = entry.prev;
    else entry.next.prev = entry.prev;
    entry.prev = entry.next = undefined;
  }

  /** Writes the message now; it settles at the broker's answer or when given up. */
  private publishOn(ch: amqp.ConfirmChannel, entry: Outgoing): void {
    entry.sentAt = Date.now();
    this.link(entry);
    const given = entry.properties;
    let writable: boolean;
    try {
      const answer = (err: unknown): void => this.answer(ch, entry, err);
      if (given === undefined && this.direct === ch) {
        // What ConfirmChannel.publish does, without Args.publish's copy (see hasInternals).
        const wire = plainWire(entry.exchange, entry.routingKey, entry.messageId as string, entry.at);
        const inner = ch as unknown as ChannelInternals;
        writable = inner.sendMessage(wire, wire, entry.content);
        inner.pushConfirmCallback(answer);
      } else {
        const properties = given === undefined ? plainProperties(entry) : given.mandatory === true ? given : { ...given, mandatory: true };
        writable = ch.publish(entry.exchange, entry.routingKey, entry.content, properties, answer);
      }
    } catch (error) {
      // Not written. On a closed channel (amqplib fails the unconfirmed before it
      // reports the close) the publish waits for the next channel, still within its
      // deadline; anything else (a property amqplib cannot encode) will never be written.
      this.unlink(entry);
      entry.sentAt = undefined;
      if (this.channel === ch && isClosedError(error)) this.channel = undefined;
      if (this.channel !== ch) {
        if (this.closed) return this.settle(entry, new ClosedError('The publisher'));
        // First in line again, for the next channel.
        this.writeWaiters.unshift(entry);
        if (this.channel === undefined) this.ensureChannel();
        else queueMicrotask(() => this.pump());
        return;
      }
      // The cause is kept: a mover tells an encoding error (a RangeError or TypeError) by it.
      this.settle(entry, new PublishNotSentError(entry.messageId, `the channel refused the publish (${error instanceof Error ? error.message : String(error)})`, undefined, { cause: error }));
      return;
    }
    // The channel's write buffer is full: hold further writes until it drains.
    if (!writable) this.fullChannel = ch;
  }

  /** The broker's answer to a written publish (or the channel's, when it closed first). */
  private answer(ch: amqp.ConfirmChannel, entry: Outgoing, err: unknown): void {
    const messageId = entry.messageId;
    // Answered (or the channel closed): out of the list, given up or not.
    if (entry.linked) this.unlink(entry);
    if (err) {
      const closed = isClosedError(err);
      // The channel is gone: publishes that take the freed slots must not be written on it.
      if (closed && this.channel === ch) this.channel = undefined;
      entry.late?.(closed ? 'lost' : 'nacked');
      const why = this.closeReasons.get(ch);
      this.settle(entry, closed ? new PublishNotConfirmedError(messageId, `the channel closed before the broker confirmed${why ? ` (${why})` : ''}`, { cause: err }) : new PublishNackedError(messageId, { cause: err }));
    } else if (entry.returned !== undefined) {
      entry.late?.('returned');
      this.settle(entry, new UnroutableError(entry.exchange, entry.routingKey, messageId, entry.returned));
    } else {
      entry.late?.('confirmed');
      this.settle(entry);
    }
  }

  /** Rejects publishes not yet written with ClosedError, waits for outstanding confirms, then closes the channel. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.unregister?.();
    this.connection.off('unblocked', this.onUnblocked);
    // The sweep runs on while close() waits: a publish still holds its deadline.
    // Those waiting for a slot first: a slot freed later would send them on after close().
    const slotWaiters = this.slotWaiters.slice(this.slotHead);
    this.slotWaiters = [];
    this.slotHead = 0;
    for (const w of slotWaiters) if (w !== undefined) this.failWaiting(w, new ClosedError('The publisher'));
    for (const w of this.writeWaiters.splice(0)) this.settle(w, new ClosedError('The publisher'));
    const ch = this.channel;
    this.channel = undefined;
    if (ch) {
      // Bounded: a broker that stopped reading (a resource alarm) must not hang shutdown.
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise((r) => (timer = setTimeout(r, this.connectTimeoutMs)));
      await Promise.race([ch.waitForConfirms().catch(() => undefined), deadline]);
      // The close handshake needs the broker to read too.
      await Promise.race([ch.close().catch(() => undefined), deadline]);
      clearTimeout(timer);
    }
    clearInterval(this.sweeper);
    // Whatever is still unanswered settles now: close() leaves no publish pending.
    for (let entry = this.head; entry !== undefined; entry = entry.next) {
      if (!entry.settled) this.settle(entry, new PublishNotConfirmedError(entry.messageId, 'the publisher closed before the broker confirmed (the broker may have it: publish again, same id)'));
    }
  }
}

/** amqplib's error for a channel (or connection) that closed: `Channel closed`, `Connection closed: …`. */
function isClosedError(error: unknown): boolean {
  return /closed/i.test(error instanceof Error ? error.message : String(error));
}

/** True when a returned message has the body and headers this publish was written with. */
function sameMessage(entry: Outgoing, msg: amqp.Message): boolean {
  if (!entry.content.equals(msg.content)) return false;
  const headers = (entry.properties ?? plainProperties(entry)).headers as Record<string, unknown> | undefined;
  return headerText(headers) === headerText(msg.properties.headers as Record<string, unknown> | undefined);
}

/** Headers as comparable text: keys sorted, bytes as text, what the wire drops (undefined) left out. */
function headerText(headers: Record<string, unknown> | undefined): string {
  if (headers === undefined || headers === null) return '{}';
  const keys = Object.keys(headers).filter((k) => headers[k] !== undefined).sort();
  try {
    return JSON.stringify(keys.map((k) => [k, Buffer.isBuffer(headers[k]) ? (headers[k] as Buffer).toString('utf8') : headers[k]]));
  } catch {
    return '';
  }
}
