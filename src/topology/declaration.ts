import { InvalidOptionError, UnknownConsumerError } from '../errors.js';
import { formatDuration, parseDuration, parkedQueueName, retryQueueName, type Duration } from '../retry/ladder.js';
import { checkFaults, type FaultEventOptions, type FaultsTopology } from '../park/fault-event.js';

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
  /**
   * Retry inside the work queue instead of through tier queues: RabbitMQ 4.3's delayed
   * retry of quorum queues (`x-delayed-retry-*`). A failed message is rejected with
   * requeue and the broker sets it aside in its own queue for `min` × the delivery count,
   * capped at `max`: with `{ min: '5s', max: '1m' }` failures 1, 2, 3 wait 5 s, 10 s, 15 s,
   * and from the 12th on 1 m. No copy is made and no tier queue declared. Needs
   * `queueType: 'quorum'` and RabbitMQ 4.3 or later: on an older broker connecting fails
   * with `UnsupportedBrokerError`. Replaces `delays` (give one or the other); see
   * docs/retry.md.
   *
   * @example retry: { inQueue: { min: '5s', max: '1m' }, maxAttempts: 6 }
   * @default none: tier queues (`delays`)
   */
  inQueue?: InQueueRetryOptions;
}

/** The linear schedule of a retry inside the work queue: failure n waits `min` × n, at most `max`. */
export interface InQueueRetryOptions {
  /** The wait after the first failure, and the step it grows by. */
  min: Duration;
  /** The longest wait. Must be at least `min`. */
  max: Duration;
}

/** A retry inside the work queue, after validation. */
export interface InQueueRetry {
  readonly minMs: number;
  readonly maxMs: number;
}

/** The exchange types RabbitMQ has built in. */
export type ExchangeType = 'topic' | 'direct' | 'fanout' | 'headers';

/** A value a binding or exchange argument may hold. */
export type ArgumentValue = string | number | boolean;

/**
 * One exchange of the topology besides the default one (or the default one, to give it
 * arguments or make it passive).
 *
 * @example
 * exchanges: {
 *   'shop.commands': { type: 'direct' },
 *   'shop.broadcast': { type: 'fanout' },
 *   'payments.events': { passive: true }, // owned by the payments team
 * }
 */
export interface ExchangeDeclaration {
  /**
   * Omitted on a passive exchange, its type is not checked.
   * @default 'topic'
   */
  type?: ExchangeType;
  /** @default true */
  durable?: boolean;
  /** Exchange arguments, e.g. `{ 'alternate-exchange': 'shop.unrouted' }`. @default none */
  arguments?: Readonly<Record<string, ArgumentValue>>;
  /**
   * Another team owns the exchange: warren checks that it exists (a passive declare, on a
   * channel of its own) and binds to it, but never declares it. If it does not exist,
   * declaring the topology fails with {@link ExchangeNotFoundError} naming it.
   * @default false
   */
  passive?: boolean;
}

/**
 * A binding of a consumer's work queue to a named exchange. On a topic or direct exchange
 * give `keys`; on a headers exchange give `headers` (and `match`); on a fanout exchange
 * neither.
 *
 * @example
 * { exchange: 'shop.commands', keys: ['invoice.send'] }
 * { exchange: 'shop.broadcast' }
 * { exchange: 'shop.documents', headers: { format: 'pdf', region: 'eu' }, match: 'all' }
 */
export interface BindingDeclaration {
  /** A name from the topology: `exchange` or a key of `exchanges`. */
  exchange: string;
  /** Routing keys or patterns (topic syntax on a topic exchange: `*` one word, `#` any). */
  keys?: readonly string[];
  /** Header values a message must carry (headers exchange). Names must not start with `x-`. */
  headers?: Readonly<Record<string, ArgumentValue>>;
  /**
   * Whether every header must match, or any one of them.
   * @default 'all'
   */
  match?: 'all' | 'any';
}

/** One consumer: its work queue, bindings, retry ladder and parked queue. */
export interface ConsumerDeclaration {
  /**
   * What is bound to the work queue: a string is a routing-key pattern on the default
   * exchange (topic syntax: `*` one word, `#` any); a {@link BindingDeclaration} binds to
   * any exchange of the topology.
   */
  bindings: ReadonlyArray<string | BindingDeclaration>;
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
   * The default exchange: what `publish()` uses without an `exchange` option, and what a
   * string binding binds to. A topic exchange unless `exchanges` names it with another type.
   * @default 'warren.events'
   */
  exchange?: string;
  /**
   * Further exchanges by name (or the default one, to set its options). Each is declared
   * with the topology, except a `passive` one, which is only checked.
   * @default none
   */
  exchanges?: Readonly<Record<string, ExchangeDeclaration>>;
  /** @default 'classic' */
  queueType?: QueueType;
  /** Retry defaults for every consumer. */
  retry?: RetryOptions;
  /** @default 5 */
  crashLimit?: number;
  /**
   * Publish a fault event for every parked message to this topic exchange (declared with
   * the topology), routing key `<consumer>.<reason>`. See docs/archive.md, "Fault events".
   * @default none: no events
   */
  faults?: FaultEventOptions;
  /** Consumers by name. */
  consumers: Readonly<Record<string, ConsumerDeclaration>>;
}

/** An exchange after validation and defaults. */
export interface ExchangeTopology {
  readonly name: string;
  /** Undefined only for a passive exchange declared without a type (not checked). */
  readonly type: ExchangeType | undefined;
  readonly durable: boolean;
  readonly arguments: Readonly<Record<string, ArgumentValue>>;
  readonly passive: boolean;
}

/** One binding of a work queue, after validation. */
export interface QueueBinding {
  readonly exchange: string;
  /** The routing key or pattern; `''` on a fanout or headers exchange. */
  readonly key: string;
  /** Binding arguments: `x-match` and the header values on a headers exchange; else empty. */
  readonly arguments: Readonly<Record<string, ArgumentValue>>;
}

/** A consumer after validation and defaults. */
export interface ConsumerTopology {
  readonly name: string;
  readonly queue: string;
  /** The routing-key patterns bound on the default exchange (the string bindings). */
  readonly bindings: readonly string[];
  /** Every binding of the work queue, on any exchange, in declaration order. */
  readonly queueBindings: readonly QueueBinding[];
  readonly queueType: QueueType;
  /** The tier delays; empty when the consumer retries inside its queue (`inQueue`). */
  readonly delaysMs: readonly number[];
  /** The tier queues; empty when the consumer retries inside its queue. */
  readonly retryQueues: readonly string[];
  readonly parkedQueue: string;
  readonly maxAttempts: number;
  readonly crashLimit: number;
  /** Set when the consumer retries inside its work queue (RabbitMQ 4.3's delayed retry) instead of through tier queues. */
  readonly inQueue: InQueueRetry | undefined;
}

/** A validated, frozen topology. Make one with {@link defineTopology}. */
export interface Topology {
  /** The default exchange. */
  readonly exchange: string;
  /** Every exchange, the default one first. */
  readonly exchanges: ReadonlyMap<string, ExchangeTopology>;
  readonly consumers: ReadonlyMap<string, ConsumerTopology>;
  /** Where fault events go, when the topology asks for them (its exchange is also in `exchanges`). */
  readonly faults: FaultsTopology | undefined;
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
  topology: ['exchange', 'exchanges', 'queueType', 'retry', 'crashLimit', 'faults', 'consumers'],
  consumer: ['bindings', 'queue', 'retry', 'queueType', 'crashLimit'],
  retry: ['delays', 'maxAttempts', 'inQueue'],
  inQueue: ['min', 'max'],
  exchange: ['type', 'durable', 'arguments', 'passive'],
  binding: ['exchange', 'keys', 'headers', 'match'],
} as const;

type Level = keyof typeof KNOWN_KEYS;

const LEVEL_NAMES: Record<Level, string> = { topology: 'the topology', consumer: 'the consumer', retry: 'retry', inQueue: 'retry.inQueue', exchange: 'an exchange', binding: 'a binding' };

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
    const owners = (['consumer', 'topology', 'retry', 'inQueue', 'exchange', 'binding'] as const).filter((l) => l !== level && (KNOWN_KEYS[l] as readonly string[]).includes(key));
    if (owners.length) {
      throw new InvalidOptionError(option, `${key} is not an option of ${where}`, `${key} belongs to ${owners.map((l) => LEVEL_NAMES[l]).join(' or ')}, not to ${LEVEL_NAMES[level]}.`);
    }
    const best = known.map((k) => ({ k, d: distance(key, k) })).sort((a, b) => a.d - b.d)[0];
    const close = best !== undefined && best.d <= Math.max(2, Math.floor(key.length / 3));
    throw new InvalidOptionError(option, `${key} is not an option of ${where}`, close ? `Did you mean ${best.k}? Known options: ${known.join(', ')}.` : `Known options: ${known.join(', ')}.`);
  }
}

const EXCHANGE_TYPES: readonly ExchangeType[] = ['topic', 'direct', 'fanout', 'headers'];

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function checkArguments(value: unknown, option: string, what: string): Record<string, ArgumentValue> {
  if (value === undefined) return {};
  if (!isPlainObject(value)) throw new InvalidOptionError(option, `expected an object of ${what}`);
  const out: Record<string, ArgumentValue> = {};
  for (const [k, v] of Object.entries(value)) {
    if (k.length === 0 || Buffer.byteLength(k, 'utf8') > 255) throw new InvalidOptionError(`${option}.${k}`, 'a name of 1 to 255 bytes is needed');
    if (typeof v !== 'string' && typeof v !== 'boolean' && !(typeof v === 'number' && Number.isFinite(v))) {
      throw new InvalidOptionError(`${option}.${k}`, `${JSON.stringify(v)} is not a string, finite number or boolean`);
    }
    out[k] = v;
  }
  return out;
}

/** The exchanges of a topology, the default one first. */
function checkExchanges(options: TopologyOptions, defaultName: string): Map<string, ExchangeTopology> {
  const declared = options.exchanges ?? {};
  if (!isPlainObject(declared)) throw new InvalidOptionError('exchanges', "expected an object of exchanges by name, e.g. { 'shop.commands': { type: 'direct' } }");
  const out = new Map<string, ExchangeTopology>();
  const names = [defaultName, ...Object.keys(declared).filter((n) => n !== defaultName)];
  for (const name of names) {
    const at = `exchanges.${name}`;
    const decl: unknown = declared[name] ?? {};
    if (!isPlainObject(decl)) throw new InvalidOptionError(at, 'expected an object such as { type: \'direct\' }');
    checkKeys(decl, 'exchange', at);
    const passive = decl['passive'] ?? false;
    if (typeof passive !== 'boolean') throw new InvalidOptionError(`${at}.passive`, `${JSON.stringify(passive)} is not true or false`);
    // RabbitMQ refuses to declare an `amq.` exchange, but its built-in ones can be checked and bound to.
    if (name !== defaultName && !(passive && name.startsWith('amq.') && NAME.test(name))) checkName(name, at);
    const rawType = decl['type'] ?? (passive ? undefined : 'topic');
    if (rawType !== undefined && !EXCHANGE_TYPES.includes(rawType as ExchangeType)) {
      throw new InvalidOptionError(`${at}.type`, `${JSON.stringify(rawType)} is not an exchange type`, `Use one of ${EXCHANGE_TYPES.map((t) => `'${t}'`).join(', ')}.`);
    }
    const type = rawType as ExchangeType | undefined;
    if (name === defaultName && (type === 'fanout' || type === 'headers')) {
      throw new InvalidOptionError(`${at}.type`, `the default exchange '${name}' cannot be a ${type} exchange: string bindings and publish() route by routing key there`, "Make it 'topic' or 'direct', and declare the fanout or headers exchange under another name.");
    }
    const durable = decl['durable'] ?? true;
    if (typeof durable !== 'boolean') throw new InvalidOptionError(`${at}.durable`, `${JSON.stringify(durable)} is not true or false`);
    out.set(name, Object.freeze({ name, type, durable, arguments: Object.freeze(checkArguments(decl['arguments'], `${at}.arguments`, 'exchange arguments')), passive }));
  }
  return out;
}

/** A consumer's bindings, each checked against the type of its exchange. */
function checkBindings(entries: unknown, at: string, exchanges: ReadonlyMap<string, ExchangeTopology>, defaultName: string): { keys: string[]; bindings: QueueBinding[] } {
  if (!Array.isArray(entries) || entries.length === 0) {
    throw new InvalidOptionError(`${at}.bindings`, 'expected a non-empty array of routing-key patterns or { exchange, keys | headers } bindings', "Example: ['order.created', { exchange: 'shop.commands', keys: ['invoice.send'] }]");
  }
  const keys: string[] = [];
  const bindings: QueueBinding[] = [];
  const seen = new Set<string>();
  const add = (b: QueueBinding, option: string): void => {
    const id = JSON.stringify([b.exchange, b.key, Object.entries(b.arguments).sort(([x], [y]) => (x < y ? -1 : 1))]);
    if (seen.has(id)) throw new InvalidOptionError(option, 'repeats a binding given before', 'Name each binding once.');
    seen.add(id);
    bindings.push(Object.freeze(b));
  };
  const checkKey = (k: unknown, option: string): string => {
    if (typeof k !== 'string' || !BINDING.test(k) || Buffer.byteLength(k, 'utf8') > 255) throw new InvalidOptionError(option, `${JSON.stringify(k)} is not a routing-key pattern`);
    return k;
  };
  (entries as unknown[]).forEach((entry, i) => {
    const option = `${at}.bindings[${i}]`;
    if (typeof entry === 'string') {
      keys.push(checkKey(entry, option));
      add({ exchange: defaultName, key: entry, arguments: Object.freeze({}) }, option);
      return;
    }
    if (!isPlainObject(entry)) throw new InvalidOptionError(option, `${JSON.stringify(entry)} is not a routing-key pattern or a { exchange, keys | headers } binding`);
    checkKeys(entry, 'binding', option);
    const name = entry['exchange'];
    const exchange = typeof name === 'string' ? exchanges.get(name) : undefined;
    if (exchange === undefined) {
      throw new InvalidOptionError(`${option}.exchange`, `${JSON.stringify(name)} is not an exchange of the topology (known: ${[...exchanges.keys()].join(', ')})`, 'Declare it under `exchanges` (with `passive: true` if another team owns it).');
    }
    const hasKeys = entry['keys'] !== undefined;
    const hasHeaders = entry['headers'] !== undefined || entry['match'] !== undefined;
    const type = exchange.type;
    if (hasKeys && hasHeaders) throw new InvalidOptionError(option, 'gives both `keys` and `headers`', 'Keys bind on a topic or direct exchange, headers on a headers exchange: give one.');
    if ((type === 'topic' || type === 'direct') && !hasKeys) throw new InvalidOptionError(`${option}.keys`, `the ${type} exchange '${exchange.name}' routes by key, and no keys were given`, "Example: { exchange: '" + exchange.name + "', keys: ['order.created'] }");
    if (type === 'headers' && !hasHeaders) throw new InvalidOptionError(`${option}.headers`, `the headers exchange '${exchange.name}' routes by headers, and none were given`, "Example: { exchange: '" + exchange.name + "', headers: { format: 'pdf' } }");
    if (type === 'fanout' && (hasKeys || hasHeaders)) throw new InvalidOptionError(option, `the fanout exchange '${exchange.name}' sends every message to every bound queue; keys and headers mean nothing there`, `Write { exchange: '${exchange.name}' }.`);
    if (type === 'headers' && hasKeys) throw new InvalidOptionError(`${option}.keys`, `the headers exchange '${exchange.name}' ignores routing keys`, 'Give `headers` instead.');
    if ((type === 'topic' || type === 'direct') && hasHeaders) throw new InvalidOptionError(`${option}.headers`, `the ${type} exchange '${exchange.name}' ignores headers`, 'Give `keys` instead.');
    if (hasKeys) {
      const list = entry['keys'];
      if (!Array.isArray(list) || list.length === 0) throw new InvalidOptionError(`${option}.keys`, 'expected a non-empty array of routing-key patterns');
      list.forEach((k, j) => {
        const key = checkKey(k, `${option}.keys[${j}]`);
        if (exchange.name === defaultName) keys.push(key);
        add({ exchange: exchange.name, key, arguments: Object.freeze({}) }, `${option}.keys[${j}]`);
      });
      return;
    }
    if (hasHeaders) {
      const headers = checkArguments(entry['headers'], `${option}.headers`, 'header values');
      if (Object.keys(headers).length === 0) throw new InvalidOptionError(`${option}.headers`, 'expected at least one header to match');
      for (const h of Object.keys(headers)) {
        if (h.toLowerCase().startsWith('x-')) throw new InvalidOptionError(`${option}.headers.${h}`, 'a header name starting with `x-` is not matched by a headers exchange');
      }
      const match = entry['match'] ?? 'all';
      if (match !== 'all' && match !== 'any') throw new InvalidOptionError(`${option}.match`, `${JSON.stringify(match)} is not 'all' or 'any'`);
      add({ exchange: exchange.name, key: '', arguments: Object.freeze({ 'x-match': match, ...headers }) }, option);
      return;
    }
    add({ exchange: exchange.name, key: '', arguments: Object.freeze({}) }, option);
  });
  return { keys, bindings };
}

/**
 * The retry options of one consumer: its own over the topology's. A level gives tier
 * queues (`delays`) or a retry inside the queue (`inQueue`), never both; the consumer's
 * choice replaces the topology's (its `delays` turn off a topology-wide `inQueue`).
 */
function mergeRetry(top: RetryOptions | undefined, own: RetryOptions | undefined, at: string): RetryOptions & { inQueueAt: string } {
  for (const [level, where] of [[top, 'retry'], [own, `${at}.retry`]] as const) {
    if (level?.delays !== undefined && level.inQueue !== undefined) {
      throw new InvalidOptionError(`${where}.inQueue`, 'is given with `delays`', 'A consumer retries through tier queues (`delays`) or inside its queue (`inQueue`): give one of them.');
    }
  }
  const ownChoice = own?.delays !== undefined || own?.inQueue !== undefined;
  const delays = ownChoice ? own?.delays : top?.delays;
  const inQueue = ownChoice ? own?.inQueue : top?.inQueue;
  const maxAttempts = own?.maxAttempts ?? top?.maxAttempts;
  return {
    ...(delays !== undefined ? { delays } : {}),
    ...(inQueue !== undefined ? { inQueue } : {}),
    ...(maxAttempts !== undefined ? { maxAttempts } : {}),
    inQueueAt: own?.inQueue !== undefined ? `${at}.retry.inQueue` : 'retry.inQueue',
  };
}

/** Longest wait RabbitMQ keeps a message set aside for (its timers count to 2^32 - 1 ms). */
const MAX_IN_QUEUE_DELAY_MS = 4_294_967_295;

/**
 * Validates `inQueue`. It needs a quorum queue (only quorum queues delay retries), and
 * leaves no place for a consumer's own `crashLimit`: the broker's delivery count, which
 * the schedule and the crash-loop guard both read, counts a failure and a death alike.
 */
function checkInQueue(value: unknown, at: string, type: QueueType, crashLimitAt: string | undefined): InQueueRetry {
  if (!isPlainObject(value)) throw new InvalidOptionError(at, `${JSON.stringify(value)} is not an object`, "Example: inQueue: { min: '5s', max: '1m' }");
  checkKeys(value, 'inQueue', at);
  if (value['min'] === undefined || value['max'] === undefined) throw new InvalidOptionError(at, 'needs both `min` and `max`', "Example: inQueue: { min: '5s', max: '1m' }: failure n waits min × n, at most max.");
  const minMs = parseDuration(value['min'], `${at}.min`);
  const maxMs = parseDuration(value['max'], `${at}.max`);
  if (maxMs < minMs) throw new InvalidOptionError(`${at}.max`, `${formatDuration(maxMs)} is shorter than min (${formatDuration(minMs)})`, 'Give a max of at least min.');
  if (maxMs > MAX_IN_QUEUE_DELAY_MS) throw new InvalidOptionError(`${at}.max`, `${maxMs} ms is more than the broker can wait (${MAX_IN_QUEUE_DELAY_MS} ms, about 49 days)`);
  if (type !== 'quorum') {
    throw new InvalidOptionError(at, `needs a quorum queue, and the consumer's queue type is '${type}'`, "Only quorum queues delay retries themselves: set queueType: 'quorum' on the consumer (or the topology), or give `delays` for tier queues.");
  }
  if (crashLimitAt !== undefined) {
    throw new InvalidOptionError(crashLimitAt, 'does not apply to a consumer that retries inside its queue', 'The broker counts a failed run and a run that reached no outcome (a crash) in one delivery count, so a crash loop is stopped by `maxAttempts`: remove crashLimit from this consumer.');
  }
  return Object.freeze({ minMs, maxMs });
}

/**
 * Validates a topology declaration once and returns it frozen, with defaults applied.
 * A key it does not know, at any level, is an {@link InvalidOptionError} naming the key,
 * where it was and the closest known one.
 *
 * @example
 * export const topology = defineTopology({
 *   exchange: 'shop.events',
 *   exchanges: { 'shop.commands': { type: 'direct' }, 'payments.events': { passive: true } },
 *   consumers: {
 *     billing: { bindings: ['order.created'], retry: { delays: ['5s', '1m', '10m'], maxAttempts: 6 } },
 *     email: { bindings: ['order.*', { exchange: 'shop.commands', keys: ['email.send'] }] },
 *     refunds: { bindings: [{ exchange: 'payments.events', keys: ['payment.refunded'] }] },
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
  const exchanges = checkExchanges(options, exchange);
  const faults = options.faults === undefined ? undefined : checkFaults(options.faults, checkName);
  if (faults !== undefined) {
    const taken = exchanges.get(faults.exchange);
    if (taken !== undefined) throw new InvalidOptionError('faults.exchange', `'${faults.exchange}' is already an exchange of the topology`, 'Give fault events an exchange of their own, so no work queue receives them by accident.');
    exchanges.set(faults.exchange, Object.freeze({ name: faults.exchange, type: 'topic' as const, durable: true, arguments: Object.freeze({}), passive: false }));
  }
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
    const bound = checkBindings(decl.bindings, at, exchanges, exchange);
    const retry = mergeRetry(options.retry, decl.retry, at);
    const consumerType = checkQueueType(decl.queueType ?? queueType, `${at}.queueType`);
    const inQueue = retry.inQueue === undefined ? undefined : checkInQueue(retry.inQueue, retry.inQueueAt, consumerType, decl.crashLimit !== undefined ? `${at}.crashLimit` : undefined);
    const delays = inQueue !== undefined ? [] : (retry.delays ?? TOPOLOGY_DEFAULTS.delays);
    if (!Array.isArray(delays)) throw new InvalidOptionError(`${at}.retry.delays`, 'expected an array of durations');
    const delaysMs = delays.map((d, i) => parseDuration(d, `${at}.retry.delays[${i}]`));
    if (new Set(delaysMs).size !== delaysMs.length) throw new InvalidOptionError(`${at}.retry.delays`, `${JSON.stringify(delays)} repeats a delay`, 'Each tier is one queue, so each delay appears once.');
    const maxAttempts = checkInt(retry.maxAttempts ?? TOPOLOGY_DEFAULTS.maxAttempts, `${at}.retry.maxAttempts`, 1, 100);
    const topo: ConsumerTopology = Object.freeze({
      name,
      queue,
      bindings: Object.freeze(bound.keys),
      queueBindings: Object.freeze(bound.bindings),
      queueType: consumerType,
      delaysMs: Object.freeze(delaysMs),
      retryQueues: Object.freeze(delaysMs.map((ms) => retryQueueName(queue, ms))),
      parkedQueue: parkedQueueName(queue),
      maxAttempts,
      crashLimit: checkInt(decl.crashLimit ?? crashLimit, `${at}.crashLimit`, 1, 1000),
      inQueue,
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
    exchanges: new Map(exchanges) as ReadonlyMap<string, ExchangeTopology>,
    consumers: frozen,
    faults,
    consumer(name: string): ConsumerTopology {
      const found = frozen.get(name);
      if (!found) throw new UnknownConsumerError(name, [...frozen.keys()]);
      return found;
    },
  });
}
