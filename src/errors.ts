/**
 * Every error warren throws is a {@link WarrenError} with a stable `code`.
 * Subclasses carry the context an operator needs (queue, message id, option name)
 * and say what to do next.
 */
export type WarrenErrorCode =
  | 'INVALID_OPTION'
  | 'TOPOLOGY_DRIFT'
  | 'EXCHANGE_NOT_FOUND'
  | 'UNROUTABLE'
  | 'PUBLISH_NACKED'
  | 'PUBLISH_NOT_CONFIRMED'
  | 'PUBLISH_NOT_SENT'
  | 'BROKER_UNREACHABLE'
  | 'CLOSED'
  | 'PERMANENT'
  | 'HANDLER_TIMEOUT'
  | 'INVALID_PAYLOAD'
  | 'UNKNOWN_CONSUMER'
  | 'CONSUMER_HANDLERS'
  | 'STORE_UNAVAILABLE'
  | 'STORE'
  | 'WAIT_FOR_CONDITION'
  | 'UNKNOWN_DEPENDENCY'
  | 'UNSUPPORTED_BROKER';

/** Base class of every error warren throws. */
export class WarrenError extends Error {
  /** Stable, machine-readable code; safe to switch on. */
  readonly code: WarrenErrorCode;

  constructor(code: WarrenErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.name = new.target.name;
  }
}

/** An option was missing, of the wrong type, or out of range. */
export class InvalidOptionError extends WarrenError {
  /** Dotted path of the option, e.g. `consumers.billing.retry.maxAttempts`. */
  readonly option: string;
  constructor(option: string, problem: string, hint?: string) {
    super('INVALID_OPTION', `Invalid option \`${option}\`: ${problem}.${hint ? ` ${hint}` : ''}`);
    this.option = option;
  }
}

/**
 * One way in which an existing queue, exchange or binding differs from the declaration.
 * For a binding the broker has and the declaration does not name, `name` reads
 * `exchange -> queue with routing key K`, `argument` is `binding`, `expected` is
 * `undefined` and `actual` the routing key. For a passive exchange that does not exist,
 * `argument` is `exists`, `expected` true and `actual` false.
 */
export interface TopologyDifference {
  /** Queue or exchange name; for a binding, the binding in words. */
  readonly name: string;
  readonly kind: 'queue' | 'exchange' | 'binding';
  /** Argument that differs, e.g. `x-message-ttl`; `type` for an exchange type. */
  readonly argument: string;
  /** What the declaration wants. `undefined` means "not set". */
  readonly expected: unknown;
  /** What the broker has. `undefined` means "not set"; `'?'` means "differs, value unknown". */
  readonly actual: unknown;
}

/** How to migrate a queue whose arguments cannot be changed in place. */
export function migrationHint(diff: TopologyDifference): string {
  if (diff.kind === 'exchange' && diff.argument === 'exists') {
    return `Exchange '${diff.name}' is declared passive: another team owns it and warren never creates it. Ask its owner to declare it (or declare it yourself on a development broker), then declare the topology again.`;
  }
  if (diff.kind === 'binding') {
    return `A binding the declaration does not name sends the consumer messages it may not expect. Add it to the declaration if it is wanted; else remove it yourself (rabbitmqadmin delete binding, or the management UI). warren never removes anything.`;
  }
  if (diff.kind === 'exchange') {
    return `Exchange arguments cannot be changed in place: create a new exchange name in the declaration, or delete '${diff.name}' yourself when nothing depends on it. warren never deletes anything.`;
  }
  if (diff.argument === 'x-queue-type') {
    return (
      `A queue's type cannot be changed in place. '${diff.name}' is ${show(diff.actual)} on the broker and the declaration wants ${show(diff.expected)}: ` +
      `a queue declared without \`x-queue-type\` takes the vhost's default type, so on a vhost whose default is quorum an earlier declaration made it quorum. ` +
      `To migrate: stop the consumers of '${diff.name}', move or drain its messages (a shovel, or \`warren parked replay\` for a parked queue; ` +
      `on RabbitMQ 4.x a quorum queue drops a message after 20 returns unless it has a larger \`x-delivery-limit\`), ` +
      `delete it yourself (\`rabbitmqctl delete_queue ${diff.name}\`), then declare again: warren declares every queue with its type. warren never deletes anything.`
    );
  }
  return (
    `Queue arguments cannot be changed in place. To migrate: stop the consumers of '${diff.name}', ` +
    `move or drain its messages (a shovel, or \`warren parked replay\` for a parked queue), ` +
    `delete it yourself (\`rabbitmqctl delete_queue ${diff.name}\`), then declare again. ` +
    `warren never deletes anything.`
  );
}

function show(value: unknown): string {
  return value === undefined ? 'not set' : JSON.stringify(value);
}

/** A queue or exchange exists with other arguments than the declaration gives. */
export class TopologyDriftError extends WarrenError {
  readonly differences: readonly TopologyDifference[];
  constructor(differences: readonly TopologyDifference[], options?: { cause?: unknown }) {
    const lines = differences.map((d) =>
      d.kind === 'binding'
        ? `binding ${d.name}: on the broker, not in the declaration`
        : d.argument === 'exists'
          ? `${d.kind} '${d.name}': does not exist, and it is passive (owned elsewhere): warren never creates it`
          : `${d.kind} '${d.name}': ${d.argument} is ${show(d.actual)} on the broker, the declaration wants ${show(d.expected)}`,
    );
    const first = differences[0];
    super(
      'TOPOLOGY_DRIFT',
      `The broker's topology differs from the declaration:\n  ${lines.join('\n  ')}${first ? `\n${migrationHint(first)}` : ''}`,
      options,
    );
    this.differences = differences;
  }
}

/**
 * A passive exchange (declared `passive: true`: another team owns it) does not exist.
 * warren never creates such an exchange, so the topology cannot be declared until it does.
 */
export class ExchangeNotFoundError extends WarrenError {
  readonly exchange: string;
  /** The consumers whose bindings need it. */
  readonly consumers: readonly string[];
  constructor(exchange: string, consumers: readonly string[], options?: { cause?: unknown }) {
    const who = consumers.length ? ` Consumers bound to it: ${consumers.join(', ')}.` : '';
    super(
      'EXCHANGE_NOT_FOUND',
      `Exchange '${exchange}' does not exist. The topology declares it passive (\`exchanges['${exchange}'].passive\`): another team owns it, so warren checks it and never creates it.${who} Ask its owner to declare it, or declare it yourself on a development broker (\`rabbitmqadmin declare exchange name=${exchange} type=topic durable=true\`), then start again; or check the name for a typo.`,
      options,
    );
    this.exchange = exchange;
    this.consumers = consumers;
  }
}

/**
 * The broker lacks a feature the declaration asks for: a consumer that retries inside its
 * queue (`retry.inQueue`) on a broker before RabbitMQ 4.3. Older brokers accept the
 * `x-delayed-retry-*` arguments and ignore them, so a rejected message would come straight
 * back, a hot loop: warren refuses before declaring anything or consuming.
 */
export class UnsupportedBrokerError extends WarrenError {
  /** The option that needs the feature, e.g. `consumers.billing.retry.inQueue`. */
  readonly option: string;
  /** What the broker said it is (`product version`), e.g. `RabbitMQ 4.0.5`. */
  readonly server: string;
  /** What the feature needs, e.g. `RabbitMQ 4.3`. */
  readonly needs: string;
  constructor(option: string, server: string, needs: string, what: string, instead: string) {
    super(
      'UNSUPPORTED_BROKER',
      `\`${option}\` needs ${needs} or later (${what}), and the broker is ${server}. It would accept the queue arguments and ignore them, so every failure would come straight back; nothing was declared. Upgrade the broker to ${needs} or later, or ${instead}.`,
    );
    this.option = option;
    this.server = server;
    this.needs = needs;
  }
}

/** The broker returned a `mandatory` publish: no queue is bound for its routing key. */
export class UnroutableError extends WarrenError {
  readonly exchange: string;
  readonly routingKey: string;
  readonly messageId: string | undefined;
  constructor(exchange: string, routingKey: string, messageId: string | undefined, replyText: string) {
    super(
      'UNROUTABLE',
      `Message ${messageId ?? '(no id)'} to exchange '${exchange || '(default)'}' with routing key '${routingKey}' was returned by the broker (${replyText}): no queue is bound for that key. Bind a consumer to it in the topology, or check the routing key.`,
    );
    this.exchange = exchange;
    this.routingKey = routingKey;
    this.messageId = messageId;
  }
}

/** The broker refused a publish (basic.nack). */
export class PublishNackedError extends WarrenError {
  readonly messageId: string | undefined;
  constructor(messageId: string | undefined, options?: { cause?: unknown }) {
    super(
      'PUBLISH_NACKED',
      `The broker nacked message ${messageId ?? '(no id)'}: it did not take responsibility for it (queue full with reject-publish, or an internal error). Publish it again; its id stays the same.`,
      options,
    );
    this.messageId = messageId;
  }
}

/**
 * The channel closed before the broker confirmed: the message may or may not have
 * been stored. Publishing again with the same id is safe where consumers are idempotent.
 */
export class PublishNotConfirmedError extends WarrenError {
  readonly messageId: string | undefined;
  /**
   * Set when the publish was given up at `confirmTimeoutMs` while its channel stayed
   * open: the broker's answer may still come, and this settles with it (`lost` if the
   * channel closes first). A caller that must not write a second copy while the first
   * may still land (warren's own moves) waits for it before publishing again.
   */
  readonly late: Promise<LateAnswer> | undefined;
  constructor(messageId: string | undefined, reason: string, options?: { cause?: unknown; late?: Promise<LateAnswer> }) {
    super(
      'PUBLISH_NOT_CONFIRMED',
      `Message ${messageId ?? '(no id)'} was not confirmed: ${reason}. It may or may not have reached the broker; publish it again with the same id.`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.messageId = messageId;
    this.late = options?.late;
  }
}

/** The broker's answer to a publish that came after it was given up. */
export type LateAnswer = 'confirmed' | 'nacked' | 'returned' | 'lost';

/**
 * A publish was given up before it was written to the connection (no slot, a socket
 * that did not drain, or a broker that blocked publishing, within `confirmTimeoutMs`):
 * the broker never saw it, and warren will not write it later.
 */
export class PublishNotSentError extends WarrenError {
  readonly messageId: string | undefined;
  /** The broker's reason when it had blocked the connection (e.g. "low on memory"). */
  readonly blockedReason: string | undefined;
  constructor(messageId: string | undefined, reason: string, blockedReason?: string, options?: { cause?: unknown }) {
    super(
      'PUBLISH_NOT_SENT',
      `Message ${messageId ?? '(no id)'} was not sent: ${reason}. It was never written to the broker and will not be; publish it again (same id) once the broker accepts publishes.`,
      options,
    );
    this.messageId = messageId;
    this.blockedReason = blockedReason;
  }
}

/** No connection to the broker could be made in time. */
export class BrokerUnreachableError extends WarrenError {
  readonly url: string;
  constructor(url: string, detail: string, options?: { cause?: unknown }) {
    super('BROKER_UNREACHABLE', `Cannot reach RabbitMQ at ${url}: ${detail}. Check that the broker runs and that the URL and credentials are right.`, options);
    this.url = url;
  }
}

/** Why a broker refused a connection during the AMQP handshake. */
export type HandshakeFailure = 'credentials' | 'vhost' | 'not-amqp' | 'tls';

/**
 * The server answered, but the connection could not be opened: the broker refused the
 * user's credentials, or the virtual host (missing, or the user has no access to it), or
 * the server on that port does not speak AMQP, or the TLS handshake failed (the broker's
 * certificate did not verify, or the broker refused this client's certificate). Trying again cannot help, so warren does
 * not: the message says what is wrong and what to check.
 */
export class BrokerHandshakeError extends BrokerUnreachableError {
  readonly reason: HandshakeFailure;
  constructor(url: string, reason: HandshakeFailure, message: string, options?: { cause?: unknown }) {
    super(url, message, options);
    this.message = message;
    this.reason = reason;
  }
}

/** The object was closed; make a new one. */
export class ClosedError extends WarrenError {
  constructor(what: string) {
    super('CLOSED', `${what} is closed.`);
  }
}

/**
 * Throw this (or a subclass) from a handler for a failure that no retry can fix:
 * the message is parked on its first attempt, with this error attached.
 *
 * @example
 * if (!customer) throw new PermanentError(`customer ${id} does not exist`);
 */
export class PermanentError extends WarrenError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('PERMANENT', message, options);
  }
}

/**
 * A handler (or an asynchronous schema's `validate`, which has the same time) ran longer
 * than its `timeoutMs`; counted as a transient failure.
 */
export class HandlerTimeoutError extends WarrenError {
  readonly timeoutMs: number;
  /** What did not settle: the handler, the consumer's schema, or its decoder. */
  readonly part: 'handler' | 'schema' | 'decoder';
  constructor(consumer: string, timeoutMs: number, part: 'handler' | 'schema' | 'decoder' = 'handler') {
    super(
      'HANDLER_TIMEOUT',
      part === 'handler'
        ? `Handler of consumer '${consumer}' did not settle within ${timeoutMs} ms; counted as a transient failure. Raise \`timeoutMs\` if the work is legitimately slow.`
        : part === 'schema'
          ? `The schema of consumer '${consumer}' did not finish validating within ${timeoutMs} ms; counted as a transient failure. Make its validate settle (an asynchronous check that waits on something), or raise \`timeoutMs\`.`
          : `The decoder of consumer '${consumer}' did not finish decoding within ${timeoutMs} ms; counted as a transient failure. Make its decode settle, or raise \`timeoutMs\`.`,
    );
    this.timeoutMs = timeoutMs;
    this.part = part;
  }
}

/** The body is not JSON, or the payload fails the consumer's schema. */
export class InvalidPayloadError extends WarrenError {
  readonly issues: readonly string[];
  constructor(message: string, issues: readonly string[] = [], options?: { cause?: unknown }) {
    super('INVALID_PAYLOAD', message, options);
    this.issues = issues;
  }
}

/** A consumer name that the topology does not declare. */
export class UnknownConsumerError extends WarrenError {
  readonly consumer: string;
  readonly known: readonly string[];
  constructor(consumer: string, known: readonly string[]) {
    super('UNKNOWN_CONSUMER', `Unknown consumer '${consumer}'. The topology declares: ${known.length ? known.join(', ') : '(none)'}.`);
    this.consumer = consumer;
    this.known = known;
  }
}

/** The database could not be reached; the message is held and tried again. */
export class StoreUnavailableError extends WarrenError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super('STORE_UNAVAILABLE', `The database is unavailable: ${detail}.`, options);
  }
}

/** Type guard: is this any error that warren threw? */
export function isWarrenError(error: unknown): error is WarrenError {
  return error instanceof WarrenError;
}

/**
 * A store failure that is not an outage: a schema that is not migrated, a transaction
 * the handler ended or aborted itself, a transaction opened inside another. Carries the
 * backend so a log line says which database.
 */
export class StoreError extends WarrenError {
  /** `'sqlite'` or `'postgres'`. */
  readonly backend: string;
  constructor(backend: string, message: string, options?: { cause?: unknown }) {
    super('STORE', message, options);
    this.backend = backend;
  }
}

/** The database's schema is not the one this version of warren needs. */
export class StoreSchemaError extends StoreError {
  /** Latest migration applied to the database (0 when none). */
  readonly applied: number;
  /** Latest migration this version of warren knows. */
  readonly expected: number;
  constructor(backend: string, applied: number, expected: number, table: string) {
    super(
      backend,
      applied > expected
        ? `The ${backend} schema is at migration ${applied} (table ${table}), newer than this version of warren knows (${expected}). Upgrade warren in this process, or point it at another table prefix.`
        : `The ${backend} schema is at migration ${applied} (table ${table}); this version of warren needs ${expected}. Run \`await store.migrate()\` (or create the store with \`migrate: true\`, the default).`,
    );
    this.applied = applied;
    this.expected = expected;
  }
}
