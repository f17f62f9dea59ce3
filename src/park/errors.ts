import { WarrenError } from '../errors.js';

/**
 * A queue the topology declares does not exist on the broker. Its code is
 * `TOPOLOGY_DRIFT`: the broker differs from the declaration.
 */
export class QueueNotFoundError extends WarrenError {
  readonly queue: string;
  constructor(queue: string, options?: { cause?: unknown }) {
    super(
      'TOPOLOGY_DRIFT',
      `Queue '${queue}' does not exist on the broker. Declare the topology first (\`warren topology apply\`, or start a consumer, which declares it).`,
      options,
    );
    this.queue = queue;
  }
}

/**
 * The channel closed while a parked queue was being worked through (broker restart,
 * connection loss, `consumer_timeout`). Nothing is lost: what was moved or removed had
 * been confirmed first, and the broker returns every unacknowledged message to the queue.
 */
export class WalkInterruptedError extends WarrenError {
  readonly queue: string;
  /** Messages moved (confirmed, then acknowledged) before the channel closed. */
  readonly moved: number;
  /** Messages removed before the channel closed. */
  readonly removed: number;
  constructor(queue: string, detail: string, moved: number, removed: number, options?: { cause?: unknown }) {
    super(
      'CLOSED',
      `The channel closed while working through '${queue}' (${detail}). ${moved} message(s) had been moved and ${removed} removed; every other message is back in the queue, because the broker returns unacknowledged messages. Run the command again to continue.`,
      options,
    );
    this.queue = queue;
    this.moved = moved;
    this.removed = removed;
  }
}
