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
  /**
   * Set on a message parked with minimal metadata: the names of the producer's headers
   * that were dropped because no header table that held them could be encoded.
   */
  droppedHeaders: 'warren-dropped-headers',
  /** On a message an operator edited in the archive and sent again: the original message id. */
  editedFrom: 'warren-edited-from',
  /** On a message replayed from the archive: the archive row it was sent from. */
  archiveRow: 'warren-archive-row',
} as const;

/** Why a message went to the parked queue. */
export type ParkReason =
  | 'permanent-error'
  | 'max-attempts'
  | 'invalid-json'
  | 'invalid-payload'
  | 'missing-message-id'
  | 'crash-loop'
  /** warren's failure headers would not fit the message's header table (the producer's own headers are near the limit). */
  | 'unencodable-headers'
  /** Code in the failure path threw (a classifier, a schema, a logger, a bug): parked with minimal metadata rather than left unsettled. */
  | 'failure-path-error'
  /** An operator sent it from the retry table. */
  | 'operator';

/** Longest error message kept in a header; longer ones are cut with a marker. */
export const MAX_ERROR_MESSAGE_CHARS = 2000;
/** Stack frames kept in a header. */
export const MAX_STACK_FRAMES = 5;
/** Longest stack frame kept. */
export const MAX_STACK_FRAME_CHARS = 300;
/** Longest error class kept (an error's `name` can be anything, of any length). */
export const MAX_ERROR_CLASS_CHARS = 200;
/** Longest routing key or exchange name AMQP allows (a short string): longer header values are forged, and ignored. */
export const MAX_NAME_BYTES = 255;
/**
 * Largest header table warren publishes, in encoded bytes. amqplib encodes a header table
 * into a 64 KiB buffer and refuses a larger one; a little is kept back for safety.
 */
export const MAX_HEADER_TABLE_BYTES = 65_000;
