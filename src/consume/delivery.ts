/**
 * One delivery as the consumer carries it from its arrival to its outcome, and the key
 * it is known by across redeliveries.
 */
import { createHash, randomBytes } from 'node:crypto';
import type * as amqp from 'amqplib';
import type { DeliveryTrace } from '../trace/index.js';
import type { AckLine } from './acks.js';
import type { HandlerRun } from './handler-run.js';

/** What a delivery's id is read from. */
export interface Identified {
  readonly msg: amqp.ConsumeMessage;
  /** The id `messageIdFrom` found, for a message without a `message-id` property. */
  foundId: string | undefined;
  /** The id made up for the retry-table row of a message that has none to be found. */
  madeUpId: string | undefined;
}

/** One delivery, from its arrival to its outcome. Every field is declared here, so its shape never changes on the way. */
export class Delivery implements Identified {
  /** The id `messageIdFrom` found, for a message without a `message-id` property. */
  foundId: string | undefined = undefined;
  /** The id made up for the retry-table row of a message that has none to be found (see DeliveryPath). */
  madeUpId: string | undefined = undefined;
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
  /** Its handler succeeded and its ack waits in {@link line} for the end of the turn (`settled` once written). */
  ackable = false;
  /** The outcome its coalesced ack reports: `acked`, or `duplicate` when the guard skipped the work. */
  ackAs: 'acked' | 'duplicate' = 'acked';
  /** performance.now() when its decision to ack was made, for the outcome's `durationMs`. */
  doneAt = 0;
  /**
   * Its work is done whether or not its own ack reached the broker: `ack` once its
   * handler succeeded (or the guard found the work done), `moved` once its copy was
   * confirmed. A redelivery held behind it is settled by this.
   */
  done: 'ack' | 'moved' | undefined = undefined;
  /**
   * Redeliveries of this same message that arrived on a newer channel while it was still
   * running (the broker took it back at a consumer timeout or a channel loss): held, never
   * run beside it, and settled by its outcome when it ends.
   */
  twins: Delivery[] | undefined = undefined;

  constructor(
    readonly msg: amqp.ConsumeMessage,
    readonly ch: amqp.Channel,
    /** Its channel's acks, when they are coalesced. */
    readonly line: AckLine<Delivery> | undefined,
  ) {}
}

/** The delivery's message id: the producer's property, else what `messageIdFrom` found, else the one its retry-table row was given. */
export function idOf(d: Identified): string | undefined {
  const own = d.msg.properties.messageId as string | undefined;
  return own !== undefined && own !== '' ? own : (d.foundId ?? d.madeUpId);
}

/**
 * Identifies a delivery across redeliveries, as a number: a 53-bit hash of its message
 * id, else (negative) 48 bits of the SHA-1 of its routing key and body. A number, not a
 * string: every ack keeps its key for a second or two (see `UnprovenAcks`), and
 * numbers in a Float64Array keep nothing alive on the heap. Two messages share a key
 * with odds of about one in 10^12 for 10,000 keys held; in such a pair one message's
 * redelivery would be taken for a blip and the other's blip counted as a death. The
 * hash is seeded at random per process, so a producer cannot choose ids that clash.
 */
export function deliveryKey(msg: amqp.ConsumeMessage): number {
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
