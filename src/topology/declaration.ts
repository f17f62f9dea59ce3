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

/** The keys each level of a declaration takes, in the order the docs list them. */
const KNOWN_KEYS = {
  topology: ['exchange', 'queueType', 'retry', 'crashLimit', 'consumers'],
  consumer: ['bindings', 'queue', 'retry', 'queueType', 'crashLimit'],
  retry: ['delays', 'maxAttempts'],
} as const;

type Level = keyof typeof KNOWN_KEYS;

const LEVEL_NAMES: Record<Level, string> = { topology: 'the topology', consumer: 'the consumer', retry: 'retry' };

/** Edit distance, case-insensitive: how many letters to add, remove or change. */
export function distance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  let prev = Array.from({ length: y.length + 1 }, (_, j) => j);
  for (let i = 1; i <= x.length; i++) {
    const row = [i];
    for (let j = 1; j <= y.length; j++) {
      row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[y.length] as number;
}

/**
 * Rejects a key the level does not take: a misspelt option (`maxAtempts`) would
 * otherwise be ignored and its default used in silence. Names the key, where it was and
 * the closest known key, or the level it belongs to when it was put at the wrong one.
 */
function checkKeys(value: object, level: Level, at: string): void {
  const known: readonly string[] = KNOWN_KEYS[level];
  for (const key of Object.keys(value)) {
    if (known.includes(key)) continue;
    const where = at === '' ? 'the topology' : at;
    const option = at === '' ? key : `${at}.${key}`;
    const owners = (['consumer', 'topology', 'retry'] as const).filter((l) => l !== level && (KNOWN_KEYS[l] as readonly string[]).includes(key));
    if (owners.length) {
      throw new InvalidOptionError(option, `${key} is not an option of ${where}`, `${key} belongs to ${owners.map((l) => LEVEL_NAMES[l]).join(' or ')}, not to ${LEVEL_NAMES[level]}.`);
    }
    const best = known.map((k) => ({ k, d: distance(key, k) })).sort((a, b) => a.d - b.d)[0];
    const close = best !== undefined && best.d <= Math.max(2, Math.floor(key.length / 3));
    throw new InvalidOptionError(option, `${key} is not an option of ${where}`, close ? `Did you mean ${best.k}? Known options: ${known.join(', ')}.` : `Known options: ${known.join(', ')}.`);
  }
}

/**
 * Validates a topology declaration once and returns it frozen, with defaults applied.
 * A key it does not know, at any level, is an {@link InvalidOptionError} naming the key,
 * where it was and the closest known one.
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
  checkKeys(options, 'topology', '');
  if (options.retry !== undefined) {
    if (typeof options.retry !== 'object' || options.retry === null) throw new InvalidOptionError('retry', 'expected an object with `delays` and/or `maxAttempts`');
    checkKeys(options.retry, 'retry', 'retry');
  }
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
    checkKeys(decl, 'consumer', at);
    if (decl.retry !== undefined) {
      if (typeof decl.retry !== 'object' || decl.retry === null) throw new InvalidOptionError(`${at}.retry`, 'expected an object with `delays` and/or `maxAttempts`');
      checkKeys(decl.retry, 'retry', `${at}.retry`);
    }
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
