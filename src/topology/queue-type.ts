import type * as amqp from 'amqplib';
import { closeChannel } from '../connection/channel.js';
import type { QueueType } from './declaration.js';
import { parseInequivalent } from './apply.js';
import { parkedQueueArguments, QUEUE_TYPE_ARGUMENT } from './plan.js';

function hasCode(error: unknown, code: number): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Declares `queue` with the parked-queue arguments of `type` on a channel of its own; the refusal, if any. */
async function tryDeclare(model: amqp.ChannelModel, queue: string, type: QueueType): Promise<unknown> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  try {
    await ch.assertQueue(queue, { durable: true, arguments: { ...parkedQueueArguments(type) } });
    return undefined;
  } catch (error) {
    return error ?? new Error('declaration refused');
  } finally {
    await closeChannel(ch);
  }
}

/**
 * The type a parked queue really has, asked of the broker over AMQP, for the walks that
 * must follow it (a classic walk hands kept messages back, and a quorum queue counts each
 * return against its delivery limit). Every queue warren declares states its type, so a
 * declaration of the parked-queue arguments of `declared` that the broker accepts proves
 * it: the usual case, one declaration that changes nothing. A refusal that names
 * `x-queue-type` says the type the queue has (a queue that stores none is classic); a
 * refusal for another argument is answered by trying the other type's arguments.
 *
 * Resolves with `declared` when the queue does not exist (the walk reports that), when
 * the user may not declare queues (no configure permission), or when neither type's
 * arguments match (drift that {@link planTopology} reports). Changes nothing on the
 * broker: the queue exists, and a declaration that matches it is a no-op.
 */
export async function parkedQueueType(model: amqp.ChannelModel, queue: string, declared: QueueType): Promise<QueueType> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  try {
    await ch.checkQueue(queue);
  } catch (error) {
    if (hasCode(error, 404)) return declared;
    throw error;
  } finally {
    await closeChannel(ch);
  }
  const refused = await tryDeclare(model, queue, declared);
  if (refused === undefined || !hasCode(refused, 406)) return declared;
  const difference = parseInequivalent(messageOf(refused));
  if (difference?.argument === QUEUE_TYPE_ARGUMENT) {
    const actual = difference.actual;
    if (actual === undefined || actual === 'classic') return 'classic';
    if (actual === 'quorum') return 'quorum';
    return declared;
  }
  const other: QueueType = declared === 'quorum' ? 'classic' : 'quorum';
  return (await tryDeclare(model, queue, other)) === undefined ? other : declared;
}
