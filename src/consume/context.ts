// What a handler is given. Its own file so that the retry table's policy (which calls
// the user's functions with the same context) depends on it without depending on the
// consumer's options, which name that policy.
import type * as amqp from 'amqplib';

/** What a handler gets beside the payload. */
export interface MessageContext<Tx = undefined> {
  /** The producer's message id (or the one `messageIdFrom` found); the same across retries and replays. */
  readonly messageId: string | undefined;
  /** The routing key the message was first published with. */
  readonly routingKey: string;
  readonly headers: Readonly<Record<string, unknown>>;
  /** This run's number, 1 on the first delivery. */
  readonly attempt: number;
  /** Aborted when the handler times out or the consumer is closed past its deadline. */
  readonly signal: AbortSignal;
  /** The idempotency guard's transaction (the backend's own handle), when one is set. */
  readonly tx: Tx;
  /** The delivery as amqplib gave it. */
  readonly raw: amqp.ConsumeMessage;
}

/** A message handler: resolve to ack, throw to retry or park. */
export type Handler<T, Tx = undefined> = (payload: T, context: MessageContext<Tx>) => unknown;
