/**
 * A move between queues: the copy published with a confirm first, the original acked
 * second (DESIGN invariant 6), tried again while the broker refuses the copy, bounded.
 */
import type * as amqp from 'amqplib';
import { ClosedError, PublishNotConfirmedError, UnroutableError } from '../errors.js';
import { HEADER } from '../headers.js';
import { backoffDelay } from '../connection/index.js';
import { declareTopology } from '../topology/apply.js';
import { describeFailure } from '../park/failure.js';
import { copyProperties as copyMessageProperties, hasBrokerHeader, withoutBrokerHeaders } from '../park/message.js';
import type { Decision } from './contract.js';
import { minimalHeaders } from './copy-headers.js';
import { idOf, type Delivery } from './delivery.js';
import { decideFor, errorText, orTimeout, type ConsumerParts } from './parts.js';
import { logUnencodable, oversizeHeaders } from './path.js';
import type { Outcome } from './types.js';
import type { PublishKind } from '../publish/publisher.js';

/** How long a move is tried again while the broker refuses the copy, before the delivery is nacked with requeue. */
const MOVE_GIVE_UP_MS = 5 * 60_000;

/** What a move needs of the settler that asked for it. */
export interface MoveSettling {
  ack(d: Delivery): boolean;
  count(outcome: Outcome, d?: Delivery): void;
  apply(d: Delivery, headers: Record<string, unknown>, decision: Decision): Promise<void> | undefined;
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
export async function moveCopy<T, Tx>(settler: MoveSettling, parts: ConsumerParts<T, Tx>, d: Delivery, queue: string, headers: Record<string, unknown>, intended: Decision): Promise<boolean> {
  const { logger, name } = parts;
  let target = queue;
  let table = d.trace?.headers(headers) ?? headers;
  if (hasBrokerHeader(table)) table = withoutBrokerHeaders(table);
  let minimal = false;
  let fate = intended;
  const fallBack = (why: string): void => {
    logUnencodable(parts, idOf(d), queue, why);
    fate = decideFor(parts, d, headers, 0, { kind: 'unencodable', intended });
    target = parts.declaration.parkedQueue;
    table = minimalHeaders(fate as Extract<Decision, { kind: 'park' }>, (d.msg.properties.headers ?? {}) as Record<string, unknown>, d.msg.fields, name, new Date());
    minimal = true;
  };
  const oversize = oversizeHeaders(table);
  if (oversize !== undefined) fallBack(oversize);
  const giveUpAt = Date.now() + MOVE_GIVE_UP_MS;
  for (let attempt = 1; ; attempt++) {
    if (!parts.current(d.ch)) return false; // its channel is gone: the broker redelivers it
    if (Date.now() > giveUpAt) {
      // Bounded: well before the broker's consumer timeout (30 min) closes the channel
      // and takes every other delivery on it back too.
      logger.error(`could not move a message for ${MOVE_GIVE_UP_MS / 60_000} minutes; nacked with requeue, so it will be delivered again`, { consumer: name, queue: target, messageId: idOf(d) });
      await settler.apply(d, headers, decideFor(parts, d, headers, 0, { kind: 'move-failed' }));
      return false;
    }
    const landed = (): boolean => {
      d.done = 'moved';
      const acked = settler.ack(d);
      if (!minimal) return acked;
      // Parked instead of moved as asked: counted here, and the caller's outcome is not.
      if (acked) settler.count({ kind: 'parked', messageId: idOf(d), reason: String(table[HEADER.parkedReason]), attempts: 'attempts' in fate ? fate.attempts : 0, error: describeFailure('error' in fate ? fate.error : undefined) }, d);
      return false;
    };
    try {
      await parts.publisher.send({ exchange: '', routingKey: target, content: d.msg.content, properties: copyProperties(d.msg, table, true) }, kindOf(parts, target));
      return landed();
    } catch (error) {
      if (error instanceof ClosedError) return false;
      if (error instanceof PublishNotConfirmedError && error.late !== undefined) {
        // The copy was written and its channel is open: it may still land. Writing
        // another now would add a copy per timeout for as long as the broker is slow,
        // so wait for the broker's answer (bounded by the move's give-up time).
        logger.warn('no confirm yet for a moved copy; waiting for the broker\'s answer before writing another', { consumer: name, queue: target, attempt, messageId: idOf(d) });
        const answer = await orTimeout(error.late, giveUpAt - Date.now());
        if (answer === 'confirmed') {
          if (!parts.current(d.ch)) return false; // its channel is gone: the broker redelivers it (a duplicate at most)
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
      logger.error('could not move a message; it stays unacked and the move is tried again', { consumer: name, queue: target, attempt, error: errorText(error) });
      if (!parts.current(d.ch)) return false; // its channel is gone: the broker redelivers it
      if (error instanceof UnroutableError) {
        // Someone deleted a retry or parked queue: declare this consumer's queues again.
        await parts.connection
          .waitReady(5000)
          .then((model) => declareTopology(model, parts.topology, name))
          .catch((e: unknown) => logger.error('could not declare the queues again', { consumer: name, error: errorText(e) }));
      }
      await new Promise((r) => setTimeout(r, backoffDelay(attempt, 200, 5000)));
    }
  }
}

/** What a copy to `queue` is, for the publish metrics: a park, a put-back into the work queue (the crash-loop guard), or a retry. */
function kindOf<T, Tx>(parts: ConsumerParts<T, Tx>, queue: string): PublishKind {
  if (queue === parts.declaration.parkedQueue) return 'park';
  return queue === parts.declaration.queue ? 'put-back' : 'retry';
}

/** The properties of a delivery for its copy in another queue (no expiration: a copy waits as long as its queue says). */
export function copyProperties(msg: amqp.ConsumeMessage, headers: Record<string, unknown>, owned = false): amqp.Options.Publish {
  return copyMessageProperties(msg.properties, headers, owned) as amqp.Options.Publish;
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
