/**
 * Header names warren writes. None starts with `x-`: RabbitMQ 4 ignores an
 * `x-death` that a client republishes, so warren keeps its own count and context.
 */
export const HEADER = {
  /** Failed handler runs so far (0 or absent on the first delivery). */
  attempts: 'warren-attempts',
  /** When the producer says the event happened (ISO 8601). */
  occurredAt: 'warren-occurred-at',
  /** Exchange the message was first published to. */
  exchange: 'warren-exchange',
  /** Routing key the message was first published with. */
  routingKey: 'warren-routing-key',
  /** Consumer that failed on it. */
  consumer: 'warren-consumer',
  /** First and last failure (ISO 8601). */
  firstFailedAt: 'warren-first-failed-at',
  lastFailedAt: 'warren-last-failed-at',
  /** The last failure: error class (its `name`), message and first stack frames, truncated. */
  errorClass: 'warren-error-class',
  errorMessage: 'warren-error-message',
  errorStack: 'warren-error-stack',
  /** Why a message was parked: see {@link ParkReason}. */
  parkedReason: 'warren-parked-reason',
  parkedAt: 'warren-parked-at',
  /** Deliveries that ended with no outcome (the process died), on classic queues. */
  redeliveries: 'warren-redeliveries',
  /** Replays of this message from the parked queue, and the last one's time. */
  replays: 'warren-replays',
  replayedAt: 'warren-replayed-at',
  /** Times the message went to the retry table (waiting for a condition). */
  waits: 'warren-waits',
  /** The dependency and tenant it last waited for. */
  dependency: 'warren-dependency',
  tenant: 'warren-tenant',
} as const;

/** Why a message went to the parked queue. */
export type ParkReason =
  | 'permanent-error'
  | 'max-attempts'
  | 'invalid-json'
  | 'invalid-payload'
  | 'missing-message-id'
  | 'crash-loop'
  /** An operator sent it from the retry table. */
  | 'operator';

/** Longest error message kept in a header; longer ones are cut with a marker. */
export const MAX_ERROR_MESSAGE_CHARS = 2000;
/** Stack frames kept in a header. */
export const MAX_STACK_FRAMES = 5;
