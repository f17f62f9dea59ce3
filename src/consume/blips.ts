/**
 * The blip memory: what this process knows of deliveries whose channel it saw close
 * (held in flight, acked without proof that the broker read the ack, or possibly in
 * transit), so that their redelivery is taken for a blip it lived through, not for a
 * death the crash-loop guard counts.
 */
import type * as amqp from 'amqplib';
import { deliveryKey } from './delivery.js';

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

/** One consumer's blip memory (its channels share it: a redelivery comes back on the channel after). */
export class BlipMemory {
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
  /** How many redeliveries nobody noted may be deliveries lost in transit at the last channel loss (see {@link channelLost}). */
  private inTransit: { count: number; until: number } | undefined;
  /** Channels whose loss was noted (a reattach and the close both note it). */
  private readonly transitNoted = new WeakSet<amqp.Channel>();

  /** `prefetch`: the consumer's, for how many deliveries a channel can have had in transit, and for the proof's request. */
  constructor(private readonly prefetch: number) {}

  /**
   * Notes what `ch` held unsettled as it closed (`held`), and what was acked on it
   * without proof that the broker read the ack: those redeliveries are blips, not deaths.
   */
  channelLost(ch: amqp.Channel, held: readonly amqp.ConsumeMessage[]): void {
    for (const msg of held) this.remember(msg);
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
      const unseen = Math.max(0, this.prefetch - held.length);
      if (unseen > 0) this.inTransit = { count: unseen, until: Date.now() + IN_TRANSIT_MS };
    }
  }

  /** Keeps an ack of `msg` on `ch` in doubt until the broker answers a request written after it. */
  ackWritten(ch: amqp.Channel, msg: amqp.ConsumeMessage): void {
    let unproven = this.unprovenAcks.get(ch);
    if (unproven === undefined) this.unprovenAcks.set(ch, (unproven = new UnprovenAcks()));
    unproven.add(deliveryKey(msg));
    this.askForProof(ch, unproven);
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

  /** Notes a delivery (or its key) whose redelivery will be a blip: one in flight at a loss, or put back never started. */
  remember(msgOrKey: amqp.ConsumeMessage | number): void {
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
  wasSeenInFlight(msg: amqp.ConsumeMessage): boolean {
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
}
