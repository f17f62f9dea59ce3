import type * as amqp from 'amqplib';
import { TopologyDriftError, type TopologyDifference } from '../errors.js';
import type { ManagementClient } from '../management/client.js';
import type { Topology } from './declaration.js';
import { bindingName, diffBindings, diffArguments, topologySpec, unbindHint, type BindingSpec, type QueueSpec } from './plan.js';

/** What a plan found for one exchange, queue or binding. */
export interface PlanEntry {
  readonly kind: 'queue' | 'exchange' | 'binding';
  /** The exchange or queue name; a binding in words (`exchange -> queue with routing key K`). */
  readonly name: string;
  /**
   * `create`: missing, would be created; `ok`: matches; `differs`: exists with other
   * arguments; `extra`: a binding to a work queue that the declaration does not name
   * (never removed by warren; `hint` says how to remove it by hand).
   */
  readonly status: 'create' | 'ok' | 'differs' | 'extra';
  readonly differences: readonly TopologyDifference[];
  /** For an `extra` binding: the command that removes it, for a person to run. */
  readonly hint?: string;
}

/** The result of {@link planTopology}: nothing was changed to make it. */
export interface TopologyPlan {
  readonly entries: readonly PlanEntry[];
  /** Exchanges, queues and bindings that are missing (apply creates them). */
  readonly toCreate: readonly PlanEntry[];
  /** Arguments that differ, and bindings the declaration does not name. */
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

/**
 * Declares the exchange, every queue and binding of a topology. Idempotent: run it on
 * every start and reconnect. A queue that exists with other arguments raises a
 * {@link TopologyDriftError} naming the queue, the argument and both values; nothing is deleted.
 */
export async function declareTopology(model: amqp.ChannelModel, topology: Topology, only?: string): Promise<void> {
  const spec = topologySpec(topology);
  const ch = await probeChannel(model);
  try {
    for (const ex of spec.exchanges) {
      try {
        await ch.assertExchange(ex.name, ex.type, { durable: true });
      } catch (error) {
        throw asDrift(error, { kind: 'exchange', name: ex.name }) ?? error;
      }
    }
    for (const q of spec.queues) {
      if (only !== undefined && q.consumer !== only) continue;
      try {
        await ch.assertQueue(q.name, { durable: true, arguments: { ...q.arguments } });
      } catch (error) {
        throw asDrift(error, { kind: 'queue', name: q.name }) ?? error;
      }
    }
    for (const b of spec.bindings) {
      if (only !== undefined && topology.consumer(only).queue !== b.queue) continue;
      await ch.bindQueue(b.queue, b.exchange, b.pattern);
    }
  } finally {
    await ch.close().catch(() => undefined);
  }
}

async function planByAmqp(model: amqp.ChannelModel, queues: readonly QueueSpec[], exchange: string): Promise<PlanEntry[]> {
  const entries: PlanEntry[] = [];
  let ch = await probeChannel(model);
  try {
    try {
      await ch.checkExchange(exchange);
      try {
        await ch.assertExchange(exchange, 'topic', { durable: true });
        entries.push({ kind: 'exchange', name: exchange, status: 'ok', differences: [] });
      } catch (error) {
        const drift = asDrift(error, { kind: 'exchange', name: exchange });
        if (!drift) throw error;
        entries.push({ kind: 'exchange', name: exchange, status: 'differs', differences: drift.differences });
        ch = await probeChannel(model);
      }
    } catch (error) {
      if (!isChannelClosing(error, 404)) throw error;
      entries.push({ kind: 'exchange', name: exchange, status: 'create', differences: [] });
      ch = await probeChannel(model);
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
        await ch.assertQueue(q.name, { durable: true, arguments: { ...q.arguments } });
        entries.push({ kind: 'queue', name: q.name, status: 'ok', differences: [] });
      } catch (error) {
        const drift = asDrift(error, { kind: 'queue', name: q.name });
        if (!drift) throw error;
        entries.push({ kind: 'queue', name: q.name, status: 'differs', differences: drift.differences });
        ch = await probeChannel(model);
      }
    }
  } finally {
    await ch.close().catch(() => undefined);
  }
  return entries;
}

async function planBindings(api: ManagementClient, bindings: readonly BindingSpec[], exchange: string, exchangeExists: boolean): Promise<PlanEntry[]> {
  const actual = exchangeExists ? ((await api.exchangeBindings(exchange)) ?? []) : [];
  const diff = diffBindings(bindings, actual);
  const missing = new Set(diff.missing);
  const entries: PlanEntry[] = bindings.map((b) => ({ kind: 'binding', name: bindingName(b.exchange, b.queue, b.pattern), status: missing.has(b) ? 'create' : 'ok', differences: [] }));
  for (const b of diff.extra) {
    const name = bindingName(b.source, b.destination, b.routing_key) + (Object.keys(b.arguments ?? {}).length ? ` and arguments ${JSON.stringify(b.arguments)}` : '');
    const difference: TopologyDifference = { kind: 'binding', name, argument: 'binding', expected: undefined, actual: b.routing_key };
    entries.push({ kind: 'binding', name, status: 'extra', differences: [difference], hint: unbindHint(b, api.vhost) });
  }
  return entries;
}

async function planByManagement(api: ManagementClient, queues: readonly QueueSpec[], exchange: string, bindings: readonly BindingSpec[]): Promise<PlanEntry[]> {
  const entries: PlanEntry[] = [];
  const ex = await api.exchange(exchange);
  if (!ex) entries.push({ kind: 'exchange', name: exchange, status: 'create', differences: [] });
  else if (ex.type !== 'topic') entries.push({ kind: 'exchange', name: exchange, status: 'differs', differences: [{ kind: 'exchange', name: exchange, argument: 'type', expected: 'topic', actual: ex.type }] });
  else entries.push({ kind: 'exchange', name: exchange, status: 'ok', differences: [] });
  for (const q of queues) {
    const info = await api.queue(q.name);
    if (!info) {
      entries.push({ kind: 'queue', name: q.name, status: 'create', differences: [] });
      continue;
    }
    const differences: TopologyDifference[] = diffArguments(q.arguments, info.arguments ?? {}).map((d) => ({ kind: 'queue', name: q.name, ...d }));
    if (info.durable === false) differences.push({ kind: 'queue', name: q.name, argument: 'durable', expected: true, actual: false });
    entries.push({ kind: 'queue', name: q.name, status: differences.length ? 'differs' : 'ok', differences });
  }
  entries.push(...(await planBindings(api, bindings, exchange, ex !== undefined)));
  return entries;
}

/**
 * Compares the broker with the declaration and reports what would be created and
 * what differs, changing nothing. Uses the management API when given (every
 * argument is compared, and the bindings: missing ones are to create, a binding from the
 * exchange to a work queue that the declaration does not name is drift), else AMQP (the
 * first differing argument of each queue; bindings unchecked, see `bindingsChecked`).
 */
export async function planTopology(model: amqp.ChannelModel, topology: Topology, management?: ManagementClient): Promise<TopologyPlan> {
  const spec = topologySpec(topology);
  let entries: PlanEntry[];
  let method: TopologyPlan['method'] = 'amqp';
  if (management && (await management.available())) {
    entries = await planByManagement(management, spec.queues, topology.exchange, spec.bindings);
    method = 'management';
  } else {
    entries = await planByAmqp(model, spec.queues, topology.exchange);
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

