import type * as amqp from 'amqplib';
import type { ManagementClient, QueueInfo } from '../management/client.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import { bindingName, diffBindings, topologySpec, unbindHint, type BrokerBinding } from '../topology/plan.js';

/** One queue's state. Fields the source cannot tell are `undefined`. */
export interface QueueState {
  readonly name: string;
  readonly exists: boolean;
  /** Messages ready for delivery. */
  readonly ready: number | undefined;
  /** Messages delivered and not yet acknowledged (management API only). */
  readonly unacked: number | undefined;
  /** Consumers attached. */
  readonly consumers: number | undefined;
  /**
   * Redeliveries per second: deliveries that failed or died before an outcome
   * (management API only; absent until the queue has traffic). Never for a parked
   * queue: its redeliveries are walks reading it (each walk's kept messages come back
   * redelivered), not failures.
   */
  readonly redeliverRate: number | undefined;
  /**
   * Messages set aside in the queue by its delayed retry (`retry.inQueue`, RabbitMQ 4.3),
   * counted in neither `ready` nor `unacked` (management API only: `messages_delayed`).
   */
  readonly delayed?: number;
}

/** A retry tier: a queue and its delay. */
export interface RetryTierState extends QueueState {
  readonly delayMs: number;
}

/** The queues of one consumer. */
export interface ConsumerState {
  readonly consumer: string;
  readonly work: QueueState;
  readonly retries: readonly RetryTierState[];
  readonly parked: QueueState;
}

/** Something an operator must look at. */
export interface StatusProblem {
  readonly consumer: string;
  readonly queue: string;
  /**
   * `parked`: messages are parked; `no-consumer`: a work queue has messages and no consumer;
   * `missing-queue`: a declared queue does not exist; `missing-binding`: a declared binding
   * does not exist, so messages with its routing key never reach the consumer;
   * `extra-binding`: the work queue is bound from the exchange with a key the declaration
   * does not name (bindings are read through the management API only).
   */
  readonly kind: 'parked' | 'no-consumer' | 'missing-queue' | 'missing-binding' | 'extra-binding';
  readonly message: string;
}

/** What {@link readStatus} found. */
export interface StatusReport {
  /** `management` when the management API added its figures to the live AMQP reading; `amqp` when it did not answer. */
  readonly source: 'management' | 'amqp';
  /** Why the management API was not used, when it was not. */
  readonly managementUnavailable: string | undefined;
  /** Figures the source could not give (empty with the management API). */
  readonly missing: readonly string[];
  /** Whether bindings were compared with the declaration (only the management API lists them). */
  readonly bindingsChecked: boolean;
  readonly consumers: readonly ConsumerState[];
  readonly problems: readonly StatusProblem[];
  /** True when there is no problem. */
  readonly ok: boolean;
}

/** Options of {@link readStatus}. */
export interface StatusOptions {
  /** Adds unacknowledged counts and redelivery rates when it answers. */
  management?: ManagementClient;
  /** Only these consumers. @default every consumer of the topology */
  consumers?: readonly string[];
}

const AMQP_MISSING = ['unacknowledged counts', 'redelivery rates'] as const;

/** Adds what only the management API knows (unacknowledged count, redelivery rate) to a live AMQP reading. */
function withInfo(q: QueueState, info: QueueInfo | undefined, redeliveries = true): QueueState {
  if (!q.exists || !info) return q;
  return { ...q, unacked: info.messages_unacknowledged ?? 0, redeliverRate: redeliveries ? info.message_stats?.redeliver_details?.rate : undefined, ...(info.messages_delayed !== undefined ? { delayed: info.messages_delayed } : {}) };
}

function overlay(states: readonly ConsumerState[], all: ReadonlyMap<string, QueueInfo>): ConsumerState[] {
  return states.map((c) => ({
    consumer: c.consumer,
    work: withInfo(c.work, all.get(c.work.name)),
    retries: c.retries.map((r) => ({ ...withInfo(r, all.get(r.name)), delayMs: r.delayMs })),
    // A parked queue's redeliveries are operators' walks reading it, not failures.
    parked: withInfo(c.parked, all.get(c.parked.name), false),
  }));
}

async function byAmqp(model: amqp.ChannelModel, consumers: readonly ConsumerTopology[]): Promise<ConsumerState[]> {
  let ch: amqp.Channel | undefined;
  const open = async () => {
    const c = await model.createChannel();
    c.on('error', () => undefined);
    return c;
  };
  const check = async (name: string): Promise<QueueState> => {
    ch ??= await open();
    try {
      const ok = await ch.checkQueue(name);
      return { name, exists: true, ready: ok.messageCount, unacked: undefined, consumers: ok.consumerCount, redeliverRate: undefined };
    } catch (error) {
      // A 404 closes the channel; the next check opens another.
      ch = undefined;
      if (typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 404) {
        return { name, exists: false, ready: undefined, unacked: undefined, consumers: undefined, redeliverRate: undefined };
      }
      throw error;
    }
  };
  try {
    const out: ConsumerState[] = [];
    for (const c of consumers) {
      const work = await check(c.queue);
      const retries: RetryTierState[] = [];
      for (const [i, q] of c.retryQueues.entries()) retries.push({ ...(await check(q)), delayMs: c.delaysMs[i] as number });
      out.push({ consumer: c.name, work, retries, parked: await check(c.parkedQueue) });
    }
    return out;
  } finally {
    const last = ch as amqp.Channel | undefined;
    await last?.close().catch(() => undefined);
  }
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/**
 * The problems an on-call engineer must see: anything parked, a work queue with
 * messages and no consumer (a broken deploy), a declared queue that does not exist. Pure.
 */
export function findProblems(consumers: readonly ConsumerState[]): StatusProblem[] {
  const problems: StatusProblem[] = [];
  for (const c of consumers) {
    for (const q of [c.work, ...c.retries, c.parked]) {
      if (!q.exists) problems.push({ consumer: c.consumer, queue: q.name, kind: 'missing-queue', message: `queue ${q.name} does not exist; declare the topology (warren topology apply)` });
    }
    const parked = (c.parked.ready ?? 0) + (c.parked.unacked ?? 0);
    if (parked > 0) problems.push({ consumer: c.consumer, queue: c.parked.name, kind: 'parked', message: `${plural(parked, 'message')} parked; see warren parked list ${c.consumer}` });
    const waiting = (c.work.ready ?? 0) + (c.work.unacked ?? 0);
    if (c.work.exists && waiting > 0 && c.work.consumers === 0) {
      problems.push({ consumer: c.consumer, queue: c.work.name, kind: 'no-consumer', message: `${plural(waiting, 'message')} in ${c.work.name} and no consumer attached` });
    }
  }
  return problems;
}

/**
 * Binding problems of these consumers: a declared binding the broker lacks, and a binding
 * from one of the topology's exchanges to a work queue that the declaration does not name. A
 * consumer whose work queue is missing is skipped (its missing queue is the problem). Pure.
 */
export function findBindingProblems(
  topology: Topology,
  consumers: readonly ConsumerState[],
  actual: readonly BrokerBinding[],
  vhost = '/',
): StatusProblem[] {
  const present = new Map(consumers.filter((c) => c.work.exists).map((c) => [c.work.name, c.consumer]));
  const wanted = topologySpec(topology).bindings.filter((b) => present.has(b.queue));
  const diff = diffBindings(wanted, actual.filter((b) => present.has(b.destination)));
  const problems: StatusProblem[] = [];
  for (const b of diff.missing) {
    const consumer = present.get(b.queue) as string;
    problems.push({
      consumer,
      queue: b.queue,
      kind: 'missing-binding',
      message: `binding ${bindingName(b.exchange, b.queue, b.pattern, b.arguments)} is missing: those messages never reach ${consumer}; declare the topology (warren topology apply)`,
    });
  }
  for (const b of diff.extra) {
    problems.push({
      consumer: present.get(b.destination) as string,
      queue: b.destination,
      kind: 'extra-binding',
      message: `binding ${bindingName(b.source, b.destination, b.routing_key, b.arguments)} is not in the declaration; add it there, or remove it: ${unbindHint(b, vhost)}`,
    });
  }
  return problems;
}

/**
 * Reads the state of every consumer's queues: work queue ready and unacknowledged,
 * consumers attached, redelivery rate, each retry tier's depth and the parked depth.
 * Depths, consumer counts and existence are read live over AMQP (a passive declare per
 * queue); the management API, when it answers, adds unacknowledged counts and
 * redelivery rates (its figures lag by its stats interval, 5 s by default), and the
 * bindings of the work queues, compared with the declaration. Without it the report
 * says what is missing and `bindingsChecked` is false.
 *
 * @example
 * const report = await readStatus(model, topology, { management: new ManagementClient() });
 * if (!report.ok) for (const p of report.problems) console.error(p.message);
 */
export async function readStatus(model: amqp.ChannelModel, topology: Topology, options: StatusOptions = {}): Promise<StatusReport> {
  const consumers = (options.consumers ?? [...topology.consumers.keys()]).map((name) => topology.consumer(name));
  const mgmt = options.management;
  const [live, api] = await Promise.all([
    byAmqp(model, consumers),
    mgmt
      ? Promise.all([mgmt.queues(), Promise.all([...topology.exchanges.keys()].map((name) => mgmt.exchangeBindings(name)))]).then(
          ([queues, bindings]) => ({ queues: new Map(queues.map((q) => [q.name, q])), bindings: bindings.flatMap((b) => b ?? []), error: undefined }),
          (error: unknown) => ({ queues: undefined, bindings: undefined, error: error instanceof Error ? error.message : String(error) }),
        )
      : Promise.resolve({ queues: undefined, bindings: undefined, error: 'no management API was given' }),
  ]);
  if (mgmt && api.queues) {
    const states = overlay(live, api.queues);
    const problems = [...findProblems(states), ...findBindingProblems(topology, states, api.bindings ?? [], mgmt.vhost)];
    return { source: 'management', managementUnavailable: undefined, missing: [], bindingsChecked: true, consumers: states, problems, ok: problems.length === 0 };
  }
  const problems = findProblems(live);
  return { source: 'amqp', managementUnavailable: api.error, missing: [...AMQP_MISSING], bindingsChecked: false, consumers: live, problems, ok: problems.length === 0 };
}
