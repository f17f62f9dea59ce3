import type * as amqp from 'amqplib';
import { ExchangeNotFoundError, TopologyDriftError, type TopologyDifference } from '../errors.js';
import type { ManagementClient } from '../management/client.js';
import type { Topology } from './declaration.js';
import { bindingName, diffBindings, diffArguments, QUEUE_TYPE_ARGUMENT, topologySpec, unbindHint, untypedClassic, type BindingSpec, type ExchangeSpec, type QueueSpec } from './plan.js';
import { closeChannel } from '../connection/channel.js';
import { checkTopologyFeatures } from './broker-features.js';

/** What a plan found for one exchange, queue or binding. */
export interface PlanEntry {
  readonly kind: 'queue' | 'exchange' | 'binding';
  /** The exchange or queue name; a binding in words (`exchange -> queue with routing key K`). */
  readonly name: string;
  /**
   * `create`: missing, would be created; `ok`: matches; `differs`: exists with other
   * arguments; `extra`: a binding to a work queue that the declaration does not name
   * (never removed by warren; `hint` says how to remove it by hand); `missing`: a passive
   * exchange (owned elsewhere) that does not exist, which warren never creates (`hint`
   * says what to do).
   */
  readonly status: 'create' | 'ok' | 'differs' | 'extra' | 'missing';
  readonly differences: readonly TopologyDifference[];
  /** For an `extra` binding: the command that removes it; for a `missing` exchange: who must create it. */
  readonly hint?: string;
}

/** The result of {@link planTopology}: nothing was changed to make it. */
export interface TopologyPlan {
  readonly entries: readonly PlanEntry[];
  /** Exchanges, queues and bindings that are missing (apply creates them). */
  readonly toCreate: readonly PlanEntry[];
  /** Arguments that differ, bindings the declaration does not name, and passive exchanges that do not exist. */
  readonly drift: readonly TopologyDifference[];
  /** `management` reads every argument and the bindings; `amqp` learns only the first differing argument per queue. */
  readonly method: 'management' | 'amqp';
  /**
   * Whether the bindings were compared. Only the management API lists bindings; over
   * AMQP a binding can be declared but not looked up, so a missing or extra binding
   * goes unseen and the plan says so here.
   */
  readonly bindingsChecked: boolean;
}

const INEQUIVALENT = /inequivalent arg '([^']+)' for (queue|exchange) '([^']+)' in vhost '[^']*': received (?:the value '([^']*)'|'([^']*)'|(none))(?: of type '[^']*')? but current is (?:the value '([^']*)'|'([^']*)'|(none))/;

/** Reads a 406 PRECONDITION_FAILED text into a difference, when it has the usual form. */
export function parseInequivalent(message: string): TopologyDifference | undefined {
  const m = INEQUIVALENT.exec(message);
  if (!m) return undefined;
  const received = m[6] ? undefined : (m[4] ?? m[5]);
  const current = m[9] ? undefined : (m[7] ?? m[8]);
  return { kind: m[2] as 'queue' | 'exchange', name: m[3] as string, argument: m[1] as string, expected: received, actual: current };
}

function isChannelClosing(error: unknown, code: number): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === code;
}

function asDrift(error: unknown, fallback: { kind: 'queue' | 'exchange'; name: string }): TopologyDriftError | undefined {
  if (!isChannelClosing(error, 406)) return undefined;
  const message = error instanceof Error ? error.message : String(error);
  const diff = parseInequivalent(message) ?? { ...fallback, argument: '?', expected: '?', actual: '?' };
  return new TopologyDriftError([diff], { cause: error });
}

/** Opens a channel whose errors are expected (406, 404) and must not crash the process. */
async function probeChannel(model: amqp.ChannelModel): Promise<amqp.Channel> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  return ch;
}

/** The consumers whose bindings need an exchange, for an error that names them. */
function consumersOf(topology: Topology, exchange: string): string[] {
  return [...topology.consumers.values()].filter((c) => c.queueBindings.some((b) => b.exchange === exchange)).map((c) => c.name);
}

/**
 * Checks that a passive exchange exists, on a channel of its own (a 404 closes the
 * channel it happens on). Throws {@link ExchangeNotFoundError} when it does not.
 */
async function checkPassive(model: amqp.ChannelModel, topology: Topology, name: string): Promise<void> {
  const ch = await probeChannel(model);
  try {
    await ch.checkExchange(name);
  } catch (error) {
    if (isChannelClosing(error, 404)) throw new ExchangeNotFoundError(name, consumersOf(topology, name), { cause: error });
    throw error;
  } finally {
    await closeChannel(ch);
  }
}

/**
 * Declares a queue of the topology on `ch`, and resolves with the channel to go on with.
 * A queue that stores no type while the declaration says classic (see
 * {@link untypedClassic}) is declared again without `x-queue-type`, on a new channel (the
 * refusal closed the first): it is the same classic queue. Any other refusal is a
 * {@link TopologyDriftError}.
 */
async function assertQueueSpec(model: amqp.ChannelModel, ch: amqp.Channel, q: QueueSpec): Promise<amqp.Channel> {
  try {
    await ch.assertQueue(q.name, { durable: true, arguments: { ...q.arguments } });
    return ch;
  } catch (error) {
    const drift = asDrift(error, { kind: 'queue', name: q.name });
    const first = drift?.differences[0];
    if (drift === undefined || first === undefined || !untypedClassic(first)) throw drift ?? error;
    const { [QUEUE_TYPE_ARGUMENT]: _type, ...untyped } = q.arguments;
    const again = await probeChannel(model);
    try {
      await again.assertQueue(q.name, { durable: true, arguments: untyped });
      return again;
    } catch (error2) {
      await closeChannel(again);
      throw asDrift(error2, { kind: 'queue', name: q.name }) ?? error2;
    }
  }
}

function exchangeOptions(ex: ExchangeSpec): amqp.Options.AssertExchange {
  return Object.keys(ex.arguments).length ? { durable: ex.durable, arguments: { ...ex.arguments } } : { durable: ex.durable };
}

/**
 * Declares the exchanges, every queue and binding of a topology. Idempotent: run it on
 * every start and reconnect. A queue or exchange that exists with other arguments raises
 * a {@link TopologyDriftError} naming it, the argument and both values; nothing is
 * deleted. A passive exchange is only checked: when it does not exist, an
 * {@link ExchangeNotFoundError} names it and nothing of the topology is declared. A
 * consumer that retries inside its queue (`retry.inQueue`) on a broker before RabbitMQ
 * 4.3 is an `UnsupportedBrokerError`, also before anything is declared.
 */
export async function declareTopology(model: amqp.ChannelModel, topology: Topology, only?: string): Promise<void> {
  // Before anything is declared: an older broker would take a retry-in-queue declaration and ignore it.
  checkTopologyFeatures(model, topology, only);
  const spec = topologySpec(topology);
  for (const ex of spec.exchanges) if (ex.passive) await checkPassive(model, topology, ex.name);
  let ch = await probeChannel(model);
  try {
    for (const ex of spec.exchanges) {
      if (ex.passive) continue;
      try {
        await ch.assertExchange(ex.name, ex.type ?? 'topic', exchangeOptions(ex));
      } catch (error) {
        throw asDrift(error, { kind: 'exchange', name: ex.name }) ?? error;
      }
    }
    for (const q of spec.queues) {
      if (only !== undefined && q.consumer !== only) continue;
      ch = await assertQueueSpec(model, ch, q);
    }
    for (const b of spec.bindings) {
      if (only !== undefined && topology.consumer(only).queue !== b.queue) continue;
      await ch.bindQueue(b.queue, b.exchange, b.pattern, b.arguments === undefined ? undefined : { ...b.arguments });
    }
  } finally {
    await closeChannel(ch);
  }
}

/** The plan entry of a passive exchange that does not exist. */
function missingPassive(topology: Topology, name: string): PlanEntry {
  const error = new ExchangeNotFoundError(name, consumersOf(topology, name));
  return { kind: 'exchange', name, status: 'missing', differences: [{ kind: 'exchange', name, argument: 'exists', expected: true, actual: false }], hint: error.message };
}

async function planByAmqp(model: amqp.ChannelModel, topology: Topology, exchanges: readonly ExchangeSpec[], queues: readonly QueueSpec[]): Promise<PlanEntry[]> {
  const entries: PlanEntry[] = [];
  let ch = await probeChannel(model);
  try {
    for (const ex of exchanges) {
      try {
        await ch.checkExchange(ex.name);
      } catch (error) {
        if (!isChannelClosing(error, 404)) throw error;
        entries.push(ex.passive ? missingPassive(topology, ex.name) : { kind: 'exchange', name: ex.name, status: 'create', differences: [] });
        ch = await probeChannel(model);
        continue;
      }
      // A passive exchange is never declared, not even to compare it.
      if (ex.passive) {
        entries.push({ kind: 'exchange', name: ex.name, status: 'ok', differences: [] });
        continue;
      }
      try {
        await ch.assertExchange(ex.name, ex.type ?? 'topic', exchangeOptions(ex));
        entries.push({ kind: 'exchange', name: ex.name, status: 'ok', differences: [] });
      } catch (error) {
        const drift = asDrift(error, { kind: 'exchange', name: ex.name });
        if (!drift) throw error;
        entries.push({ kind: 'exchange', name: ex.name, status: 'differs', differences: drift.differences });
        ch = await probeChannel(model);
      }
    }
    for (const q of queues) {
      try {
        await ch.checkQueue(q.name);
      } catch (error) {
        if (!isChannelClosing(error, 404)) throw error;
        entries.push({ kind: 'queue', name: q.name, status: 'create', differences: [] });
        ch = await probeChannel(model);
        continue;
      }
      // The queue exists, so declaring it creates nothing: either a no-op or a 406 naming a difference.
      try {
        ch = await assertQueueSpec(model, ch, q);
        entries.push({ kind: 'queue', name: q.name, status: 'ok', differences: [] });
      } catch (error) {
        if (!(error instanceof TopologyDriftError)) throw error;
        entries.push({ kind: 'queue', name: q.name, status: 'differs', differences: error.differences });
        ch = await probeChannel(model);
      }
    }
  } finally {
    await closeChannel(ch);
  }
  return entries;
}

async function planBindings(api: ManagementClient, bindings: readonly BindingSpec[], existing: readonly string[]): Promise<PlanEntry[]> {
  const actual = (await Promise.all(existing.map(async (name) => (await api.exchangeBindings(name)) ?? []))).flat();
  const diff = diffBindings(bindings, actual);
  const missing = new Set(diff.missing);
  const entries: PlanEntry[] = bindings.map((b) => ({ kind: 'binding', name: bindingName(b.exchange, b.queue, b.pattern, b.arguments), status: missing.has(b) ? 'create' : 'ok', differences: [] }));
  for (const b of diff.extra) {
    const name = bindingName(b.source, b.destination, b.routing_key, b.arguments);
    const difference: TopologyDifference = { kind: 'binding', name, argument: 'binding', expected: undefined, actual: b.routing_key };
    entries.push({ kind: 'binding', name, status: 'extra', differences: [difference], hint: unbindHint(b, api.vhost) });
  }
  return entries;
}

/** How an exchange on the broker differs from its declaration: type, durability, arguments. A passive one only by type, when one was given. */
function exchangeDifferences(ex: ExchangeSpec, info: { type: string; durable: boolean; arguments?: Readonly<Record<string, unknown>> }): TopologyDifference[] {
  const out: TopologyDifference[] = [];
  if (ex.type !== undefined && info.type !== ex.type) out.push({ kind: 'exchange', name: ex.name, argument: 'type', expected: ex.type, actual: info.type });
  if (ex.passive) return out;
  if (info.durable !== ex.durable) out.push({ kind: 'exchange', name: ex.name, argument: 'durable', expected: ex.durable, actual: info.durable });
  for (const d of diffArguments(ex.arguments, info.arguments ?? {})) out.push({ kind: 'exchange', name: ex.name, ...d });
  return out;
}

async function planByManagement(api: ManagementClient, topology: Topology, exchanges: readonly ExchangeSpec[], queues: readonly QueueSpec[], bindings: readonly BindingSpec[]): Promise<PlanEntry[]> {
  const entries: PlanEntry[] = [];
  const existing: string[] = [];
  for (const ex of exchanges) {
    const info = await api.exchange(ex.name);
    if (!info) {
      entries.push(ex.passive ? missingPassive(topology, ex.name) : { kind: 'exchange', name: ex.name, status: 'create', differences: [] });
      continue;
    }
    existing.push(ex.name);
    const differences = exchangeDifferences(ex, info);
    entries.push({ kind: 'exchange', name: ex.name, status: differences.length ? 'differs' : 'ok', differences });
  }
  for (const q of queues) {
    const info = await api.queue(q.name);
    if (!info) {
      entries.push({ kind: 'queue', name: q.name, status: 'create', differences: [] });
      continue;
    }
    const differences: TopologyDifference[] = diffArguments(q.arguments, info.arguments ?? {}, info.type).map((d) => ({ kind: 'queue', name: q.name, ...d }));
    if (info.durable === false) differences.push({ kind: 'queue', name: q.name, argument: 'durable', expected: true, actual: false });
    entries.push({ kind: 'queue', name: q.name, status: differences.length ? 'differs' : 'ok', differences });
  }
  entries.push(...(await planBindings(api, bindings, existing)));
  return entries;
}

/**
 * Compares the broker with the declaration and reports what would be created and
 * what differs, changing nothing. Uses the management API when given (every
 * argument is compared, and the bindings: missing ones are to create, a binding from one
 * of the topology's exchanges to a work queue that the declaration does not name is
 * drift), else AMQP (the first differing argument of each queue and exchange; bindings
 * unchecked, see `bindingsChecked`). A passive exchange that does not exist is `missing`,
 * and drift: warren never creates it.
 */
export async function planTopology(model: amqp.ChannelModel, topology: Topology, management?: ManagementClient): Promise<TopologyPlan> {
  const spec = topologySpec(topology);
  let entries: PlanEntry[];
  let method: TopologyPlan['method'] = 'amqp';
  if (management && (await management.available())) {
    entries = await planByManagement(management, topology, spec.exchanges, spec.queues, spec.bindings);
    method = 'management';
  } else {
    entries = await planByAmqp(model, topology, spec.exchanges, spec.queues);
  }
  return {
    entries,
    toCreate: entries.filter((e) => e.status === 'create'),
    drift: entries.flatMap((e) => e.differences),
    method,
    bindingsChecked: method === 'management',
  };
}

/**
 * Throws {@link TopologyDriftError} when the broker differs from the declaration: an
 * argument, or (through the management API) a binding the declaration does not name.
 */
export async function verifyTopology(model: amqp.ChannelModel, topology: Topology, management?: ManagementClient): Promise<TopologyPlan> {
  const plan = await planTopology(model, topology, management);
  if (plan.drift.length) throw new TopologyDriftError(plan.drift);
  return plan;
}

