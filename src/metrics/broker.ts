import type * as amqp from 'amqplib';
import type { ManagementClient, QueueInfo } from '../management/client.js';
import { formatDuration } from '../retry/ladder.js';
import type { Topology } from '../topology/declaration.js';
import { closeChannel } from '../connection/channel.js';

/** What a queue does for its consumer. */
export type QueueRole = 'work' | 'retry' | 'parked';

/** One declared queue as the broker reported it. Figures the source cannot give are `undefined`. */
export interface QueueFigures {
  readonly consumer: string;
  readonly role: QueueRole;
  readonly queue: string;
  /** The retry tier's delay, e.g. `5s`; undefined for work and parked queues. */
  readonly delay: string | undefined;
  readonly exists: boolean;
  readonly ready: number | undefined;
  readonly unacked: number | undefined;
  readonly consumers: number | undefined;
  /** Redeliveries since the broker's stats for the queue began (management API only). */
  readonly redelivered: number | undefined;
  /** Messages published into the queue since its stats began (management API only). */
  readonly published: number | undefined;
}

/** One reading of every queue of the topology. */
export interface BrokerSnapshot {
  /** `management` when the management API answered; `amqp` when the passive declares stood in; `none` when neither did. */
  readonly source: 'management' | 'amqp' | 'none';
  readonly queues: readonly QueueFigures[];
  /** Why the management API was not used, or why nothing could be read. */
  readonly error: string | undefined;
  /** When the reading finished (ms since the epoch). */
  readonly at: number;
  /** How long it took, in ms. */
  readonly durationMs: number;
}

/** Where {@link BrokerReader} reads from. */
export interface BrokerReaderOptions {
  /** The management API; tried first. */
  readonly management: ManagementClient | undefined;
  /** An AMQP connection for passive declares, used when the management API does not answer. */
  readonly connection: (() => Promise<amqp.ChannelModel>) | undefined;
  /** How long a reading is reused. */
  readonly cacheMs: number;
}

/** A queue the topology declares, with the consumer and role it has (see {@link declaredQueues}). */
export interface Declared {
  readonly consumer: string;
  readonly role: QueueRole;
  readonly queue: string;
  readonly delay: string | undefined;
}

/** The fields asked of the management API: one request for the vhost, only these columns. */
const COLUMNS = ['name', 'messages_ready', 'messages_unacknowledged', 'consumers', 'message_stats.redeliver', 'message_stats.publish'] as const;

/** Every queue of the topology, labelled by consumer and role. */
export function declaredQueues(topology: Topology): Declared[] {
  const out: Declared[] = [];
  for (const c of topology.consumers.values()) {
    out.push({ consumer: c.name, role: 'work', queue: c.queue, delay: undefined });
    c.retryQueues.forEach((queue, i) => out.push({ consumer: c.name, role: 'retry', queue, delay: formatDuration(c.delaysMs[i] as number) }));
    out.push({ consumer: c.name, role: 'parked', queue: c.parkedQueue, delay: undefined });
  }
  return out;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Reads the depth, unacknowledged count, consumers and counters of every queue of a
 * topology: from the management API (one request), or by passive declares over AMQP
 * when it does not answer. A reading is cached for `cacheMs`, and readers that arrive
 * while one is under way share it, so frequent or concurrent scrapes cost the broker
 * one reading per interval.
 */
export class BrokerReader {
  private readonly declared: readonly Declared[];
  private cached: BrokerSnapshot | undefined;
  private inFlight: Promise<BrokerSnapshot> | undefined;
  private channel: amqp.Channel | undefined;
  /** Readings made (not served from the cache); for tests and the bench. */
  reads = 0;

  constructor(
    topology: Topology,
    private readonly options: BrokerReaderOptions,
  ) {
    this.declared = declaredQueues(topology);
  }

  /** A reading no older than `cacheMs`. Never rejects: a failed reading has source `none`. */
  read(): Promise<BrokerSnapshot> {
    const cached = this.cached;
    if (cached && Date.now() - cached.at < this.options.cacheMs) return Promise.resolve(cached);
    this.inFlight ??= this.fresh().then((snapshot) => {
      this.cached = snapshot;
      this.inFlight = undefined;
      return snapshot;
    });
    return this.inFlight;
  }

  /** Forgets the cached reading: the next read asks the broker. */
  invalidate(): void {
    this.cached = undefined;
  }

  private async fresh(): Promise<BrokerSnapshot> {
    const started = performance.now();
    this.reads += 1;
    const done = (source: BrokerSnapshot['source'], queues: readonly QueueFigures[], error: string | undefined): BrokerSnapshot => ({
      source,
      queues,
      error,
      at: Date.now(),
      durationMs: performance.now() - started,
    });
    let managementError = 'no management API was given';
    if (this.options.management) {
      try {
        return done('management', await this.confirmAbsent(await this.byManagement(this.options.management)), undefined);
      } catch (error) {
        managementError = message(error);
      }
    }
    if (this.options.connection) {
      try {
        return done('amqp', await this.byAmqp(this.options.connection), managementError);
      } catch (error) {
        return done('none', [], `${managementError}; AMQP: ${message(error)}`);
      }
    }
    return done('none', [], managementError);
  }

  private async byManagement(api: ManagementClient): Promise<QueueFigures[]> {
    const all = await api.queues(COLUMNS);
    const byName = new Map<string, QueueInfo>(all.map((q) => [q.name, q]));
    return this.declared.map((d) => {
      const q = byName.get(d.queue);
      if (!q) return { ...d, exists: false, ready: undefined, unacked: undefined, consumers: undefined, redelivered: undefined, published: undefined };
      return {
        ...d,
        exists: true,
        ready: q.messages_ready ?? 0,
        unacked: q.messages_unacknowledged ?? 0,
        consumers: q.consumers ?? 0,
        // Absent until the queue has seen traffic of that kind: none yet is 0. A parked
        // queue's redeliveries are walks reading it (what a walk keeps comes back
        // redelivered), not failures: not reported.
        redelivered: d.role === 'parked' ? undefined : (q.message_stats?.redeliver ?? 0),
        published: q.message_stats?.publish ?? 0,
      };
    });
  }

  /**
   * The management API lists a queue a few seconds after it is declared (its statistics
   * are collected on an interval): a queue it does not list is asked over AMQP, when a
   * connection is given, before it is called missing. A queue found that way has its
   * depth and consumers from AMQP, and no counters yet.
   */
  private async confirmAbsent(figures: QueueFigures[]): Promise<QueueFigures[]> {
    const absent = figures.filter((f) => !f.exists);
    if (absent.length === 0 || this.options.connection === undefined) return figures;
    let found: QueueFigures[];
    try {
      found = await this.byAmqp(this.options.connection, absent);
    } catch {
      return figures;
    }
    const byQueue = new Map(found.map((f) => [f.queue, f]));
    return figures.map((f) => (f.exists ? f : (byQueue.get(f.queue) ?? f)));
  }

  /** Passive declares, all sent at once on one channel; a missing queue closes it, so the rest are asked again. */
  private async byAmqp(connection: () => Promise<amqp.ChannelModel>, declared: readonly Declared[] = this.declared): Promise<QueueFigures[]> {
    const model = await connection();
    const results = new Map<string, QueueFigures>();
    let pending = [...declared];
    while (pending.length > 0) {
      const ch = this.channel ?? (await this.openChannel(model));
      const settled = await Promise.allSettled(pending.map((d) => ch.checkQueue(d.queue)));
      const retry: Declared[] = [];
      let missing = false;
      settled.forEach((s, i) => {
        const d = pending[i] as Declared;
        if (s.status === 'fulfilled') {
          results.set(d.queue, { ...d, exists: true, ready: s.value.messageCount, unacked: undefined, consumers: s.value.consumerCount, redelivered: undefined, published: undefined });
        } else if ((s.reason as { code?: unknown }).code === 404 && !missing) {
          // The first 404 is this queue's answer; the channel is closed, so later failures are not answers.
          missing = true;
          results.set(d.queue, { ...d, exists: false, ready: undefined, unacked: undefined, consumers: undefined, redelivered: undefined, published: undefined });
        } else if (missing) {
          retry.push(d);
        } else {
          throw s.reason;
        }
      });
      if (missing) this.channel = undefined;
      pending = retry;
    }
    return declared.map((d) => results.get(d.queue) as QueueFigures);
  }

  private async openChannel(model: amqp.ChannelModel): Promise<amqp.Channel> {
    const ch = await model.createChannel();
    ch.on('error', () => undefined);
    ch.on('close', () => {
      if (this.channel === ch) this.channel = undefined;
    });
    this.channel = ch;
    return ch;
  }

  /** Closes the channel the passive declares use. */
  async close(): Promise<void> {
    const ch = this.channel;
    this.channel = undefined;
    if (ch) await closeChannel(ch);
  }
}
