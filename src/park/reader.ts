import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import type { QueueType } from '../topology/declaration.js';
import { QueueNotFoundError, WalkInterruptedError } from './errors.js';
import { copyProperties, refreshHeaders, toParkedMessage, type ParkedMessage } from './message.js';

/** Where a moved message goes: a publish with confirm and `mandatory`. */
export interface MoveTarget {
  readonly exchange: string;
  readonly routingKey: string;
  readonly content: Buffer;
  readonly properties: amqp.Options.Publish;
}

/**
 * What to do with one message of a walk.
 * - `keep`: it stays in the queue, in its place.
 * - `remove`: acknowledge it (it is deleted).
 * - `move`: publish `to` with confirm, then acknowledge the original; if the publish
 *   fails, the original stays in the queue.
 *
 * With `stop: true` no further message is examined.
 */
export type Verdict =
  | { readonly action: 'keep'; readonly stop?: boolean }
  | { readonly action: 'remove'; readonly stop?: boolean }
  | { readonly action: 'move'; readonly to: MoveTarget; readonly stop?: boolean };

/** Options of {@link walkParked}. */
export interface WalkOptions {
  /**
   * The queue's type, which decides how kept messages stay in order; see {@link walkParked}.
   * @default 'classic'
   */
  queueType?: QueueType;
  /**
   * Classic queues: the most messages held unacknowledged (those that stay in the queue)
   * before the walk stops, saying how many it did not examine. A quorum queue holds
   * none (each kept message is copied to its back at once), so this does not apply.
   * @default 10000
   */
  maxHeld?: number;
  /**
   * Publishes (moves and copies) awaiting their confirm at once.
   * @default 500
   */
  maxInFlight?: number;
  /** Stops the walk before the next message; what was examined is settled as usual. */
  signal?: AbortSignal;
  /** Called once, before the first message is read, with the number of messages the walk will examine at most. */
  onStart?: (total: number) => void;
}

/** Why a walk ended. */
export type StopReason =
  /** Every message that was in the queue when the walk began was examined. */
  | 'end'
  /** A verdict said `stop`. */
  | 'stopped'
  /** `maxHeld` messages were held; the rest were not examined. */
  | 'max-held'
  /** The signal was aborted. */
  | 'aborted'
  /** A move came back unroutable (its target queue is gone); the walk stopped there. */
  | 'unroutable';

/** A move whose publish failed; its original stayed in the queue. */
export interface MoveFailure {
  readonly position: number;
  readonly messageId: string | undefined;
  readonly error: string;
}

/** What a walk did. */
export interface WalkResult {
  readonly queue: string;
  /** Messages ready in the queue when the walk began; messages arriving later are not examined. */
  readonly total: number;
  readonly scanned: number;
  /** Examined and left in the queue. */
  readonly kept: number;
  readonly removed: number;
  /** Published, confirmed, then acknowledged. */
  readonly moved: number;
  readonly failed: readonly MoveFailure[];
  /** Messages of `total` the walk did not reach; they were not touched. */
  readonly notExamined: number;
  readonly stopReason: StopReason;
  /** Quorum queues: kept or unexamined messages copied to the back of the queue, in order. */
  readonly rewritten: number;
}

const DEFAULTS = { maxHeld: 10_000, maxInFlight: 500 } as const;

function wholeNumber(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${v} is not a whole number from ${min} to ${max}`);
  return v;
}

interface Settings {
  readonly quorum: boolean;
  readonly maxHeld: number;
  readonly maxInFlight: number;
  readonly signal: AbortSignal | undefined;
  readonly onStart: ((total: number) => void) | undefined;
}

function settings(options: WalkOptions): Settings {
  if (options.queueType !== undefined && options.queueType !== 'classic' && options.queueType !== 'quorum') {
    throw new InvalidOptionError('queueType', `${JSON.stringify(options.queueType)} is not a queue type`, "Use 'classic' or 'quorum'.");
  }
  return {
    quorum: options.queueType === 'quorum',
    maxHeld: wholeNumber(options.maxHeld, DEFAULTS.maxHeld, 'maxHeld', 1, 10_000_000),
    maxInFlight: wholeNumber(options.maxInFlight, DEFAULTS.maxInFlight, 'maxInFlight', 1, 100_000),
    signal: options.signal,
    onStart: options.onStart,
  };
}

function hasCode(error: unknown, code: number): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

function messageText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Works through a parked queue from its head, one message at a time, without losing
 * or reordering what stays. It reads with `basic.get` (no auto-ack) on its own
 * confirm channel and asks `visit` what to do with each message:
 *
 * - `keep`: on a classic queue the message is held unacknowledged, and when the walk
 *   ends the channel is closed and the broker puts it back in its old place. A quorum
 *   queue does not: RabbitMQ 3.x requeues to the back, 4.x to the head in the order
 *   of the requeues, a closed channel's messages in no set order, and 4.x counts each
 *   return as a delivery and drops the message after 20 (a parked queue has no
 *   dead-letter target). So on a quorum queue a kept message is copied to the back
 *   with confirm and the original acknowledged; if the walk stops early, the messages
 *   it did not reach are copied to the back after them, which restores the order.
 * - `move`: published with confirm and `mandatory`, then acknowledged; if the publish
 *   fails it stays, as if kept.
 * - `remove`: acknowledged.
 *
 * Only the messages in the queue when the walk begins are examined, so a message that
 * is parked again while the walk runs (a replay that fails at once) is not taken twice.
 * If the process dies half-way the broker returns everything unacknowledged: nothing
 * is lost, a moved or copied message may exist twice (and a quorum queue's order may
 * be rotated). Do not run two walks on one queue at once.
 *
 * @example
 * const result = await walkParked(model, 'billing.parked', (m) =>
 *   m.errorClass === 'HttpError' ? { action: 'remove' } : { action: 'keep' });
 */
export async function walkParked(
  model: amqp.ChannelModel,
  queue: string,
  visit: (message: ParkedMessage) => Verdict | Promise<Verdict>,
  options: WalkOptions = {},
): Promise<WalkResult> {
  const s = settings(options);
  const ch = await model.createConfirmChannel();
  const walk = new Walk(ch, queue, s);
  try {
    return await walk.run(visit);
  } finally {
    walk.closing = true;
    // Closing the channel puts every held message back (a classic queue: in its old place).
    await ch.close().catch(() => undefined);
  }
}

class Walk {
  closing = false;
  private closedReason: string | undefined;
  private returned: string | undefined;
  private total = 0;
  private scanned = 0;
  private kept = 0;
  private removed = 0;
  private moved = 0;
  private copied = 0;
  private copiesSent = 0;
  private readonly failed: MoveFailure[] = [];
  private readonly publisher: ConfirmedPublisher;

  constructor(
    private readonly ch: amqp.ConfirmChannel,
    private readonly queue: string,
    private readonly s: Settings,
  ) {
    this.publisher = new ConfirmedPublisher(ch, s.maxInFlight, () => this.closedReason);
    ch.on('error', (err: Error) => {
      this.closedReason ??= err.message;
    });
    ch.on('close', () => {
      if (!this.closing) this.closedReason ??= 'the channel closed';
      this.publisher.wake();
    });
    ch.on('return', (msg: amqp.Message) => {
      const f = msg.fields as { replyCode?: number; replyText?: string; routingKey: string; exchange: string };
      this.returned ??= `the broker returned it (${f.replyCode ?? 312} ${f.replyText ?? 'NO_ROUTE'}): no queue '${f.routingKey}' to route to via exchange '${f.exchange || '(default)'}'`;
    });
  }

  private get broken(): boolean {
    return this.closedReason !== undefined;
  }

  async run(visit: (message: ParkedMessage) => Verdict | Promise<Verdict>): Promise<WalkResult> {
    try {
      this.total = (await this.ch.checkQueue(this.queue)).messageCount;
    } catch (error) {
      if (hasCode(error, 404)) throw new QueueNotFoundError(this.queue, { cause: error });
      throw error;
    }
    this.s.onStart?.(this.total);
    let stopReason: StopReason = 'end';
    let exhausted = false;
    try {
      while (this.scanned < this.total) {
        if (this.s.signal?.aborted) {
          stopReason = 'aborted';
          break;
        }
        if (this.returned !== undefined) {
          stopReason = 'unroutable';
          break;
        }
        if (!this.s.quorum && this.kept + this.failed.length >= this.s.maxHeld) {
          stopReason = 'max-held';
          break;
        }
        const m = await this.ch.get(this.queue, { noAck: false });
        if (m === false) {
          exhausted = true;
          break;
        }
        this.scanned += 1;
        const position = this.scanned;
        let verdict: Verdict;
        try {
          verdict = await visit(toParkedMessage(m, position));
        } catch (error) {
          await this.keep(m, position);
          throw error;
        }
        if (verdict.action === 'keep') await this.keep(m, position);
        else if (verdict.action === 'remove') {
          this.ch.ack(m);
          this.removed += 1;
        } else await this.move(m, position, verdict.to);
        if (verdict.stop) {
          stopReason = this.s.signal?.aborted ? 'aborted' : 'stopped';
          break;
        }
      }
      const notExamined = exhausted ? 0 : Math.max(0, this.total - this.scanned);
      // Kept messages went to the back of a quorum queue: the unexamined ones follow them there.
      if (this.s.quorum && notExamined > 0 && this.copiesSent > 0) await this.rotate(notExamined);
      await this.publisher.drain();
      if (this.broken) throw this.interrupted();
      return {
        queue: this.queue,
        total: this.total,
        scanned: this.scanned,
        kept: this.kept,
        removed: this.removed,
        moved: this.moved,
        failed: this.failed,
        notExamined,
        stopReason,
        rewritten: this.copied,
      };
    } catch (error) {
      if (error instanceof WalkInterruptedError) throw error;
      if (this.broken) throw this.interrupted(error);
      // Let confirmed moves be acknowledged; closing the channel puts back the rest.
      await this.publisher.drain().catch(() => undefined);
      throw error;
    }
  }

  private interrupted(cause?: unknown): WalkInterruptedError {
    return new WalkInterruptedError(this.queue, this.closedReason ?? 'unknown reason', this.moved, this.removed, { cause });
  }

  private async keep(m: amqp.GetMessage, position: number): Promise<void> {
    this.kept += 1;
    if (this.s.quorum) await this.copyToBack(m, position);
  }

  private async rotate(count: number): Promise<void> {
    for (let i = 0; i < count && !this.broken; i++) {
      const m = await this.ch.get(this.queue, { noAck: false });
      if (m === false) break;
      await this.copyToBack(m, this.scanned + i + 1);
    }
  }

  /** Quorum queues: a confirmed copy at the back, then the original acknowledged. */
  private async copyToBack(m: amqp.GetMessage, position: number): Promise<void> {
    this.copiesSent += 1;
    const headers = refreshHeaders(m.properties.headers ?? {});
    const { outcome } = await this.publisher.publish({ exchange: '', routingKey: this.queue, content: m.content, properties: copyProperties(m.properties, headers) });
    void outcome.then((error) => {
      if (this.broken) return;
      if (error !== undefined) {
        // The original stays unacknowledged and goes back when the channel closes, out of place.
        this.failed.push({ position, messageId: typeof m.properties.messageId === 'string' ? m.properties.messageId : undefined, error: `could not be copied to the back of the queue, so it may be out of order: ${error}` });
        return;
      }
      this.ch.ack(m);
      this.copied += 1;
    });
  }

  private async move(m: amqp.GetMessage, position: number, to: MoveTarget): Promise<void> {
    const messageId = typeof m.properties.messageId === 'string' ? m.properties.messageId : undefined;
    const { outcome } = await this.publisher.publish(to);
    void outcome.then(async (error) => {
      // After a return every later confirm is suspect: keep those originals (a duplicate at worst).
      const failure = error ?? this.returned;
      if (failure !== undefined) {
        this.failed.push({ position, messageId, error: failure });
        if (this.s.quorum && !this.broken) await this.copyToBack(m, position);
        return;
      }
      if (this.broken) return;
      this.ch.ack(m);
      this.moved += 1;
    });
  }
}

/**
 * Publishes with confirm and `mandatory` on one channel, at most `max` awaiting their
 * confirm at once, waiting for the socket to drain when it is full.
 */
class ConfirmedPublisher {
  private inFlight = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(
    private readonly ch: amqp.ConfirmChannel,
    private readonly max: number,
    private readonly broken: () => string | undefined,
  ) {}

  /** Wakes everyone waiting (the channel closed; amqplib fails the outstanding confirms). */
  wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /**
   * Resolves once the message is handed to the socket, to its pending outcome:
   * `undefined` when confirmed, else why not. (Wrapped in an object: an async
   * function returning a promise would wait for it.)
   */
  async publish(to: MoveTarget): Promise<{ outcome: Promise<string | undefined> }> {
    while (this.inFlight >= this.max && this.broken() === undefined) await new Promise<void>((r) => this.waiters.push(r));
    const broken = this.broken();
    if (broken !== undefined) return { outcome: Promise.resolve(broken) };
    this.inFlight += 1;
    let settle: (error: string | undefined) => void = () => undefined;
    const outcome = new Promise<string | undefined>((resolve) => (settle = resolve));
    const done = (error: string | undefined) => {
      this.inFlight -= 1;
      this.waiters.shift()?.();
      settle(error);
    };
    let writable = true;
    try {
      writable = this.ch.publish(to.exchange, to.routingKey, to.content, { ...to.properties, mandatory: true }, (err: unknown) => {
        done(err ? `the broker did not confirm it (${messageText(err)})` : undefined);
      });
    } catch (error) {
      done(`the channel refused it (${messageText(error)})`);
    }
    if (!writable && this.broken() === undefined) {
      await new Promise<void>((resolve) => {
        const go = () => {
          this.ch.off('drain', go);
          this.ch.off('close', go);
          resolve();
        };
        this.ch.on('drain', go);
        this.ch.on('close', go);
      });
    }
    return { outcome };
  }

  /** Waits until every publish has its outcome and the outcome handlers have run. */
  async drain(): Promise<void> {
    // An outcome handler may publish again (a failed move copied back), so wait until it settles down.
    do {
      while (this.inFlight > 0 && this.broken() === undefined) await new Promise<void>((r) => this.waiters.push(r));
      await new Promise<void>((r) => setImmediate(r));
    } while (this.inFlight > 0 && this.broken() === undefined);
  }
}
