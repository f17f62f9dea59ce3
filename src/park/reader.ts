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

const DEFAULTS = { maxHeld: 10_000, maxInFlight: 500, maxCommitDelayMs: 50 } as const;

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
    maxCommitDelayMs: wholeNumber(options.maxCommitDelayMs, DEFAULTS.maxCommitDelayMs, 'maxCommitDelayMs', 0, 60_000),
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
 * Works through a parked queue from its head, one message at a time, without losing,
 * duplicating or reordering what stays. It reads with `basic.get` (no auto-ack) on its
 * own channel in transaction mode and asks `visit` what to do with each message:
 *
 * - `keep`: on a classic queue the message is held unacknowledged, and when the walk
 *   ends the channel is closed and the broker puts it back in its old place. A quorum
 *   queue does not: RabbitMQ 3.x requeues to the back, 4.x to the head in the order
 *   of the requeues, a closed channel's messages in no set order, and 4.x counts each
 *   return as a delivery. So on a quorum queue a kept message is copied to the back and
 *   the original acknowledged; if the walk stops early, the messages it did not reach
 *   are copied to the back after them, which restores the order.
 * - `move`: published with `mandatory`, and the original acknowledged; if the broker
 *   returns it (its target queue is gone), the original is put back in the queue.
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
 * Only the messages in the queue when the walk begins are examined, so a message that
 * is parked while the walk runs (or again, after a replay that fails at once) is not
 * taken. Do not run two walks on one queue at once.
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
  const ch = await model.createChannel();
  const walk = new Walk(ch, queue, s);
  try {
    await (ch as unknown as RpcChannel).rpc(TX.select, {}, TX.selectOk);
    return await walk.run(visit);
  } finally {
    walk.closing = true;
    // Closing the channel discards an uncommitted batch and puts every held message back
    // (a classic queue: in its old place).
    await ch.close().catch(() => undefined);
  }
}

/** AMQP 0-9-1 transaction methods (class 90), which amqplib has no wrapper for. */
const TX = { select: 0x5a000a, selectOk: 0x5a000b, commit: 0x5a0014, commitOk: 0x5a0015 } as const;

/** amqplib's channel RPC: send a method, wait for the expected reply. */
interface RpcChannel {
  rpc(method: number, fields: Record<string, never>, expect: number): Promise<unknown>;
}

/** One uncommitted change. */
type Change =
  | { readonly kind: 'remove'; readonly m: amqp.GetMessage }
  | { readonly kind: 'copy'; readonly m: amqp.GetMessage }
  | { readonly kind: 'move'; readonly m: amqp.GetMessage; readonly position: number; readonly to: MoveTarget }
  | { readonly kind: 'restore'; readonly m: amqp.GetMessage };

class Walk {
  closing = false;
  private closedReason: string | undefined;
  private total = 0;
  private scanned = 0;
  private kept = 0;
  private removed = 0;
  private moved = 0;
  private copied = 0;
  private unroutable = false;
  private readonly failed: MoveFailure[] = [];
  private pending: Change[] = [];
  private oldestPending = 0;
  private readonly returns: amqp.Message[] = [];

  constructor(
    private readonly ch: amqp.Channel,
    private readonly queue: string,
    private readonly s: Settings,
  ) {
    ch.on('error', (err: Error) => {
      this.closedReason ??= err.message;
    });
    ch.on('close', () => {
      if (!this.closing) this.closedReason ??= 'the channel closed';
    });
    // In a transaction the broker returns an unroutable message at the commit, before commit-ok.
    ch.on('return', (msg: amqp.Message) => {
      this.returns.push(msg);
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
        if (this.pending.length > 0 && Date.now() - this.oldestPending >= this.s.maxCommitDelayMs) await this.commit();
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
          this.keep(m);
          throw error;
        }
        if (verdict.action === 'keep') this.keep(m);
        else if (verdict.action === 'remove') this.change({ kind: 'remove', m });
        else this.change({ kind: 'move', m, position, to: verdict.to });
        if (this.pending.length >= this.s.maxInFlight) await this.commit();
        if (verdict.stop) {
          stopReason = this.s.signal?.aborted ? 'aborted' : 'stopped';
          break;
        }
      }
      await this.commit();
      if (this.unroutable && stopReason === 'end') stopReason = 'unroutable';
      const notExamined = exhausted ? 0 : Math.max(0, this.total - this.scanned);
      // Kept messages went to the back of a quorum queue: the unexamined ones follow them there.
      if (this.s.quorum && notExamined > 0 && this.copied > 0) await this.rotate(notExamined);
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
      // Settle what was decided before the error; closing the channel puts back the rest.
      await this.commit().catch(() => undefined);
      throw error;
    }
  }

  private interrupted(cause?: unknown): WalkInterruptedError {
    return new WalkInterruptedError(this.queue, this.closedReason ?? 'unknown reason', this.moved, this.removed, { cause });
  }

  private change(c: Change): void {
    if (this.pending.length === 0) this.oldestPending = Date.now();
    this.pending.push(c);
  }

  private keep(m: amqp.GetMessage): void {
    this.kept += 1;
    if (this.s.quorum) this.change({ kind: 'copy', m });
  }

  private async rotate(count: number): Promise<void> {
    for (let i = 0; i < count; i++) {
      const m = await this.ch.get(this.queue, { noAck: false });
      if (m === false) break;
      this.change({ kind: 'copy', m });
      if (this.pending.length >= this.s.maxInFlight) await this.commit();
    }
    await this.commit();
  }

  /** Publishes `to` with `mandatory`, waiting when the socket's buffer is full. */
  private async publish(to: MoveTarget): Promise<void> {
    const writable = this.ch.publish(to.exchange, to.routingKey, to.content, { ...to.properties, mandatory: true });
    if (!writable && !this.broken) {
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
  private copyOf(m: amqp.GetMessage): MoveTarget {
    return { exchange: '', routingKey: this.queue, content: m.content, properties: copyProperties(m.properties, refreshHeaders(m.properties.headers ?? {})) };
  }

  /**
   * Sends the pending batch (publishes, then acknowledgements) and commits it: the
   * broker applies all of it or, if the channel closes first, none of it.
   */
  private async commit(): Promise<void> {
    if (this.broken) throw this.interrupted();
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    for (const c of batch) {
      if (c.kind === 'copy' || c.kind === 'restore') await this.publish(this.copyOf(c.m));
      else if (c.kind === 'move') await this.publish(c.to);
      if (c.kind !== 'restore') this.ch.ack(c.m);
    }
    this.returns.length = 0;
    try {
      await (this.ch as unknown as RpcChannel).rpc(TX.commit, {}, TX.commitOk);
    } catch (error) {
      this.closedReason ??= messageText(error);
      throw this.interrupted(error);
    }
    for (const c of batch) {
      if (c.kind === 'remove') this.removed += 1;
      else if (c.kind === 'copy') this.copied += 1;
    }
    const moves = batch.filter((c): c is Extract<Change, { kind: 'move' }> => c.kind === 'move');
    if (this.returns.length === 0) {
      this.moved += moves.length;
      return;
    }
    // A move the broker returned: its original was acknowledged in the same commit, so
    // put it back in the queue (at its back) in the next one.
    const returned = this.returns.splice(0);
    for (const move of moves) {
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
        messageId: typeof move.m.properties.messageId === 'string' ? move.m.properties.messageId : undefined,
        error: `the broker returned it (${f.replyCode ?? 312} ${f.replyText ?? 'NO_ROUTE'}): no queue '${move.to.routingKey}' to route to via exchange '${f.exchange || '(default)'}'; it is parked again, at the back of the queue`,
      });
      this.change({ kind: 'restore', m: move.m });
    }
    await this.commit();
  }
}
