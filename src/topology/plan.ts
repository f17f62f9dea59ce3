import type { ArgumentValue, ConsumerTopology, ExchangeType, InQueueRetry, QueueType, Topology } from './declaration.js';

/** Queue arguments as sent to the broker. */
export type QueueArguments = Readonly<Record<string, string | number>>;

/** A queue the topology needs. */
export interface QueueSpec {
  readonly name: string;
  readonly role: 'work' | 'retry' | 'parked';
  readonly consumer: string;
  readonly arguments: QueueArguments;
}

/** An exchange the topology needs. */
export interface ExchangeSpec {
  readonly name: string;
  /** Undefined only for a passive exchange declared without a type (not checked). */
  readonly type: ExchangeType | undefined;
  readonly durable: boolean;
  readonly arguments: Readonly<Record<string, ArgumentValue>>;
  /** Owned elsewhere: checked, never declared. */
  readonly passive: boolean;
}

/** A binding from an exchange to a work queue. */
export interface BindingSpec {
  readonly exchange: string;
  readonly queue: string;
  /** The routing key or pattern; `''` on a fanout or headers exchange. */
  readonly pattern: string;
  /** Binding arguments (a headers exchange's `x-match` and values); absent when there are none. */
  readonly arguments?: Readonly<Record<string, ArgumentValue>>;
}

/** Everything a topology declares, in declaration order. */
export interface TopologySpec {
  readonly exchanges: readonly ExchangeSpec[];
  readonly queues: readonly QueueSpec[];
  readonly bindings: readonly BindingSpec[];
}

/** The queue argument that says a queue's type. */
export const QUEUE_TYPE_ARGUMENT = 'x-queue-type';

/**
 * Quorum queues dead-letter at-least-once only with `reject-publish` overflow;
 * without it the broker's own dead-lettering may drop a message.
 */
function quorumArgs(): Record<string, string> {
  return { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' };
}

/** Delivery limit of a quorum parked queue: high enough never to be reached by reads. */
export const PARKED_DELIVERY_LIMIT = 1_000_000;

/**
 * The arguments of a parked queue of this type. Every queue states its type: a queue
 * declared without one takes the vhost's default type (`default_queue_type`), and on a
 * vhost whose default is quorum a classic parked queue would become a quorum queue
 * with the broker's default delivery limit (20 on RabbitMQ 4.x), past which reads drop
 * its messages.
 */
export function parkedQueueArguments(type: QueueType): QueueArguments {
  // Nothing consumes a parked queue, but reading one returns messages to it; RabbitMQ 4
  // gives quorum queues a delivery limit of 20 and past it drops a message that has no
  // dead-letter target. A parked message must outlive any number of reads.
  return type === 'quorum' ? { [QUEUE_TYPE_ARGUMENT]: 'quorum', 'x-delivery-limit': PARKED_DELIVERY_LIMIT } : { [QUEUE_TYPE_ARGUMENT]: 'classic' };
}

/**
 * The work-queue arguments of a retry inside the queue (RabbitMQ 4.3's delayed retry):
 * a message rejected with requeue is set aside in the queue for `min` × its delivery
 * count, at most `max`. Type `failed` (seen on 4.3.6): a reject and a consumer that went
 * away are delayed, a nack is not, so what warren gives back unstarted (a shutdown, a
 * pause) comes back at once and counts nothing. (`all` delays nacks too, by `min` each
 * time; `returned` delays only nacks.)
 *
 * The delivery limit leaves warren the last word: it parks the message itself, with its
 * failure, when the run at `maxAttempts` fails (delivery count `maxAttempts - 1`), and as
 * a crash loop when a delivery's count reaches `maxAttempts`; the broker's own
 * dead-lettering to the parked queue is only the backstop two deliveries later.
 */
export function inQueueRetryArguments(retry: InQueueRetry, maxAttempts: number): Record<string, string | number> {
  return {
    'x-delayed-retry-type': IN_QUEUE_RETRY_TYPE,
    'x-delayed-retry-min': retry.minMs,
    'x-delayed-retry-max': retry.maxMs,
    'x-delivery-limit': maxAttempts + 2,
  };
}

/** The `x-delayed-retry-type` warren declares (see {@link inQueueRetryArguments}). */
export const IN_QUEUE_RETRY_TYPE = 'failed';

/** The queues of one consumer. Pure: the same declaration gives the same arguments. */
export function consumerQueues(c: ConsumerTopology): QueueSpec[] {
  const quorum = c.queueType === 'quorum';
  // The work queue dead-letters to the parked queue, so anything the broker itself
  // dead-letters (the quorum delivery limit of a crash loop) is kept, never dropped.
  const work: Record<string, string | number> = {
    [QUEUE_TYPE_ARGUMENT]: c.queueType,
    'x-dead-letter-exchange': '',
    'x-dead-letter-routing-key': c.parkedQueue,
  };
  if (quorum) Object.assign(work, quorumArgs(), { 'x-delivery-limit': c.crashLimit + 2 });
  if (c.inQueue !== undefined) Object.assign(work, inQueueRetryArguments(c.inQueue, c.maxAttempts));
  const specs: QueueSpec[] = [{ name: c.queue, role: 'work', consumer: c.name, arguments: work }];
  c.delaysMs.forEach((ms, i) => {
    // Each tier has its own TTL: expiry only happens at a queue's head, so one
    // shared queue with per-message TTLs would hold a short delay behind a long one.
    const args: Record<string, string | number> = {
      [QUEUE_TYPE_ARGUMENT]: c.queueType,
      'x-message-ttl': ms,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': c.queue,
    };
    if (quorum) Object.assign(args, quorumArgs());
    specs.push({ name: c.retryQueues[i] as string, role: 'retry', consumer: c.name, arguments: args });
  });
  specs.push({ name: c.parkedQueue, role: 'parked', consumer: c.name, arguments: parkedQueueArguments(c.queueType) });
  return specs;
}

/** The full specification of a topology: exchanges, queues and bindings. */
export function topologySpec(topology: Topology): TopologySpec {
  const queues: QueueSpec[] = [];
  const bindings: BindingSpec[] = [];
  for (const c of topology.consumers.values()) {
    queues.push(...consumerQueues(c));
    for (const b of c.queueBindings) {
      bindings.push(Object.keys(b.arguments).length ? { exchange: b.exchange, queue: c.queue, pattern: b.key, arguments: b.arguments } : { exchange: b.exchange, queue: c.queue, pattern: b.key });
    }
  }
  const exchanges = [...topology.exchanges.values()].map((e) => ({ name: e.name, type: e.type, durable: e.durable, arguments: e.arguments, passive: e.passive }));
  return { exchanges, queues, bindings };
}

/**
 * Compares wanted queue arguments with what the broker reports, argument by argument.
 * Numbers and numeric strings compare by value (the management API reports numbers).
 *
 * A queue's type is compared as a type, not as an argument: `realType` is the type the
 * broker reports for the queue (the management API's `type`), and a queue that stores
 * no `x-queue-type` is classic (RabbitMQ 3.x keeps none for a queue declared without
 * one; 4.x writes the type it gave the queue). So a queue declared before warren stated
 * types, on a vhost whose default is classic, matches `x-queue-type: classic`; one that
 * the vhost's default made quorum differs, and is reported.
 */
export function diffArguments(wanted: Readonly<Record<string, string | number | boolean>>, actual: Readonly<Record<string, unknown>>, realType?: string): Array<{ argument: string; expected: unknown; actual: unknown }> {
  const keys = new Set([...Object.keys(wanted), ...Object.keys(actual)]);
  const out: Array<{ argument: string; expected: unknown; actual: unknown }> = [];
  for (const key of [...keys].sort()) {
    if (key === QUEUE_TYPE_ARGUMENT) continue;
    const w = wanted[key];
    const a = actual[key];
    if (w === undefined && a === undefined) continue;
    if (w !== undefined && a !== undefined && String(w) === String(a)) continue;
    out.push({ argument: key, expected: w, actual: a });
  }
  if (keys.has(QUEUE_TYPE_ARGUMENT) || realType !== undefined) {
    const expected = wanted[QUEUE_TYPE_ARGUMENT] ?? 'classic';
    const stored = actual[QUEUE_TYPE_ARGUMENT];
    const real = realType ?? (stored === undefined ? 'classic' : stored);
    if (String(expected) !== String(real)) out.push({ argument: QUEUE_TYPE_ARGUMENT, expected, actual: real });
  }
  return out;
}

/**
 * True when a refused declaration says only that the queue stores no type while the
 * declaration says classic (`received 'classic' but current is none`): the queue is
 * classic, declared before warren stated types on a broker that keeps no type for such
 * a queue. Declaring it again without `x-queue-type` is then the same declaration.
 */
export function untypedClassic(difference: { readonly argument: string; readonly expected: unknown; readonly actual: unknown }): boolean {
  return difference.argument === QUEUE_TYPE_ARGUMENT && difference.expected === 'classic' && difference.actual === undefined;
}

/** A binding as the management API reports it (the fields warren reads). */
export interface BrokerBinding {
  readonly source: string;
  readonly destination: string;
  readonly destination_type: string;
  readonly routing_key: string;
  readonly arguments?: Readonly<Record<string, unknown>>;
  /** The binding's key in the management API, needed to delete it there. */
  readonly properties_key?: string;
}

/** What {@link diffBindings} found. */
export interface BindingDiff {
  /** Declared bindings the broker does not have (apply creates them). */
  readonly missing: readonly BindingSpec[];
  /** Declared bindings the broker has. */
  readonly present: readonly BindingSpec[];
  /**
   * Bindings from the topology's exchange to one of its work queues that the declaration
   * does not name. warren never removes them: something bound by hand sends the consumer
   * messages its handler may not expect.
   */
  readonly extra: readonly BrokerBinding[];
}

/** Binding arguments as one comparable string: names sorted, values as text (the management API reports numbers as numbers). */
function argumentsKey(args: Readonly<Record<string, unknown>> | undefined): string {
  return JSON.stringify(Object.entries(args ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => [k, String(v)]));
}

/**
 * Compares the declared bindings with those the broker has from the topology's exchanges
 * (`actual`: the bindings whose source is one of them). A declared binding matches a
 * broker binding of the same exchange, queue, routing key and arguments. Only bindings to
 * the declared work queues count as extra. Pure.
 */
export function diffBindings(wanted: readonly BindingSpec[], actual: readonly BrokerBinding[]): BindingDiff {
  const workQueues = new Set(wanted.map((b) => b.queue));
  const key = (exchange: string, queue: string, pattern: string, args: Readonly<Record<string, unknown>> | undefined) => JSON.stringify([exchange, queue, pattern, argumentsKey(args)]);
  const toQueues = actual.filter((b) => b.destination_type === 'queue');
  const onBroker = new Set(toQueues.map((b) => key(b.source, b.destination, b.routing_key, b.arguments)));
  const declared = new Set(wanted.map((b) => key(b.exchange, b.queue, b.pattern, b.arguments)));
  const missing = wanted.filter((b) => !onBroker.has(key(b.exchange, b.queue, b.pattern, b.arguments)));
  const present = wanted.filter((b) => onBroker.has(key(b.exchange, b.queue, b.pattern, b.arguments)));
  const extra = toQueues.filter((b) => workQueues.has(b.destination) && !declared.has(key(b.source, b.destination, b.routing_key, b.arguments)));
  return { missing, present, extra };
}

/**
 * A binding in words: `shop.events -> billing with routing key order.created`; with
 * arguments (a headers exchange) `shop.docs -> billing with arguments {"x-match":"all","format":"pdf"}`.
 */
export function bindingName(exchange: string, queue: string, pattern: string, args?: Readonly<Record<string, unknown>>): string {
  const withArgs = args !== undefined && Object.keys(args).length > 0 ? JSON.stringify(args) : undefined;
  if (pattern === '' && withArgs !== undefined) return `${exchange} -> ${queue} with arguments ${withArgs}`;
  if (pattern === '') return `${exchange} -> ${queue} with an empty routing key`;
  return `${exchange} -> ${queue} with routing key ${pattern}${withArgs !== undefined ? ` and arguments ${withArgs}` : ''}`;
}

/**
 * How to remove a binding by hand (warren never removes one): a `rabbitmqadmin` command,
 * which goes through the management API.
 */
export function unbindHint(binding: BrokerBinding, vhost = '/'): string {
  const propertiesKey = binding.properties_key ?? (binding.routing_key === '' ? '~' : encodeURIComponent(binding.routing_key));
  return `rabbitmqadmin --vhost=${vhost} delete binding source=${binding.source} destination_type=queue destination=${binding.destination} properties_key=${propertiesKey}`;
}
