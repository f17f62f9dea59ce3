import type * as amqp from 'amqplib';

/**
 * Closes a channel, and settles once it is closed, whichever way that happens; never
 * rejects.
 *
 * amqplib's `channel.close()` settles only when the broker's `channel.close-ok` is read.
 * If the connection begins to close between the request and the reply, amqplib drops
 * the reply (it reads nothing but the connection's own frames once closing), and the
 * promise never settles, though the channel does emit 'close'. Awaiting `close()` alone
 * there hangs whoever waits: a ready hook, and `close()` of the connection after it.
 */
export function closeChannel(ch: amqp.Channel): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      ch.removeListener('close', done);
      resolve();
    };
    ch.once('close', done);
    try {
      ch.close().then(done, done);
    } catch {
      done();
    }
  });
}
