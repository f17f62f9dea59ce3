import { createHash } from 'node:crypto';
import { HEADER } from '../headers.js';
import type { ParkedMessage } from './message.js';

/**
 * What tells one parked message from another, for operations that decide per message
 * rather than by position or count (a purge deletes the messages it counted and showed,
 * not "that many from the head"). Pure.
 *
 * The message id, with a digest of the body and of the failure headers warren wrote
 * when it parked the message (park time, last failure, replays): the same message
 * parked again after a replay is another parked message. Messages without an id are
 * told apart by the rest. Nothing that changes when a quorum queue is rewritten enters
 * it (the broker's delivery count and dead-letter headers, which a copy does not carry).
 * Two messages with the same identity are interchangeable: operations count them, so
 * a purge that counted one of two deletes one.
 *
 * @example
 * const targets = (await listParked(model, billing, { filter })).messages.map(parkedIdentity);
 * await purgeParked(model, billing, { filter, only: targets });
 */
export function parkedIdentity(m: ParkedMessage): string {
  const h = createHash('sha256');
  for (const part of [HEADER.parkedAt, HEADER.lastFailedAt, HEADER.replays].map((k) => m.headers[k])) {
    const text = part === undefined || part === null ? '' : Buffer.isBuffer(part) ? part.toString('utf8') : String(part);
    h.update(`${text.length}:${text};`);
  }
  h.update(m.content);
  return `${m.messageId === undefined ? '' : `${m.messageId} `}${h.digest('hex').slice(0, 32)}`;
}
