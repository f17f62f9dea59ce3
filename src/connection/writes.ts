import type * as amqp from 'amqplib';

/** The parts of amqplib's connection that {@link coalesceWrites} uses; all private to amqplib. */
interface MuxedConnection {
  readonly muxer?: { _readIncoming?: (this: unknown) => void };
  readonly stream?: { cork?: () => void; uncork?: () => void };
}

const COALESCED = Symbol('warren.coalescedWrites');

/**
 * Makes each pass of amqplib's frame multiplexer one socket write.
 *
 * amqplib queues every frame a channel sends (an ack, a publish's three frames) and, once
 * per turn of the event loop, its multiplexer writes them to the socket one `write` at a
 * time: a consumer whose handler is async acks in many small passes, and each frame costs
 * a system call. Corking the socket for the pass sends the frames of one pass in one
 * `writev`. Nothing is held past the pass: the order and timing of frames are as before,
 * and a heartbeat (written straight to the socket) never waits.
 *
 * amqplib does not publish these fields. When they are not there (another version), this
 * does nothing and returns false: warren works as before, with one write per frame.
 */
export function coalesceWrites(model: amqp.ChannelModel): boolean {
  const conn = (model as unknown as { connection?: MuxedConnection }).connection;
  const mux = conn?.muxer as (MuxedConnection['muxer'] & { [COALESCED]?: true }) | undefined;
  const stream = conn?.stream;
  if (!mux || !stream) return false;
  if (mux[COALESCED]) return true;
  const read = mux._readIncoming;
  const cork = stream.cork;
  const uncork = stream.uncork;
  if (typeof read !== 'function' || typeof cork !== 'function' || typeof uncork !== 'function') return false;
  mux._readIncoming = function readCorked(this: unknown): void {
    cork.call(stream);
    try {
      read.call(this);
    } finally {
      uncork.call(stream);
    }
  };
  mux[COALESCED] = true;
  return true;
}
