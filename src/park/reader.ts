import type * as amqp from 'amqplib';
import { closeChannel } from '../connection/channel.js';
import { coalesceWrites } from '../connection/writes.js';
import { InvalidOptionError } from '../errors.js';
import type { QueueType } from '../topology/declaration.js';
import { parkedQueueType } from '../topology/queue-type.js';
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
   * The type the queue was declared with, which decides how kept messages stay in order;
   * see {@link walkParked}. The walk follows the type the queue really has: before it
   * starts, it declares the queue with warren's parked-queue arguments of this type (a
   * no-op when they match) and, when the broker refuses, walks the queue as the type the
   * broker names (see `parkedQueueType`). A classic walk of a quorum queue would hand every
   * kept message back on each walk, and RabbitMQ 4.x drops a quorum message past its
   * delivery limit.
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
   * Changes (moves, removals, a quorum queue's copies) committed to the broker together,
   * in one transaction. A change older than {@link WalkOptions.maxCommitDelayMs} is
   * committed without waiting for a full batch.
   * @default 500
   */
  maxInFlight?: number;
  /**
   * The longest a change waits for its batch before it is committed.
   * @default 50
   */
  maxCommitDelayMs?: number;
  /**
   * The most messages the broker sends ahead of the one being examined (the walk's
   * prefetch). More keeps the walk busy while a batch is committed; fewer holds fewer
   * messages unacknowledged at once, which matters when `visit` is slow (a paced replay):
   * the broker closes the channel of a message held longer than its `consumer_timeout`
   * (30 minutes by default), which interrupts the walk.
   * @default twice maxInFlight, at most 65535
   */
  readAhead?: number;
  /**
   * Examine at most this many messages from the head: the walk stops after the last one
   * (stop reason `stopped`) and reads none beyond it. For a visitor that will say `stop`
   * by then anyway (a limit on every message), this also spares a quorum queue the
   * rewrite of the messages read ahead and not examined.
   * @default every message in the queue when the walk begins
   */
  maxScanned?: number;
  /** Stops the walk before the next message; what was examined is settled as usual. */
  signal?: AbortSignal;
  /** Called once, before the first message is read, with the number of messages in the queue then: the walk examines no more. */
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
  /**
   * A move came back unroutable (its target queue is gone); the walk stopped there. The
   * broker says so at the commit, and the walk examines the next messages meanwhile: what
   * it decided for those after the commit is not applied, and they count as not examined.
   */
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
  /**
   * Messages of `total` that were gone before the walk reached them: another consumer of
   * the queue took them (they come back when it lets go), or they expired.
   */
  readonly missed: number;
  readonly stopReason: StopReason;
  /** Quorum queues: kept or unexamined messages copied to the back of the queue, in order. */
  readonly rewritten: number;
  /**
   * Other consumers of the queue when the walk began: another walk, or one whose
   * connection is closing and whose messages the broker has not taken back yet. What they
   * held is not in `total` and was not examined; run again once they are gone.
   */
  readonly readers: number;
}

const DEFAULTS = { maxHeld: 10_000, maxInFlight: 500, maxCommitDelayMs: 50 } as const;
/** The largest prefetch AMQP can carry (a 16-bit field). */
const MAX_PREFETCH = 65_535;
/** How long a walk waits for a delivery before it asks the broker whether the queue still has any. */
const IDLE_CHECK_MS = 100;

function wholeNumber(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${v} is not a whole number from ${min} to ${max}`);
  return v;
}

interface Settings {
  readonly quorum: boolean;
  readonly maxHeld: number;
  readonly maxInFlight: number;
  readonly maxCommitDelayMs: number;
  readonly readAhead: number;
  readonly maxScanned: number;
  readonly signal: AbortSignal | undefined;
  readonly onStart: ((total: number) => void) | undefined;
}

function settings(options: WalkOptions): Settings {
  if (options.queueType !== undefined && options.queueType !== 'classic' && options.queueType !== 'quorum') {
    throw new InvalidOptionError('queueType', `${JSON.stringify(options.queueType)} is not a queue type`, "Use 'classic' or 'quorum'.");
  }
  const maxInFlight = wholeNumber(options.maxInFlight, DEFAULTS.maxInFlight, 'maxInFlight', 1, 100_000);
  return {
    quorum: options.queueType === 'quorum',
    maxHeld: wholeNumber(options.maxHeld, DEFAULTS.maxHeld, 'maxHeld', 1, 10_000_000),
    maxInFlight,
    maxCommitDelayMs: wholeNumber(options.maxCommitDelayMs, DEFAULTS.maxCommitDelayMs, 'maxCommitDelayMs', 0, 60_000),
    readAhead: wholeNumber(options.readAhead, Math.min(2 * maxInFlight, MAX_PREFETCH), 'readAhead', 1, MAX_PREFETCH),
    maxScanned: wholeNumber(options.maxScanned, Number.MAX_SAFE_INTEGER, 'maxScanned', 1, Number.MAX_SAFE_INTEGER),
    signal: options.signal,
    onStart: options.onStart,
  };
}

function hasCode(error: unknown, code: number): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

function isThenable<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown }).then === 'function';
}

function messageText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Works through a parked queue from its head, one message at a time, without losing,
 * duplicating or reordering what stays. It consumes the queue (no auto-ack) on its own
 * channel in transaction mode and asks `visit` what to do with each message:
 *
 * - `keep`: on a classic queue the message is held unacknowledged, and when the walk
 *   ends the channel is closed and the broker puts it back in its old place. A quorum
 *   queue does not: RabbitMQ 3.x requeues to the back, 4.x to the head in the order
 *   of the requeues, a closed channel's messages in no set order, and 4.x counts each
 *   return as a delivery. So on a quorum queue a kept message is copied to the back and
 *   the original acknowledged; if the walk stops early, the messages it did not reach
 *   are copied to the back after them, which restores the order.
 * - `move`: published with `mandatory`, and the original acknowledged; if the broker
 *   returns it (its target queue is gone), the original is put back in the queue: at
 *   its back on a classic queue, in its place on a quorum queue (where a move is never
 *   committed with the copies that follow it).
 * - `remove`: acknowledged.
 *
 * Every publish and acknowledgement is committed in a transaction (`tx.commit`), a
 * batch at a time, so a copy and the acknowledgement of its original take effect
 * together or not at all. A walk interrupted at any point (Ctrl-C, kill -9, a connection
 * the broker closes) leaves each message exactly once: what was committed is done, and
 * the broker returns every message whose change was not committed. Only the order of a
 * quorum queue may change then (the broker returns a closed channel's messages in no
 * set order). With publisher confirms instead, a copy confirmed but not yet
 * acknowledged when the process died would stay as a duplicate.
 *
 * The walk makes `model`'s socket writes go out once per pass of amqplib's frame
 * multiplexer instead of once per frame (see `coalesceWrites` in
 * `src/connection/writes.ts`): the frames and their order are amqplib's, nothing waits
 * past the turn of the event loop it was sent in, and warren's own connections already
 * work this way.
 *
 * Only the messages in the queue when the walk begins are examined, so a message that
 * is parked while the walk runs (or again, after a replay that fails at once) is not
 * taken. The broker sends up to {@link WalkOptions.readAhead} messages ahead of the one
 * being examined, while earlier batches commit, but never more than that count in all:
 * the prefetch only opens as far as the messages still to come, and acknowledgements
 * that would open it further wait until the last of them has arrived and the consumer
 * is cancelled. So a message parked during the walk (or a quorum queue's own copies at
 * its back) is never delivered to it, and nothing is ever returned to a quorum queue
 * out of order. When a walk stops early, the messages read ahead and not examined go
 * back in place on a classic queue; on a quorum queue they and the rest of the
 * messages it did not reach are copied to the back, as kept ones are (use
 * {@link WalkOptions.maxScanned} when the number to examine is known, so that nothing
 * is read ahead of it). Do not run two walks on one queue at once.
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
  const declared = settings(options);
  const real = await parkedQueueType(model, queue, declared.quorum ? 'quorum' : 'classic');
  const s: Settings = real === 'quorum' === declared.quorum ? declared : { ...declared, quorum: real === 'quorum' };
  // A batch is hundreds of publishes and acknowledgements: one socket write, not one each.
  coalesceWrites(model);
  const ch = await model.createChannel();
  const walk = new Walk(ch, queue, s);
  try {
    await (ch as unknown as RpcChannel).rpc(TX.select, {}, TX.selectOk);
    const result = await walk.run(visit);
    if (!s.quorum) {
      // Hand what a classic queue's walk still holds back to the queue, in place, before
      // returning: left to the channel's close, it comes back a moment after, and an
      // operation started at once (a replay right after a listing) would miss it.
      // Should this fail, the channel is gone, and its close gives them back all the same.
      // Another consumer would take what goes back, and the count would never reach it.
      const before = walk.held > 0 && !walk.shared ? await ch.checkQueue(queue).then((ok) => ok.messageCount, () => undefined) : undefined;
      try {
        ch.nackAll(true);
      } catch {
        // The channel is gone (the queue was deleted as the walk ended): its close gave them back.
      }
      const committed = await (ch as unknown as RpcChannel).rpc(TX.commit, {}, TX.commitOk).then(() => true, () => false);
      if (committed && before !== undefined) await untilBack(ch, queue, before + walk.held);
    }
    return result;
  } finally {
    walk.close();
    // Closing the channel discards an uncommitted batch and puts every held message back
    // (a classic queue: in its old place).
    await closeChannel(ch);
  }
}

/**
 * Waits until the queue has `ready` messages ready or more, for 5 s at most (a queue
 * whose messages expire or overflow meanwhile may never get there). Commit-ok
 * comes before the queue has taken back what the commit requeued, and the queue answers
 * a count ahead of its other work: a walk started at once (a purge right after its
 * count) would take a count short of them, and leave the last ones unexamined.
 */
async function untilBack(ch: amqp.Channel, queue: string, ready: number): Promise<void> {
  const until = Date.now() + 5000;
  while (Date.now() < until) {
    const now = await ch.checkQueue(queue).then((ok) => ok, () => undefined);
    // Gone, back, or another consumer started and takes them: nothing more to wait for.
    if (now === undefined || now.messageCount >= ready || now.consumerCount > 0) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** AMQP 0-9-1 methods amqplib has no wrapper for: transactions (class 90), and a cancel that keeps the consumer's callback. */
const TX = { select: 0x5a000a, selectOk: 0x5a000b, commit: 0x5a0014, commitOk: 0x5a0015 } as const;
const BASIC_CANCEL = { cancel: 0x3c001e, cancelOk: 0x3c001f } as const;

/** amqplib's channel RPC: send a method, wait for the expected reply. */
interface RpcChannel {
  rpc(method: number, fields: Record<string, unknown>, expect: number): Promise<unknown>;
}

/**
 * One consumer of the walk. The broker sends it at most `prefetch` messages more than
 * the acknowledgements committed for it, so what may still arrive is
 * `settled + prefetch - delivered` ({@link Walk.capacity}) until it is cancelled.
 */
interface Consumer {
  readonly tag: string;
  readonly prefetch: number;
  /** Deliveries received. */
  delivered: number;
  /** Acknowledgements sent to be committed (counted when sent: the broker may apply them as soon as it reads the commit). */
  settled: number;
  /** `cancelled` once cancel-ok is in: nothing more arrives for it, and its acknowledgements open nothing. */
  state: 'open' | 'cancelling' | 'cancelled';
  cancelled?: Promise<void>;
}

/** A message received, with the consumer that received it. */
interface Delivery {
  readonly m: amqp.ConsumeMessage;
  readonly from: Consumer;
}

/** One uncommitted change. */
type Change =
  | { readonly kind: 'remove'; readonly d: Delivery; readonly position: number }
  /** `position` 0: a copy of a message the walk did not examine (see {@link Walk.rotate}). */
  | { readonly kind: 'copy'; readonly d: Delivery; readonly position: number }
  | { readonly kind: 'move'; readonly d: Delivery; readonly position: number; readonly to: MoveTarget }
  | { readonly kind: 'restore'; readonly m: amqp.ConsumeMessage };

let walks = 0;

class Walk {
  private closing = false;
  private closedReason: string | undefined;
  private total = 0;
  private readers = 0;
  /** The most messages the walk may receive in all: it never lets the broker send more. */
  private bound = 0;
  private received = 0;
  /** Deliveries not acknowledged by a committed batch: what the channel holds. */
  private unacked = 0;
  private scanned = 0;
  private kept = 0;
  private removed = 0;
  private moved = 0;
  private copied = 0;
  private unroutable = false;
  /** True while messages are examined; a returned move then undoes what was decided after its batch. */
  private examining = false;
  /** The last position whose change was sent in a batch: later ones are not committed yet. */
  private sentUpTo = 0;
  /** The queue had nothing ready and the consumer was cancelled: nothing more will arrive. */
  private dry = false;
  private readonly failed: MoveFailure[] = [];
  /** Received and not examined yet, in queue order: `buffer[head]` is the next. */
  private buffer: Delivery[] = [];
  private head = 0;
  private consumer: Consumer | undefined;
  private consumers = 0;
  private prefetch = 0;
  private pending: Change[] = [];
  private oldestPending = 0;
  /** The commit on its way, if any: nothing else is sent on the channel until it is back. */
  private inflight: Promise<void> | undefined;
  private inflightDone = false;
  private commitError: unknown;
  private readonly returns: amqp.Message[] = [];
  private wake: (() => void) | undefined;
  private readonly id = ++walks;

  constructor(
    private readonly ch: amqp.Channel,
    private readonly queue: string,
    private readonly s: Settings,
  ) {
    ch.on('error', (err: Error) => {
      this.closedReason ??= err.message;
      this.wake?.();
    });
    ch.on('close', () => {
      if (!this.closing) this.closedReason ??= 'the channel closed';
      this.wake?.();
    });
    // In a transaction the broker returns an unroutable message at the commit, before commit-ok.
    ch.on('return', (msg: amqp.Message) => {
      this.returns.push(msg);
    });
  }

  close(): void {
    this.closing = true;
  }

  /** The queue had other consumers when the walk began, or one took messages while it ran. */
  get shared(): boolean {
    return this.readers > 0 || (this.dry && this.scanned < this.total);
  }

  /** Messages the walk's channel holds: delivered, and not acknowledged by a commit. */
  get held(): number {
    return this.unacked;
  }

  private get broken(): boolean {
    return this.closedReason !== undefined;
  }

  async run(visit: (message: ParkedMessage) => Verdict | Promise<Verdict>): Promise<WalkResult> {
    try {
      const ok = await this.ch.checkQueue(this.queue);
      this.total = ok.messageCount;
      this.readers = ok.consumerCount;
    } catch (error) {
      if (hasCode(error, 404)) throw new QueueNotFoundError(this.queue, { cause: error });
      throw error;
    }
    this.bound = Math.min(this.total, this.s.maxScanned);
    this.s.onStart?.(this.total);
    const onAbort = () => this.wake?.();
    this.s.signal?.addEventListener('abort', onAbort);
    let stopReason: StopReason = 'end';
    let exhausted = false;
    this.examining = true;
    try {
      for (;;) {
        if (this.scanned >= this.bound) {
          if (this.scanned < this.total) stopReason = 'stopped';
          break;
        }
        if (this.s.signal?.aborted) {
          stopReason = 'aborted';
          break;
        }
        if (this.unroutable) {
          stopReason = 'unroutable';
          break;
        }
        if (!this.s.quorum && this.kept + this.failed.length >= this.s.maxHeld) {
          stopReason = 'max-held';
          break;
        }
        const d = await this.next(true);
        if (d === 'aborted') {
          stopReason = 'aborted';
          break;
        }
        if (d === undefined) {
          exhausted = true;
          break;
        }
        if (this.unroutable) {
          // A commit that came back while it waited returned a move: stop before this one.
          this.untake(d);
          stopReason = 'unroutable';
          break;
        }
        this.scanned += 1;
        const position = this.scanned;
        let verdict: Verdict;
        try {
          const answer = visit(toParkedMessage(d.m, position));
          verdict = isThenable(answer) ? await answer : answer;
        } catch (error) {
          this.keep(d, position);
          throw error;
        }
        if (verdict.action === 'keep') this.keep(d, position);
        else if (verdict.action === 'remove') this.change({ kind: 'remove', d, position });
        else this.change({ kind: 'move', d, position, to: verdict.to });
        if (this.pending.length >= this.s.maxInFlight || (this.pending.length > 0 && Date.now() - this.oldestPending >= this.s.maxCommitDelayMs)) await this.flush();
        if (this.unroutable) {
          stopReason = 'unroutable';
          break;
        }
        if (verdict.stop) {
          stopReason = this.s.signal?.aborted ? 'aborted' : 'stopped';
          break;
        }
      }
      this.examining = false;
      const notExamined = exhausted ? 0 : Math.max(0, this.total - this.scanned);
      const missed = exhausted ? Math.max(0, this.total - this.scanned) : 0;
      // Kept messages went to the back of a quorum queue, and what was read ahead cannot go
      // back in place: the unexamined ones follow them there.
      if (this.s.quorum && notExamined > 0 && (this.kept > 0 || this.unread() > 0 || this.mayReceive())) await this.rotate();
      await this.cancelConsumer();
      await this.settle();
      if (this.unroutable && stopReason === 'end') stopReason = 'unroutable';
      return {
        queue: this.queue,
        total: this.total,
        scanned: this.scanned,
        kept: this.kept,
        removed: this.removed,
        moved: this.moved,
        failed: this.failed,
        notExamined,
        missed,
        stopReason,
        rewritten: this.copied,
        readers: this.readers,
      };
    } catch (error) {
      this.examining = false;
      if (error instanceof WalkInterruptedError) throw error;
      if (this.broken) throw this.interrupted(error);
      // Settle what was decided before the error; closing the channel puts back the rest
      // (in place on a classic queue; on a quorum queue, where kept messages went to the
      // back, the unexamined ones follow them there first, as when a walk stops early).
      const unexamined = this.total - this.scanned;
      await (async () => {
        if (this.s.quorum && unexamined > 0 && (this.kept > 0 || this.unread() > 0 || this.mayReceive())) await this.rotate();
        await this.cancelConsumer();
        await this.settle();
      })().catch(() => undefined);
      throw error;
    } finally {
      this.s.signal?.removeEventListener('abort', onAbort);
    }
  }

  private interrupted(cause?: unknown): WalkInterruptedError {
    return new WalkInterruptedError(this.queue, this.closedReason ?? 'unknown reason', this.moved, this.removed, cause === undefined ? undefined : { cause });
  }

  private change(c: Change): void {
    if (this.pending.length === 0) this.oldestPending = Date.now();
    this.pending.push(c);
  }

  private keep(d: Delivery, position: number): void {
    this.kept += 1;
    if (this.s.quorum) this.change({ kind: 'copy', d, position });
  }

  /** What may still arrive for `c`: its prefetch, less what it holds that is not settled. */
  private capacity(c: Consumer): number {
    return c.state === 'cancelled' ? 0 : c.settled + c.prefetch - c.delivered;
  }

  private unread(): number {
    return this.buffer.length - this.head;
  }

  private take(): Delivery | undefined {
    if (this.head === this.buffer.length) return undefined;
    const d = this.buffer[this.head] as Delivery;
    this.head += 1;
    if (this.head === this.buffer.length) {
      this.buffer = [];
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.buffer.length) {
      this.buffer = this.buffer.slice(this.head);
      this.head = 0;
    }
    return d;
  }

  /** Gives back the message {@link take} returned last: it is the next again. */
  private untake(d: Delivery): void {
    if (this.head > 0) this.buffer[--this.head] = d;
    else this.buffer.unshift(d);
  }

  private mayReceive(): boolean {
    return this.consumer !== undefined && this.capacity(this.consumer) > 0;
  }

  private deliver(c: Consumer, m: amqp.ConsumeMessage | null): void {
    if (m === null) {
      // The broker cancelled the consumer: the queue was deleted, or its leader is gone.
      this.closedReason ??= `the broker cancelled the walk's consumer of '${this.queue}'`;
    } else {
      c.delivered += 1;
      this.received += 1;
      this.unacked += 1;
      this.buffer.push({ m, from: c });
      // Everything the walk may take has arrived: cancel, so that acknowledgements open nothing more.
      if (this.received >= this.bound && c.state === 'open') void this.cancel(c);
    }
    this.wake?.();
  }

  /**
   * The next message to examine, in queue order; `undefined` when no more will come.
   * While there is none, it commits what is decided, keeps a consumer that can receive,
   * and waits.
   */
  private async next(abortable: boolean): Promise<Delivery | undefined | 'aborted'> {
    for (;;) {
      if (abortable && this.s.signal?.aborted) return 'aborted';
      const d = this.take();
      if (d !== undefined) return d;
      if (this.broken) throw this.interrupted();
      if (this.received >= this.bound || this.dry) return undefined;
      // Nothing to examine: commit meanwhile, or examine what arrives while a commit is on its way.
      if (this.inflight !== undefined) {
        if (this.inflightDone) await this.settleInflight();
        else await this.wait(IDLE_CHECK_MS);
        continue;
      }
      if (this.pending.length > 0 && (await this.flush())) continue;
      await this.ensureConsumer();
      if (this.unread() > 0) continue;
      const before = this.received;
      await this.wait(IDLE_CHECK_MS);
      if (this.received === before && !this.broken && !(abortable && this.s.signal?.aborted)) await this.checkDry();
    }
  }

  private wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  /**
   * A consumer that can receive: the current one while it may; else (a classic queue
   * whose prefetch is all held by kept messages) a new one, after the old one is
   * cancelled, with a prefetch no larger than what the walk may still take.
   */
  private async ensureConsumer(): Promise<void> {
    const old = this.consumer;
    if (old !== undefined && this.capacity(old) > 0) return;
    if (old !== undefined) {
      await this.cancel(old);
      if (this.broken) throw this.interrupted();
    }
    const prefetch = Math.min(this.s.readAhead, this.bound - this.received);
    if (prefetch !== this.prefetch) {
      await this.ch.prefetch(prefetch);
      this.prefetch = prefetch;
    }
    const c: Consumer = { tag: `warren-walk-${process.pid}-${this.id}-${++this.consumers}`, prefetch, delivered: 0, settled: 0, state: 'open' };
    this.consumer = c;
    await this.ch.consume(this.queue, (m) => this.deliver(c, m), { noAck: false, consumerTag: c.tag });
  }

  /**
   * Cancels `c` and keeps its callback: a delivery that crosses the cancel is kept (and
   * returned when the channel closes) instead of closing the channel as unknown.
   */
  private cancel(c: Consumer): Promise<void> {
    if (c.cancelled === undefined) {
      c.state = 'cancelling';
      c.cancelled = (this.ch as unknown as RpcChannel).rpc(BASIC_CANCEL.cancel, { consumerTag: c.tag, nowait: false }, BASIC_CANCEL.cancelOk).then(
        () => {
          c.state = 'cancelled';
        },
        (error: unknown) => {
          this.closedReason ??= messageText(error);
        },
      );
    }
    return c.cancelled;
  }

  private async cancelConsumer(): Promise<void> {
    if (this.consumer === undefined || this.broken) return;
    await this.cancel(this.consumer);
    if (this.broken) throw this.interrupted();
  }

  /**
   * Nothing arrived for a while: if the queue has nothing ready (another reader took the
   * rest, or it expired), cancel; what was on its way arrives before cancel-ok.
   */
  private async checkDry(): Promise<void> {
    const ready = (await this.ch.checkQueue(this.queue)).messageCount;
    if (ready > 0 || this.received >= this.bound) return;
    await this.cancelConsumer();
    this.dry = true;
  }

  /**
   * Copies every message the walk did not examine to the back, in order: those read
   * ahead, then the rest of the messages that were in the queue when it began.
   */
  private async rotate(): Promise<void> {
    this.bound = this.total;
    for (;;) {
      const d = await this.next(false);
      if (d === undefined || d === 'aborted') break;
      this.change({ kind: 'copy', d, position: 0 });
      if (this.pending.length >= this.s.maxInFlight) await this.flush();
    }
  }

  /** Commits everything decided, and waits for it. */
  private async settle(): Promise<void> {
    for (;;) {
      await this.settleInflight();
      if (this.pending.length === 0) return;
      if (!(await this.flush())) await this.cancelConsumer();
    }
  }

  private async settleInflight(): Promise<void> {
    const inflight = this.inflight;
    if (inflight !== undefined) {
      this.inflight = undefined;
      await inflight;
    }
    if (this.commitError !== undefined) throw this.commitError;
    if (this.broken) throw this.interrupted();
  }

  /**
   * How many pending changes, from the first, can be committed now: all of them, but
   * that an acknowledgement for the open consumer opens its prefetch by one, which must
   * not let the broker send more than the walk may still take.
   */
  private committable(limit: number): number {
    const c = this.consumer;
    let allowance = c === undefined || c.state === 'cancelled' ? Infinity : this.bound - this.received - this.capacity(c);
    for (let n = 0; n < limit; n++) {
      const change = this.pending[n] as Change;
      if (change.kind !== 'restore' && change.d.from === c && allowance !== Infinity) {
        if (allowance <= 0) return n;
        allowance -= 1;
      }
    }
    return limit;
  }

  /**
   * On a quorum queue, how many of the first `n` pending changes can share a commit
   * without putting the queue out of order: a batch ends before a copy (or a restore)
   * that follows a move. Should the broker return the move, its original (acknowledged
   * in that commit) is parked again by a copy at the head of the next batch, still
   * ahead of the copies of the messages that came after it.
   */
  private inOrder(n: number): number {
    if (!this.s.quorum) return n;
    let moved = false;
    for (let i = 0; i < n; i++) {
      const kind = (this.pending[i] as Change).kind;
      if (kind === 'move') moved = true;
      else if (moved && (kind === 'copy' || kind === 'restore')) return i;
    }
    return n;
  }

  /**
   * Sends the next batch of pending changes (publishes, then acknowledgements) and its
   * `tx.commit`, once the commit before it is back; returns false when none can be sent
   * yet (see {@link Walk.committable}). The broker applies a batch in full or, if the
   * channel closes first, not at all.
   */
  private async flush(): Promise<boolean> {
    await this.settleInflight();
    if (this.pending.length === 0) return false;
    const limit = Math.min(this.pending.length, this.s.maxInFlight);
    let n = this.committable(limit);
    const c = this.consumer;
    if (n === 0 && c?.state === 'cancelling') {
      await c.cancelled;
      if (this.broken) throw this.interrupted();
      n = this.committable(limit);
    }
    if (n === 0) return false;
    n = this.inOrder(n);
    const batch = n === this.pending.length ? this.pending : this.pending.slice(0, n);
    this.pending = n === this.pending.length ? [] : this.pending.slice(n);
    for (let i = batch.length - 1; i >= 0; i--) {
      const c = batch[i] as Change;
      if (c.kind !== 'restore' && c.position > 0) {
        this.sentUpTo = c.position;
        break;
      }
    }
    for (const change of batch) {
      const to = change.kind === 'copy' ? this.copyOf(change.d.m) : change.kind === 'restore' ? this.copyOf(change.m) : change.kind === 'move' ? change.to : undefined;
      if (to !== undefined && !this.publish(to)) await this.drained();
      if (change.kind !== 'restore') {
        this.ch.ack(change.d.m);
        change.d.from.settled += 1;
      }
    }
    this.returns.length = 0;
    this.inflightDone = false;
    this.inflight = this.commit(batch)
      .catch((error: unknown) => {
        this.commitError = error;
      })
      .finally(() => {
        this.inflightDone = true;
        this.wake?.();
      });
    return true;
  }

  /** Publishes `to` with `mandatory`; false when the socket's buffer is full (see {@link Walk.drained}). */
  private publish(to: MoveTarget): boolean {
    if (this.broken) throw this.interrupted();
    const p = to.properties;
    return this.ch.publish(to.exchange, to.routingKey, to.content, p.mandatory === true ? p : { ...p, mandatory: true });
  }

  /** Waits until the socket takes writes again (or the channel closes). */
  private async drained(): Promise<void> {
    if (!this.broken) {
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
  }

  /** A copy of `m` for the back of its own queue. */
  private copyOf(m: amqp.Message): MoveTarget {
    return { exchange: '', routingKey: this.queue, content: m.content, properties: copyProperties(m.properties, refreshHeaders(m.properties.headers ?? {})) };
  }

  /**
   * Waits for the batch's commit-ok and counts what it did. A move the broker returned
   * had its original acknowledged in the same commit, so the original is put back in
   * the queue (at its back) ahead of the next batch.
   */
  private async commit(batch: readonly Change[]): Promise<void> {
    try {
      await (this.ch as unknown as RpcChannel).rpc(TX.commit, {}, TX.commitOk);
    } catch (error) {
      this.closedReason ??= messageText(error);
      throw this.interrupted(error);
    }
    let moves = 0;
    for (const c of batch) {
      if (c.kind === 'remove') this.removed += 1;
      else if (c.kind === 'copy') this.copied += 1;
      else if (c.kind === 'move') moves += 1;
      if (c.kind !== 'restore') this.unacked -= 1;
    }
    if (this.returns.length === 0) {
      this.moved += moves;
      return;
    }
    const returned = this.returns.splice(0);
    const restores: Change[] = [];
    for (const move of batch) {
      if (move.kind !== 'move') continue;
      const i = returned.findIndex((r) => r.fields.routingKey === move.to.routingKey && r.properties.messageId === move.to.properties.messageId && r.content.equals(move.to.content));
      if (i < 0) {
        this.moved += 1;
        continue;
      }
      const r = returned.splice(i, 1)[0] as amqp.Message;
      const f = r.fields as { replyCode?: number; replyText?: string; exchange: string };
      this.unroutable = true;
      this.failed.push({
        position: move.position,
        messageId: typeof move.d.m.properties.messageId === 'string' ? move.d.m.properties.messageId : undefined,
        error: `the broker returned it (${f.replyCode ?? 312} ${f.replyText ?? 'NO_ROUTE'}): no queue '${move.to.routingKey}' to route to via exchange '${f.exchange || '(default)'}'; ${this.s.quorum ? 'it is parked again in its place, the queue in its order' : 'it is parked again, at the back of the queue'}`,
      });
      restores.push({ kind: 'restore', m: move.d.m });
    }
    if (this.examining) this.undoSince(this.sentUpTo);
    if (restores.length > 0) {
      if (this.pending.length === 0) this.oldestPending = Date.now();
      this.pending.unshift(...restores);
    }
  }

  /**
   * A move came back: the walk stops at it. It examined on while the commit was on its
   * way; what it decided for the messages after `upTo` (the last position committed) is
   * dropped before it is sent, and they count as not examined. Nothing of theirs was
   * acknowledged: on a classic queue they go back in place with the channel; on a quorum
   * queue they return to the read-ahead, to be copied to the back in order.
   */
  private undoSince(upTo: number): void {
    const undone = this.scanned - upTo;
    if (undone <= 0) return;
    const dropped = this.pending.filter((c) => c.kind !== 'restore');
    this.pending = this.pending.filter((c) => c.kind === 'restore');
    // Every examined message after `upTo` is a pending change or a kept one (on a classic
    // queue a kept message has no change of its own).
    let changed = 0;
    for (const c of dropped) if (c.kind === 'remove' || c.kind === 'move') changed += 1;
    this.kept -= undone - changed;
    this.scanned = upTo;
    if (this.s.quorum && dropped.length > 0) {
      this.buffer = [...dropped.map((c) => (c as Exclude<Change, { kind: 'restore' }>).d), ...this.buffer.slice(this.head)];
      this.head = 0;
    }
  }
}
