/**
 * Coalesced acks: the deliveries of one channel whose handlers succeeded are acked
 * together, once per turn of the event loop, with one `basic.ack` (`multiple`) up to the
 * lowest delivery still in progress. A delivery still running, waiting, being moved
 * (whose copy is not yet confirmed: DESIGN invariant 6) or on its way to a nack blocks
 * the line: a multiple ack never reaches it or anything after it. Deliveries that
 * succeeded behind a blocker are acked one by one in the same turn, so a slow handler
 * never holds the others' prefetch slots.
 */
import type * as amqp from 'amqplib';
import { setImmediate } from 'node:timers';

/** What the line needs of a delivery (the consumer's `Delivery`). */
export interface AckItem {
  readonly msg: amqp.ConsumeMessage;
  /** Acked, nacked or rejected: nothing more is written for it. */
  settled: boolean;
  /** Its handler succeeded and its ack waits for the next flush. */
  ackable: boolean;
}

/** One channel's deliveries in the order the broker sent them (delivery tags rise), until settled. */
export class AckLine<Delivery extends AckItem = AckItem> {
  /** Deliveries from {@link head} on, oldest first; entries before `head` are gone. */
  private line: (Delivery | undefined)[] = [];
  private head = 0;
  /** Deliveries whose handler succeeded, not yet acked. */
  private pending: Delivery[] = [];
  private scheduled = false;
  private readonly flushSoon = (): void => this.flush();

  /**
   * `acked` is told of each delivery once its ack is written. `bound`: entries kept
   * behind a blocker before settled ones are dropped from the middle (the prefetch and then some).
   */
  constructor(
    private readonly ch: amqp.Channel,
    private readonly acked: (d: Delivery) => void,
    private readonly bound: number,
  ) {}

  /** A delivery the broker sent on this channel (in order). */
  arrived(d: Delivery): void {
    this.line.push(d);
    if (this.line.length - this.head > this.bound) this.trim();
  }

  /** `d`'s handler succeeded: acked at the end of this turn of the event loop. */
  ackSoon(d: Delivery): void {
    d.ackable = true;
    this.pending.push(d);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushSoon);
    }
  }

  /** The deliveries whose ack is not written yet: what the channel holds unsettled for them. */
  unacked(): readonly Delivery[] {
    return this.pending.filter((d) => !d.settled);
  }

  /**
   * Writes the acks of the deliveries that succeeded: one multiple ack for those before
   * the first delivery still in progress, one ack each for those after it. On a closed
   * channel nothing is written: the broker has them back, and they are noted as held.
   */
  flush(): void {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    // The line's prefix that is settled or succeeded: its last success is the multiple ack's tag.
    let last: Delivery | undefined;
    while (this.head < this.line.length) {
      const d = this.line[this.head] as Delivery;
      if (!d.settled && !d.ackable) break;
      if (!d.settled) last = d;
      this.line[this.head] = undefined;
      this.head += 1;
    }
    this.compact();
    const pending = this.pending;
    this.pending = [];
    const upTo = last === undefined ? -1 : last.msg.fields.deliveryTag;
    // Every frame first, the bookkeeping after: a listener that throws cannot leave a
    // success behind it unacked.
    const written: Delivery[] = [];
    try {
      if (last !== undefined) this.ch.ack(last.msg, true);
      for (const d of pending) {
        if (d.settled) continue;
        if (d.msg.fields.deliveryTag > upTo) this.ch.ack(d.msg);
        d.settled = true;
        written.push(d);
      }
    } catch {
      // The channel closed: the broker redelivers what was not acked; its close noted them.
      for (const d of pending) if (!d.settled) d.ackable = false;
    }
    for (const d of written) this.acked(d);
  }

  /** Drops the settled prefix, and settled entries in the middle when a blocker holds many behind it. */
  private trim(): void {
    while (this.head < this.line.length && (this.line[this.head] as Delivery).settled) {
      this.line[this.head] = undefined;
      this.head += 1;
    }
    if (this.line.length - this.head > this.bound) {
      this.line = this.line.slice(this.head).filter((d) => d !== undefined && !d.settled);
      this.head = 0;
    }
    this.compact();
  }

  private compact(): void {
    if (this.head >= 1024 && this.head * 2 >= this.line.length) {
      this.line = this.line.slice(this.head);
      this.head = 0;
    }
  }
}
