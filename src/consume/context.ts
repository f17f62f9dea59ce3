// What a handler is given. Its own file so that the retry table's policy (which calls
// the user's functions with the same context) depends on it without depending on the
// consumer's options, which name that policy.
import type * as amqp from 'amqplib';

/**
 * What every handler gets beside the payload. A handler under an idempotency guard also
 * gets the guard's transaction: see {@link MessageContext}.
 */
export interface DeliveryContext {
  /** The producer's message id (or the one `messageIdFrom` found); the same across retries and replays. */
  readonly messageId: string | undefined;
  /** The routing key the message was first published with. */
  readonly routingKey: string;
  readonly headers: Readonly<Record<string, unknown>>;
  /** This run's number, 1 on the first delivery. */
  readonly attempt: number;
  /** Aborted when the handler times out or the consumer is closed past its deadline. */
  readonly signal: AbortSignal;
  /** The delivery as amqplib gave it. */
  readonly raw: amqp.ConsumeMessage;
}

/** What a handler under an idempotency guard gets besides: the guard's transaction. */
export interface TransactionContext<Tx> {
  /**
   * The idempotency guard's transaction (the backend's own handle: a `pg` client inside
   * BEGIN, the better-sqlite3 `Database` inside BEGIN IMMEDIATE). Its writes commit or
   * roll back with the message's `(messageId, consumer)` row.
   */
  readonly tx: Tx;
}

/**
 * What a handler gets beside the payload: the {@link DeliveryContext}, and with an
 * idempotency guard its transaction as `tx`. `Tx` is the guard's transaction type;
 * without a guard (`Tx` undefined, the default) there is no `tx`, so a handler that
 * reads it does not compile where no guard is configured. `MessageContext<unknown>`
 * fits every handler's context, with a guard or without (its `tx` may be absent):
 *
 * @example
 * await warren.consume('receipts', async (paid: Paid, ctx) => {
 *   await ctx.tx.query('INSERT INTO receipts ...');   // ctx: MessageContext<pg.PoolClient>
 * }, { idempotency: store.idempotency() });
 * await warren.consume('email', async (order: Order, ctx) => {
 *   ctx.tx;                                          // error: no guard, no tx
 * });
 */
export type MessageContext<Tx = undefined> = [Tx] extends [undefined]
  ? DeliveryContext
  : unknown extends Tx
    ? // `MessageContext<unknown>`: any handler's context, with a guard or without one.
      DeliveryContext & Partial<TransactionContext<Tx>>
    : DeliveryContext & TransactionContext<Tx>;

/** A message handler: resolve to ack, throw to retry or park. */
export type Handler<T, Tx = undefined> = (payload: T, context: MessageContext<Tx>) => unknown;
