/**
 * What a chaos run does, decided from its seed alone: which message fails how, and
 * when each fault is injected. Pure, so a seed always gives the same run plan.
 */
import { defineTopology, type Topology } from '../src/index.js';

/** What the handler does with a message. */
export type MessageKind =
  /** Succeeds on its first run. */
  | 'ok'
  /** Fails transiently on its first `failures` runs (climbing the delay ladder), then succeeds. */
  | 'transient'
  /** Fails permanently: parked on its first run, never a side effect. */
  | 'permanent'
  /**
   * Waits for the `inventory` dependency in the retry table on its first run, and again
   * while inventory is down; succeeds once it is back.
   */
  | 'wait'
  /** Waits like `wait`, for tenant `held`, which the run pauses at the start and never resumes. */
  | 'held';

/** A message of the run: its number, what it does, how it is published. */
export interface PlannedMessage {
  readonly seq: number;
  readonly kind: MessageKind;
  /** Transient failures before success (`transient` only). */
  readonly failures: number;
  /** `outbox`: added in a transaction, published by the relay; `publisher`: `warren.publish`. */
  readonly via: 'outbox' | 'publisher';
}

/** The body every message carries. */
export interface ChaosPayload {
  readonly seq: number;
  readonly kind: MessageKind;
  readonly failures: number;
}

/** One fault, at a time from the start of the run. */
export type ChaosEvent =
  | { readonly at: number; readonly kind: 'kill-consumer'; readonly target: number }
  | { readonly at: number; readonly kind: 'close-connection'; readonly pick: number }
  | { readonly at: number; readonly kind: 'restart-broker' }
  /** kill -9 of the (single) node's Erlang VM, then a start on the same data. */
  | { readonly at: number; readonly kind: 'kill-broker' }
  /** Cluster: a clean stop of the node consumer-1 is connected to; started again once the consumers resumed. */
  | { readonly at: number; readonly kind: 'stop-consumer-node' }
  /** Cluster: a clean stop of the node leading the work queue; started again once the consumers resumed. */
  | { readonly at: number; readonly kind: 'stop-leader-node' }
  /** Cluster: kill -9 of the node leading the work queue, then a start on the same data. */
  | { readonly at: number; readonly kind: 'kill-node' }
  | { readonly at: number; readonly kind: 'restart-postgres' }
  | { readonly at: number; readonly kind: 'kill-relay' }
  | { readonly at: number; readonly kind: 'kill-scheduler' }
  /** SIGKILL of the archive's ingester (kill -9: no stop, no ack of what it holds). */
  | { readonly at: number; readonly kind: 'kill-ingester' }
  /**
   * The ingester kills itself (SIGKILL) the next time a batch's insert has committed,
   * before its ack: the copies come again to the next ingester, which must keep each once.
   */
  | { readonly at: number; readonly kind: 'kill-ingester-mid-batch' }
  | { readonly at: number; readonly kind: 'inventory-down' }
  | { readonly at: number; readonly kind: 'inventory-up' };

/** The shares of each kind, and of the publisher path. */
export const SHARES = { transient: 0.2, permanent: 0.01, wait: 0.03, held: 0.001, publisher: 0.1 } as const;

/** Consumer processes running side by side. */
export const CONSUMER_PROCESSES = 2;

/** The dependency wait messages wait for, and the tenant the run holds. */
export const DEPENDENCY = 'inventory';
export const HELD_TENANT = 'held';

/** The consumer every message goes to. */
export const CONSUMER = 'chaos.orders';

/** The run's topology: one consumer, a ladder of three short tiers; classic queues, or quorum on a cluster. */
function chaosTopology(queueType: 'classic' | 'quorum'): Topology {
  return defineTopology({
    exchange: 'chaos.events',
    queueType,
    consumers: {
      [CONSUMER]: {
        bindings: ['order.*'],
        retry: { delays: ['50ms', '200ms', '500ms'], maxAttempts: 6 },
        // Every delivery that ends without an outcome counts toward the crash-loop guard,
        // and the run ends dozens of deliveries that way on purpose (kills, closed
        // connections, a broker restart). A message caught in five of them would be
        // parked as a crash loop, which is the guard working, not a fault; ten keeps that
        // out of a normal run, and one that happens anyway is still reported.
        crashLimit: 10,
      },
    },
  });
}

/** The single-node run's topology (classic queues). */
export const topology: Topology = chaosTopology('classic');
/** The cluster run's topology: the work queue, its tiers and its parked queue are quorum queues. */
export const quorumTopology: Topology = chaosTopology('quorum');

/** mulberry32: a small, fast, seedable generator; good enough to pick faults. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The messages of a run: exact counts of each kind, shuffled by the seed. */
export function planMessages(count: number, seed: number): PlannedMessage[] {
  const rnd = random(seed ^ 0x5eed);
  const permanent = Math.max(1, Math.round(count * SHARES.permanent));
  const held = Math.max(2, Math.round(count * SHARES.held));
  const wait = Math.max(2, Math.round(count * SHARES.wait));
  const transient = Math.round(count * SHARES.transient);
  if (permanent + held + wait + transient > count) throw new Error(`--messages ${count} is too few for the mix of failures; give at least 100`);
  const kinds: MessageKind[] = [
    ...Array<MessageKind>(permanent).fill('permanent'),
    ...Array<MessageKind>(held).fill('held'),
    ...Array<MessageKind>(wait).fill('wait'),
    ...Array<MessageKind>(transient).fill('transient'),
  ];
  while (kinds.length < count) kinds.push('ok');
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j] as MessageKind, kinds[i] as MessageKind];
  }
  return kinds.map((kind, seq) => {
    // Most transient failures clear on the second run; some climb to the second and third tier.
    const r = rnd();
    const failures = kind === 'transient' ? (r < 0.7 ? 1 : r < 0.9 ? 2 : 3) : 0;
    return { seq, kind, failures, via: rnd() < SHARES.publisher ? 'publisher' : 'outbox' };
  });
}

/**
 * How long the run publishes and injects faults, in ms: grows with the message count. A
 * cluster run has 90 s more: its three node outages come one after the other while
 * messages are still being published, so that each shows how long the consumers took
 * to resume.
 */
export function chaosWindowMs(count: number, cluster = false): number {
  return 40_000 + count * 10 + (cluster ? 90_000 : 0);
}

/**
 * When the archive's ingester is killed, as fractions of the window: while messages are
 * being parked (production covers 70% of it), one of them near the broker restart (45%).
 */
export const INGESTER_KILLS = [0.2, 0.48, 0.68] as const;
/**
 * When the ingester is told to die between a batch's commit and its ack (a kill at a
 * random time rarely lands in those few milliseconds): early enough that more messages
 * are parked after it.
 */
export const INGESTER_MID_BATCH_KILL = 0.35;

/** Faults scale with the message count, within bounds a 2-core machine takes. */
export function faultCounts(count: number): { consumerKills: number; connectionCloses: number } {
  return {
    consumerKills: Math.min(40, Math.max(4, Math.round(count / 250))),
    connectionCloses: Math.min(50, Math.max(4, Math.round(count / 200))),
  };
}

/**
 * When each fault happens, as ms from the start. Kills and closed connections are spread
 * at random over the window; the one-off faults sit at fixed points with a little jitter,
 * far enough apart that each is seen on its own.
 */
export function planChaos(count: number, seed: number, options: { postgres: boolean; cluster?: boolean; kill9?: boolean }): ChaosEvent[] {
  const rnd = random(seed ^ 0xc4a05);
  const cluster = options.cluster ?? false;
  const window = chaosWindowMs(count, cluster);
  const at = (fraction: number, jitter = 0.03) => Math.round(window * (fraction + (rnd() * 2 - 1) * jitter));
  const spread = () => Math.round(window * (0.05 + rnd() * 0.85));
  const { consumerKills, connectionCloses } = faultCounts(count);
  const events: ChaosEvent[] = [
    // Inventory is down from the start, back, down again for a while, then back for good.
    { at: 0, kind: 'inventory-down' },
    { at: at(0.35), kind: 'inventory-up' },
    { at: at(0.6), kind: 'inventory-down' },
    { at: at(0.72), kind: 'inventory-up' },
    { at: at(0.22), kind: 'kill-relay' },
    { at: at(0.78), kind: 'kill-relay' },
    { at: at(0.3), kind: 'kill-scheduler' },
    { at: at(0.66), kind: 'kill-scheduler' },
  ];
  if (cluster) {
    // One node out at a time, each started again before the next (the run serialises them).
    events.push({ at: at(0.15, 0.01), kind: 'stop-consumer-node' }, { at: at(0.38, 0.01), kind: 'stop-leader-node' }, { at: at(0.6, 0.01), kind: 'kill-node' });
  } else {
    // A hard kill on one node only when asked: a classic delay tier hands its message to
    // the work queue by dead-lettering, which RabbitMQ does at most once, so a kill during
    // that hop can lose it (seen once in 2,000 on 4.0). Quorum queues (the cluster run)
    // dead-letter at least once.
    if (options.kill9) events.push({ at: at(0.25), kind: 'kill-broker' });
    events.push({ at: at(0.45), kind: 'restart-broker' });
  }
  if (options.postgres) events.push({ at: at(0.6), kind: 'restart-postgres' });
  for (let i = 0; i < consumerKills; i++) events.push({ at: spread(), kind: 'kill-consumer', target: Math.floor(rnd() * CONSUMER_PROCESSES) });
  for (let i = 0; i < connectionCloses; i++) events.push({ at: spread(), kind: 'close-connection', pick: rnd() });
  // Drawn last, so the other faults of a seed come where they did before the archive joined the run.
  for (const fraction of INGESTER_KILLS) events.push({ at: at(fraction), kind: 'kill-ingester' });
  events.push({ at: at(INGESTER_MID_BATCH_KILL), kind: 'kill-ingester-mid-batch' });
  return events.sort((a, b) => a.at - b.at);
}
