import type * as amqp from 'amqplib';

/**
 * Closes a channel, and settles once it is closed, whichever way that happens; never
 * rejects.
 *
 * amqplib's `channel.close()` settles only when the broker's `channel.close-ok` is read.
 * When the connection is lost first, or begins to close between the request and the
 * reply (it then reads nothing but its own frames), the promise never settles, though
 * the channel does emit 'close'. So the 'close' event ends the wait too, and, failing
 * all, a bound of 10 s: awaiting `close()` alone would hang whoever waits (a walk, a
 * ready hook, and `close()` of the connection after it).
 */
export function closeChannel(ch: amqp.Channel): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      ch.removeListener('close', done);
      resolve();
    };
    const timer = setTimeout(done, 10_000);
    timer.unref();
    ch.once('close', done);
    try {
      ch.close().then(done, done);
    } catch {
      done();
    }
  });
}
