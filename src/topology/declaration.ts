import { InvalidOptionError, UnknownConsumerError } from '../errors.js';
import { parseDuration, parkedQueueName, retryQueueName, type Duration } from '../retry/ladder.js';

/** Classic queues are the broker default; quorum queues are replicated and dead-letter at-least-once. */
export type QueueType = 'classic' | 'quorum';

/** How a consumer retries transient failures. */
export interface RetryOptions {
  /**
   * One retry queue per delay; failure n waits in tier n, the last tier repeating.
   * @default ['5s', '1m', '10m']
   */
  delays?: readonly Duration[];
  /**
   * Handler runs before a message is parked (the first delivery counts).
   * @default 6
   */
  maxAttempts?: number;
}

/** One consumer: its work queue, bindings, retry ladder and parked queue. */
export interface ConsumerDeclaration {
  /** Routing-key patterns (topic syntax: `*` one word, `#` any) bound to the work queue. */
  bindings: readonly string[];
  /**
   * Work queue name; retry and parked queues are named after it.
   * @default the consumer's name
   */
  queue?: string;
  /** Overrides the topology-wide retry options. */
  retry?: RetryOptions;
  /** @default the topology's `queueType` */
  queueType?: QueueType;
  /**
   * Deliveries that end with no outcome (the process died on the message) before it is
   * parked as a crash loop. On quorum queues the broker's delivery limit is set a little
   * above this and dead-letters to the parked queue.
   * @default the topology's `crashLimit`
   */
  crashLimit?: number;
}

/** The whole topology, declared once in code and shared by the app, the CLI and tests. */
export interface TopologyOptions {
  /**
   * The topic exchange producers publish to.
   * @default 'warren.events'
   */
  exchange?: string;
  /** @default 'classic' */
  queueType?: QueueType;
  /** Retry defaults for every consumer. */
  retry?: RetryOptions;
  /** @default 5 */
  crashLimit?: number;
  /** Consumers by name. */
  consumers: Readonly<Record<string, ConsumerDeclaration>>;
}

/** A consumer after validation and defaults. */
export interface ConsumerTopology {
  readonly name: string;
  readonly queue: string;
  readonly bindings: readonly string[];
  readonly queueType: QueueType;
  readonly delaysMs: readonly number[];
  readonly retryQueues: readonly string[];
  readonly parkedQueue: string;
  readonly maxAttempts: number;
  readonly crashLimit: number;
}

/** A validated, frozen topology. Make one with {@link defineTopology}. */
export interface Topology {
  readonly exchange: string;
  readonly consumers: ReadonlyMap<string, ConsumerTopology>;
  /** The consumer of that name; throws {@link UnknownConsumerError} listing the known ones. */
  consumer(name: string): ConsumerTopology;
}

/** Defaults, in one place. */
export const TOPOLOGY_DEFAULTS = {
  exchange: 'warren.events',
  queueType: 'classic' as QueueType,
  delays: ['5s', '1m', '10m'] as readonly Duration[],
  maxAttempts: 6,
  crashLimit: 5,
} as const;

const NAME = /^[A-Za-z0-9_.:-]{1,200}$/;
const BINDING = /^(?:[^.\s]+)(?:\.[^.\s]+)*$/;

function checkName(value: unknown, option: string): string {
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a usable name`, 'Use 1-200 letters, digits, and . _ : -');
  }
  if (value.startsWith('amq.')) throw new InvalidOptionError(option, `'${value}' starts with 'amq.', which RabbitMQ reserves`);
  return value;
}

function checkInt(value: unknown, option: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a whole number from ${min} to ${max}`);
  }
  return value;
}

function checkQueueType(value: unknown, option: string): QueueType {
  if (value !== 'classic' && value !== 'quorum') {
    throw new InvalidOptionError(option, `${JSON.stringify(value)} is not a queue type`, "Use 'classic' or 'quorum'.");
  }
  return value;
}

/**
 * Validates a topology declaration once and returns it frozen, with defaults applied.
 *
 * @example
 * export const topology = defineTopology({
 *   exchange: 'shop.events',
 *   consumers: {
 *     billing: { bindings: ['order.created'], retry: { delays: ['5s', '1m', '10m'], maxAttempts: 6 } },
 *     email: { bindings: ['order.*'] },
 *   },
 * });
 */
export function defineTopology(options: TopologyOptions): Topology {
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError('topology', 'expected an object');
  const exchange = checkName(options.exchange ?? TOPOLOGY_DEFAULTS.exchange, 'exchange');
  const queueType = checkQueueType(options.queueType ?? TOPOLOGY_DEFAULTS.queueType, 'queueType');
  const crashLimit = checkInt(options.crashLimit ?? TOPOLOGY_DEFAULTS.crashLimit, 'crashLimit', 1, 1000);
  if (typeof options.consumers !== 'object' || options.consumers === null || Object.keys(options.consumers).length === 0) {
    throw new InvalidOptionError('consumers', 'declare at least one consumer', "Example: consumers: { billing: { bindings: ['order.created'] } }");
  }
  const consumers = new Map<string, ConsumerTopology>();
  const queues = new Map<string, string>();
  for (const [name, decl] of Object.entries(options.consumers)) {
    const at = `consumers.${name}`;
    checkName(name, at);
    if (typeof decl !== 'object' || decl === null) throw new InvalidOptionError(at, 'expected an object with `bindings`');
    const queue = checkName(decl.queue ?? name, `${at}.queue`);
    if (!Array.isArray(decl.bindings) || decl.bindings.length === 0) {
      throw new InvalidOptionError(`${at}.bindings`, 'expected a non-empty array of routing-key patterns', "Example: ['order.created', 'order.*']");
    }
    decl.bindings.forEach((b, i) => {
      if (typeof b !== 'string' || !BINDING.test(b)) throw new InvalidOptionError(`${at}.bindings[${i}]`, `${JSON.stringify(b)} is not a routing-key pattern`);
    });
    const retry = { ...options.retry, ...decl.retry };
    const delays = retry.delays ?? TOPOLOGY_DEFAULTS.delays;
    if (!Array.isArray(delays)) throw new InvalidOptionError(`${at}.retry.delays`, 'expected an array of durations');
    const delaysMs = delays.map((d, i) => parseDuration(d, `${at}.retry.delays[${i}]`));
    if (new Set(delaysMs).size !== delaysMs.length) throw new InvalidOptionError(`${at}.retry.delays`, `${JSON.stringify(delays)} repeats a delay`, 'Each tier is one queue, so each delay appears once.');
    const maxAttempts = checkInt(retry.maxAttempts ?? TOPOLOGY_DEFAULTS.maxAttempts, `${at}.retry.maxAttempts`, 1, 100);
    const topo: ConsumerTopology = Object.freeze({
      name,
      queue,
      bindings: Object.freeze([...decl.bindings]),
      queueType: checkQueueType(decl.queueType ?? queueType, `${at}.queueType`),
      delaysMs: Object.freeze(delaysMs),
      retryQueues: Object.freeze(delaysMs.map((ms) => retryQueueName(queue, ms))),
      parkedQueue: parkedQueueName(queue),
      maxAttempts,
      crashLimit: checkInt(decl.crashLimit ?? crashLimit, `${at}.crashLimit`, 1, 1000),
    });
    for (const q of [topo.queue, ...topo.retryQueues, topo.parkedQueue]) {
      const owner = queues.get(q);
      if (owner !== undefined) throw new InvalidOptionError(`${at}.queue`, `queue '${q}' is also used by consumer '${owner}'`, 'Give each consumer its own queue name.');
      queues.set(q, name);
    }
    consumers.set(name, topo);
  }
  const frozen = new Map(consumers);
  return Object.freeze({
    exchange,
    consumers: frozen,
    consumer(name: string): ConsumerTopology {
      const found = frozen.get(name);
      if (!found) throw new UnknownConsumerError(name, [...frozen.keys()]);
      return found;
    },
  });
}
