import type * as amqp from 'amqplib';

/** What {@link coalesceWrites} needs of the socket. */
interface Socket {
  write(chunk: unknown): boolean;
  cork(): void;
  uncork(): void;
  readonly writableLength: number;
  readonly writableHighWaterMark: number;
}

/** The parts of amqplib's connection that {@link coalesceWrites} uses; all private to amqplib. */
interface MuxedConnection {
  readonly muxer?: { _readIncoming?: (this: unknown) => void; out?: unknown };
  readonly stream?: Partial<Socket>;
}

const COALESCED = Symbol('warren.coalescedWrites');

function isSocket(s: Partial<Socket> | undefined): s is Socket {
  return s !== undefined && typeof s.write === 'function' && typeof s.cork === 'function' && typeof s.uncork === 'function' && typeof s.writableLength === 'number' && typeof s.writableHighWaterMark === 'number';
}

/**
 * Makes each pass of amqplib's frame multiplexer one socket write.
 *
 * amqplib queues every frame a channel sends (an ack, a publish's frames) and, once per
 * turn of the event loop, its multiplexer writes them to the socket one `write` at a
 * time, taking them from the channels in turn: a consumer whose handler is async acks in
 * many small passes, and each frame costs a system call. Corking the socket for the pass
 * sends the frames of one pass in one `writev`. Nothing is held past the pass, and a
 * heartbeat (written straight to the socket) never waits.
 *
 * The multiplexer stops a pass when a write says the socket is full, and serves the
 * channels that were waiting longest only in a pass that ends with room to spare. A
 * corked socket fills its buffer (16 KiB) long before the kernel would, so a write that
 * fills it sends what the pass has queued at once and tells the multiplexer there is
 * room again if the kernel took it: the multiplexer sees the socket full exactly when it
 * would without the cork, and a channel that only acks is not left behind one that
 * publishes large messages.
 *
 * amqplib does not publish these fields. When they are not there (another version), this
 * does nothing and returns false: the connection works as before, one write per frame.
 */
export function coalesceWrites(model: amqp.ChannelModel): boolean {
  const conn = (model as unknown as { connection?: MuxedConnection }).connection;
  const mux = conn?.muxer as (MuxedConnection['muxer'] & { [COALESCED]?: true }) | undefined;
  const stream = conn?.stream;
  if (!mux || !isSocket(stream)) return false;
  if (mux[COALESCED]) return true;
  const read = mux._readIncoming;
  if (typeof read !== 'function' || mux.out !== stream) return false;
  let corked = false;
  mux.out = {
    write(chunk: unknown): boolean {
      if (stream.write(chunk)) return true;
      if (!corked) return false;
      // Full only because it is corked: send this pass's frames now, and go on if the kernel took them.
      stream.uncork();
      stream.cork();
      return stream.writableLength < stream.writableHighWaterMark;
    },
  };
  mux._readIncoming = function readCorked(this: unknown): void {
    stream.cork();
    corked = true;
    try {
      read.call(this);
    } finally {
      corked = false;
      stream.uncork();
    }
  };
  mux[COALESCED] = true;
  return true;
}
