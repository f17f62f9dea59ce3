import type { Logger } from '../logger.js';
import type { BreakerOptions, ConsumerControl, ControlOptions } from '../breaker/index.js';
import type { RetryTablePolicy } from '../retry-table/wait.js';
import type { Classifier } from './classify.js';
import type { Decoder } from './decode.js';
import type { MessageIdSource } from './message-id.js';
import type { StandardSchemaV1 } from './schema.js';

/**
 * Runs a handler's work exactly once per `(messageId, consumer)`: the store opens a
 * transaction, inserts the marker row first, runs `work` with the transaction, and
 * commits both or neither. Implemented by warren's SQLite and PostgreSQL stores.
 */
export interface IdempotencyGuard<Tx> {
  /**
   * @param signal aborted when the handler runs past its `timeoutMs` (or the consumer
   * closes past its deadline): the guard then rolls the transaction back (or discards
   * its connection) and rejects at once, even if `work` never settles, and any later use
   * of the `tx` it gave fails.
   * @returns `'done'` when `work` ran and committed, `'duplicate'` when the marker
   * existed and `work` did not run. Throws what `work` throws (after rolling back),
   * or a {@link StoreUnavailableError} when the database cannot be reached or another
   * delivery of the same message still runs (the consumer holds the message and tries
   * again without counting an attempt).
   */
  run(messageId: string, consumer: string, work: (tx: Tx) => Promise<void>, signal?: AbortSignal): Promise<'done' | 'duplicate'>;
}

export type { Handler, MessageContext } from './context.js';

/** Options of one consumer. */
export interface ConsumerOptions<T = unknown, Tx = undefined> {
  /**
   * Unacked deliveries the broker sends ahead.
   * @default 20
   */
  prefetch?: number;
  /**
   * Handlers running at once (at most `prefetch`).
   * @default 10
   */
  concurrency?: number;
  /**
   * A handler still running after this is counted as a transient failure (its
   * `signal` is aborted). Keep it well below the broker's `consumer_timeout` (30 min).
   * @default 60000
   */
  timeoutMs?: number;
  /**
   * With an `idempotency` guard: how long warren's COMMIT of the handler's transaction
   * may take once the handler returned. The handler's `timeoutMs` stops when it returns,
   * so a slow COMMIT of work that is done is never a timed-out handler. A COMMIT still
   * running past this is a database outage for the delivery: it goes round the first
   * retry tier without counting an attempt, and its return finds the idempotency marker
   * (a duplicate, acked) or, if the COMMIT failed, does the work.
   * @default 30000
   */
  commitTimeoutMs?: number;
  /**
   * How the body becomes the payload: `'json'`, `'text'` (in the content type's charset,
   * else UTF-8), `'buffer'` (a copy of the bytes), or a `Codec`. A body the decoder
   * cannot read is parked at once (`invalid-json` for JSON, else `invalid-payload`, naming
   * the decoder); retried and parked copies keep the original bytes and properties.
   * @default 'json'
   */
  decoder?: Decoder;
  /**
   * Where the message id comes from when the producer did not set the `message-id`
   * property (a producer that is not warren): `{ header: 'x-request-id' }`,
   * `{ field: 'order.id' }` (in the decoded payload), or `(msg, payload) => id`. The
   * handler's `ctx.messageId` and the idempotency guard use it. With a guard, a message
   * whose id cannot be found there is parked (`missing-message-id`, naming the source).
   * @default none: a message without the property has no id (parked when a guard is set)
   */
  messageIdFrom?: MessageIdSource;
  /** Validates the payload (any Standard Schema, e.g. zod), after the decoder; a failure parks at once. */
  schema?: StandardSchemaV1<unknown, T>;
  /** Marks errors permanent or transient before warren's own rules. */
  classify?: Classifier;
  /** Runs each handler in a database transaction with a unique `(messageId, consumer)` row. */
  idempotency?: IdempotencyGuard<Tx>;
  /**
   * Declares that the handler uses `ctx.tx`, the idempotency guard's transaction: the
   * consumer is then refused at start when no `idempotency` guard is set, with an
   * {@link InvalidOptionError} naming it, instead of a `TypeError` at every delivery
   * (which is transient: retried, then parked). The types catch this where the handler
   * and its options meet in one `consume()` call; this catches it where they do not
   * (JavaScript, handlers and options wired apart: the NestJS module checks a
   * `@WarrenConsumer(name, { requiresTx: true })` against its `store`).
   * @default false
   */
  requiresTx?: boolean;
  /**
   * Where messages wait for a condition or a person: a handler that throws
   * `WaitForConditionError`, or an error a rule names, becomes a row in this table
   * (acked once the row commits), which a scheduler sends back later.
   *
   * @example
   * { retryTable: { table: store.retryTable, rules: [{ when: CarrierDownError, dependency: 'carrier' }] } }
   */
  retryTable?: RetryTablePolicy<T>;
  /**
   * On `close()`, how long in-flight handlers may run before the channel is closed
   * (their messages are then redelivered). Each step of `close()` that waits for the
   * broker (cancelling the consumer, closing the channel) also waits at most this long,
   * but no less than 1 s and no more than 5 s: a broker that stops answering cannot
   * hold `close()` forever.
   * @default 10000
   */
  shutdownTimeoutMs?: number;
  /**
   * How long a message is held (unacked) while the database is unreachable before
   * it is sent to the first retry tier without counting an attempt.
   * @default 300000
   */
  storeOutageHoldMs?: number;
  /**
   * Stops taking messages while a dependency is down, instead of failing each one: `true`
   * for the defaults (open after 5 transient failures in a row; probe one message after
   * 1 s, doubling to 30 s), or options naming health checks to follow. Off by default:
   * with it on, a bug that throws on every message of one kind stops the whole consumer
   * rather than parking those messages, so each team chooses it per consumer. See docs/breaker.md.
   * @default false
   *
   * @example
   * { breaker: { health: store.retryTable.health({ carrier: 'http://carrier/health' }), dependencies: ['carrier'] } }
   */
  breaker?: BreakerOptions | boolean;
  /**
   * Where this consumer's hand pauses are kept for every process: `store.control`. The
   * consumer reads its row at its start and then every `intervalMs`; a pause from
   * `warren consumer pause`, the console or `store.control.pause()` stops its intake as
   * `consumer.pause()` does, and only a resume there lifts it (never the breaker, never
   * `consumer.resume()`). A store that cannot be read changes nothing. See docs/breaker.md.
   * @default none: only `consumer.pause()` pauses
   *
   * @example
   * { control: store.control }
   * { control: { source: store.control, intervalMs: 500 } }
   */
  control?: ConsumerControl | ControlOptions;
  /** @default the Warren's logger */
  logger?: Logger;
  /**
   * Called with every delivery's outcome. Unlike `consumer.on('outcome')`, which can
   * only be attached once `consume()` has returned, this sees the very first deliveries.
   */
  onOutcome?: (outcome: Outcome) => void;
}

/**
 * An outcome a consumer reports for each delivery. `durationMs` is the time from the
 * start of processing (decode, handler, the move) to the outcome; absent for a message
 * put back unstarted at shutdown.
 */
export type Outcome = { readonly durationMs?: number } & (
  | { readonly kind: 'acked'; readonly messageId: string | undefined }
  | { readonly kind: 'duplicate'; readonly messageId: string | undefined }
  | { readonly kind: 'retried'; readonly messageId: string | undefined; readonly attempts: number; readonly queue: string; readonly error: unknown }
  | { readonly kind: 'parked'; readonly messageId: string | undefined; readonly reason: string; readonly attempts: number; readonly error: unknown }
  | {
      readonly kind: 'waiting';
      readonly messageId: string | undefined;
      readonly dependency: string;
      readonly tenant: string | null;
      /** The retry-table row's id. */
      readonly row: string;
      /** True when a pause in force holds the row. */
      readonly paused: boolean;
      readonly nextAttemptAt: Date | null;
      readonly error: unknown;
    }
  | { readonly kind: 'requeued'; readonly messageId: string | undefined }
  | { readonly kind: 'redelivery-moved'; readonly messageId: string | undefined; readonly redeliveries: number }
);

/** Running totals of a consumer's outcomes. */
export interface ConsumerStats {
  acked: number;
  duplicate: number;
  retried: number;
  parked: number;
  /** Messages stored in the retry table (waiting for a condition). */
  waiting: number;
  requeued: number;
  redeliveryMoved: number;
  inFlight: number;
  /**
   * Times the broker cancelled this consumer (`basic.cancel`: a consumer timeout on a
   * RabbitMQ 4.3 quorum queue, a deleted queue) or closed its channel because a delivery
   * outlived the consumer timeout (RabbitMQ before 4.3). The consumer re-attaches each time.
   */
  brokerCancels: number;
  /** Fault events (the topology's `faults`) that could not be published; each is logged, and its message is parked all the same. */
  faultEventsFailed: number;
}
