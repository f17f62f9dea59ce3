import { EventEmitter } from 'node:events';
import { ArchiveIngester } from './archive/ingest.js';
import type { ArchiveIngestOptions } from './archive/types.js';
import { BrokerConnection, redactUrl, type BrokerNode, type ConnectionOptions } from './connection/index.js';
import type { IntakeState } from './breaker/index.js';
import { Consumer } from './consume/consumer.js';
import type { ConsumerOptions, Handler } from './consume/types.js';
import { ClosedError, InvalidOptionError } from './errors.js';
import { healthReport, type HealthReason, type HealthReport } from './health/index.js';
import { toLogger, type Logger } from './logger.js';
import { ManagementClient, type ManagementOptions } from './management/client.js';
import { Publisher, type PublishOptions, type PublisherOptions, type PublishReceipt } from './publish/publisher.js';
import { declareTopology, planTopology, verifyTopology, type TopologyPlan } from './topology/apply.js';
import type { Topology } from './topology/declaration.js';
import type { ArchiveStore } from './store/archive.js';

/** The `archive` option of {@link Warren.connect}: which store, and how to ingest. */
export interface WarrenArchiveOptions extends ArchiveIngestOptions {
  /** The store whose archive receives the parked messages: `sqliteStore()` or `postgresStore()`. */
  store: { readonly archive: ArchiveStore };
}

/** Options of {@link Warren.connect}. */
export interface WarrenOptions extends ConnectionOptions {
  /** The topology, from `defineTopology()`. Declared on connect and after every reconnect. */
  topology: Topology;
  /** Publisher settings. */
  publisher?: PublisherOptions;
  /** Management API, for `plan()` and `verify()` with every argument compared. */
  management?: ManagementOptions;
  /**
   * Declare the topology on connect and after each reconnect.
   * @default true
   */
  declare?: boolean;
  /**
   * Move every parked message of the topology's consumers into the store's archive (see
   * docs/archive.md): the parked queues stay empty, and failures are read from the store.
   * @default off: parked messages stay in their queues
   */
  archive?: WarrenArchiveOptions;
  /**
   * Start while the broker cannot be reached. `open()` (and `Warren.connect`) try each URL
   * once; when none answers they resolve anyway, and both connections go on trying in the
   * background with the `reconnect` backoff for as long as it takes. Meanwhile `health()`
   * is not ready and says why, consumers attach when the broker comes, an outbox keeps
   * taking rows (it needs only the database) and its relay sends them once connected, and
   * `publish()` waits or fails at once as `publisher.whenDisconnected` says. A broker that
   * answers but refuses the credentials or the virtual host still fails `open()` (no retry
   * fixes that), and with the broker up nothing changes: a topology that drifted fails
   * `open()` as always. Later it is reported by `health()` and logged. See docs/lifecycle.md.
   *
   * @example
   * const warren = await Warren.connect({ topology, startWithoutBroker: true, publisher: { whenDisconnected: 'fail' } });
   * @default false: `open()` fails with BrokerUnreachableError after `connectTimeoutMs`
   */
  startWithoutBroker?: boolean;
}

/**
 * Refuses a consumer whose handler declares it needs a transaction (`requiresTx`) when
 * no idempotency guard gives it one.
 */
export function checkRequiresTx(consumer: string, options: { readonly requiresTx?: boolean; readonly idempotency?: unknown }): void {
  const { requiresTx } = options;
  if (requiresTx !== undefined && typeof requiresTx !== 'boolean') throw new InvalidOptionError('requiresTx', `expected true or false, got ${JSON.stringify(requiresTx)}`);
  if (requiresTx === true && options.idempotency === undefined) {
    throw new InvalidOptionError(
      'requiresTx',
      `consumer '${consumer}' has a handler that needs a transaction (ctx.tx), but no idempotency guard gives it one`,
      'Pass { idempotency: store.idempotency() } (a store from warren/sqlite or warren/postgres), whose transaction the handler gets as ctx.tx; or drop requiresTx if the handler does not use ctx.tx.',
    );
  }
}

/**
 * Two connections (consumers, publishes), the topology, a publisher and any number of consumers.
 *
 * @example
 * const warren = await Warren.connect({ url: 'amqp://localhost', topology });
 * await warren.consume('billing', async (order: Order) => { await charge(order); });
 * await warren.publish('order.created', { orderId: 42 });
 * // on SIGTERM:
 * await warren.close();
 *
 * Events: `consumer` (the {@link Consumer}) when `consume()` makes one, before it attaches.
 */
export class Warren extends EventEmitter {
  /** The connection consumers and the topology use. */
  readonly connection: BrokerConnection;
  /**
   * The connection publishes (and consumers' moves) use. RabbitMQ blocks a connection
   * that publishes while it is under a memory or disk alarm; on a connection of their
   * own, consumers keep acking meanwhile. Named `<connectionName> (publish)`.
   */
  readonly publishConnection: BrokerConnection;
  readonly publisher: Publisher;
  /**
   * Consumers move messages (retry, park) on a confirm channel of their own, so an
   * application publish that makes the broker close its channel (an exchange that
   * does not exist) never fails a move. Read by the metrics, which count its publishes.
   * @internal
   */
  readonly mover: Publisher;
  readonly topology: Topology;
  readonly logger: Logger;
  private readonly consumers: Array<Consumer<never, never>> = [];
  private readonly managementOptions: ManagementOptions | undefined;
  private closed = false;
  private readonly declare: boolean;
  private readonly startWithoutBroker: boolean;
  /** Started without the broker: the publish connection waits for the first declaration. */
  private publishingAfterTopology = false;
  private opening: Promise<void> | undefined;
  /** Why the last declaration of the topology failed; undefined once one succeeded. */
  private topologyError: unknown;
  /** The ingester of the `archive` option: its `state()` says whether ingestion keeps up. */
  readonly archive: ArchiveIngester | undefined;

  private constructor(options: WarrenOptions) {
    super();
    this.topology = options.topology;
    this.logger = toLogger(options.logger);
    this.connection = new BrokerConnection(options);
    this.publishConnection = new BrokerConnection({ ...options, connectionName: `${options.connectionName ?? 'warren'} (publish)` });
    this.publisher = new Publisher(this.publishConnection, this.topology.exchange, { logger: this.logger, ...options.publisher });
    this.mover = new Publisher(this.publishConnection, this.topology.exchange, { logger: this.logger, ...options.publisher });
    this.managementOptions = options.management;
    this.declare = options.declare !== false;
    if (options.startWithoutBroker !== undefined && typeof options.startWithoutBroker !== 'boolean') throw new InvalidOptionError('startWithoutBroker', `expected true or false, got ${JSON.stringify(options.startWithoutBroker)}`);
    this.startWithoutBroker = options.startWithoutBroker === true;
    if (options.archive !== undefined) {
      const { store, ...ingest } = options.archive;
      this.archive = new ArchiveIngester({ store, topology: this.topology, connection: () => this.connection.waitReady(10_000) }, { logger: this.logger, ...ingest });
    }
  }

  /**
   * A Warren that has opened nothing yet: call {@link open} before consuming. For a
   * framework that hands the instance out before it connects (the NestJS module);
   * elsewhere use {@link Warren.connect}.
   */
  static create(options: WarrenOptions): Warren {
    return new Warren(options);
  }

  /**
   * Connects (retrying until `connectTimeoutMs`), declares the topology and opens the
   * publisher. With `startWithoutBroker`, resolves also while the broker is away.
   */
  static async connect(options: WarrenOptions): Promise<Warren> {
    const warren = new Warren(options);
    await warren.open();
    return warren;
  }

  /**
   * What {@link Warren.connect} does after creating: connects, declares the topology and
   * opens the publisher. Called again, it returns the first call's promise. When it
   * fails, both connections are closed and this Warren cannot be opened again.
   */
  open(): Promise<void> {
    this.opening ??= this.openOnce();
    return this.opening;
  }

  private async openOnce(): Promise<void> {
    if (this.closed) throw new ClosedError('This Warren');
    if (this.declare) {
      await this.connection.onReady(async (model) => {
        try {
          await declareTopology(model, this.topology);
          this.topologyError = undefined;
        } catch (error) {
          this.topologyError = error;
          throw error;
        }
      });
    }
    try {
      // Without the broker, what the hooks do happens when it comes.
      const up = this.startWithoutBroker ? await this.connection.tryOpen() : (await this.connection.open(), true);
      // The first declaration's failure (drift) is the caller's error, not a log line.
      if (up && this.declare) await declareTopology(await this.connection.waitReady(1000), this.topology);
      if (!this.startWithoutBroker) await this.publishConnection.open();
      else if (up) await this.publishConnection.tryOpen();
      else await this.openPublishingAfterTopology();
      await this.publisher.start();
      await this.mover.start();
      this.archive?.start();
    } catch (error) {
      await Promise.all([this.connection.close(), this.publishConnection.close()]);
      throw error;
    }
  }

  /**
   * Started without the broker: the publish connection opens once the consumers'
   * connection has come and declared the topology (its hook runs first), so that nothing
   * is published to an exchange or queue the broker does not have yet.
   */
  private async openPublishingAfterTopology(): Promise<void> {
    this.publishingAfterTopology = true;
    const once = (): Promise<void> => {
      this.connection.offReady(once);
      this.publishingAfterTopology = false;
      this.publishConnection.tryOpen().catch((error: unknown) => {
        if (error instanceof ClosedError) return;
        this.logger.error('the publish connection could not open', { error: error instanceof Error ? error.message : String(error) });
      });
      return Promise.resolve();
    };
    await this.connection.onReady(once);
  }

  /**
   * Publishes a JSON payload to the default exchange, or to `options.exchange`; resolves
   * once confirmed.
   *
   * @example
   * await warren.publish('order.created', { orderId: 42 });
   * await warren.publish('invoice.send', { orderId: 42 }, { exchange: 'shop.commands' });
   */
  publish(routingKey: string, payload: unknown, options?: PublishOptions): Promise<PublishReceipt> {
    return this.publisher.publish(routingKey, payload, options);
  }

  /**
   * Starts consuming the work queue of a declared consumer. The handler's context has
   * `tx` only with an `idempotency` guard, typed as that guard's transaction: `Tx` comes
   * from the options, never from the handler, so a handler that needs a transaction does
   * not compile without a guard. At run time, `requiresTx: true` refuses the same mistake.
   *
   * @example
   * await warren.consume('receipts', async (paid: Paid, ctx) => {
   *   await ctx.tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [paid.orderId]);
   * }, { idempotency: store.idempotency(), requiresTx: true });
   */
  async consume<T = unknown, Tx = undefined>(name: string, handler: Handler<T, NoInfer<Tx>>, options: ConsumerOptions<T, Tx> = {}): Promise<Consumer<T, Tx>> {
    if (this.closed) throw new ClosedError('This Warren');
    checkRequiresTx(name, options);
    const consumer = new Consumer<T, Tx>(this.connection, this.mover, this.topology, this.topology.consumer(name), handler, { logger: this.logger, ...options });
    this.emit('consumer', consumer);
    // Listed before it starts, so a close() during its start closes it too.
    this.consumers.push(consumer as unknown as Consumer<never, never>);
    try {
      await consumer.start();
    } catch (error) {
      const i = this.consumers.indexOf(consumer as unknown as Consumer<never, never>);
      if (i >= 0) this.consumers.splice(i, 1);
      throw error;
    }
    return consumer;
  }

  /** The consumers `consume()` made, closed ones included. */
  listConsumers(): ReadonlyArray<Consumer<unknown, unknown>> {
    return this.consumers as unknown as ReadonlyArray<Consumer<unknown, unknown>>;
  }

  private management(): ManagementClient | undefined {
    return this.managementOptions ? new ManagementClient(this.managementOptions) : undefined;
  }

  /** What would be created and what differs; changes nothing. */
  async plan(): Promise<TopologyPlan> {
    return planTopology(await this.connection.waitReady(10_000), this.topology, this.management());
  }

  /** Like {@link plan}, but throws {@link TopologyDriftError} on any difference. */
  async verify(): Promise<TopologyPlan> {
    return verifyTopology(await this.connection.waitReady(10_000), this.topology, this.management());
  }

  /**
   * The broker nodes the two connections are on (`undefined` for one that is down). On a
   * cluster they may differ: each moves to the next URL on its own when it loses its node.
   */
  get nodes(): { readonly connection: BrokerNode | undefined; readonly publish: BrokerNode | undefined } {
    return { connection: this.connection.node, publish: this.publishConnection.node };
  }

  /**
   * Readiness and liveness, with reasons. Not ready while a connection is down (it
   * reconnects on its own), while the broker blocks the publish connection (a resource
   * alarm: publishes wait), while the last declaration of the topology failed, or while
   * a consumer is not attached to its queue (it re-attaches on its own). None of these
   * fails liveness: restarting the process does not bring a broker back, and warren
   * reconnects and re-attaches by itself. A closed Warren is not ready. See docs/health.md.
   *
   * @example
   * const { ready, live, reasons } = await warren.health();
   */
  health(): Promise<HealthReport> {
    // Closing is what a shutdown does: failing liveness then would kill a pod mid-drain.
    if (this.closed) return Promise.resolve(healthReport([{ component: 'warren', fails: 'ready', message: 'closed: it consumes and publishes nothing more' }]));
    const reasons: HealthReason[] = [];
    for (const [component, c] of [['connection', this.connection], ['publish connection', this.publishConnection]] as const) {
      if (!c.ready) {
        const others = c.urls.length > 1 ? ` (next to try of ${c.urls.length} nodes)` : '';
        const down = c.downForMs >= 1000 ? ` for ${Math.round(c.downForMs / 1000)} s` : '';
        const why = c.lastError === undefined ? '' : `; last attempt: ${c.lastError}`;
        const next = c === this.publishConnection && this.publishingAfterTopology ? 'opens once the other connection has declared the topology' : 'reconnecting';
        reasons.push({ component, fails: 'ready', message: `not connected to ${redactUrl(c.url)}${others}${down}${why}; ${next}` });
      }
    }
    const blocked = this.publishConnection.blocked;
    if (blocked !== undefined) reasons.push({ component: 'publish connection', fails: 'ready', message: `the broker blocked publishing: ${blocked}` });
    // The consumers' connection publishes nothing, so a block there stops no work.
    const consumersBlocked = this.connection.blocked;
    if (consumersBlocked !== undefined) reasons.push({ component: 'connection', fails: 'none', message: `the broker blocked the consumers' connection: ${consumersBlocked}` });
    if (this.topologyError !== undefined) {
      const why = this.topologyError instanceof Error ? this.topologyError.message : String(this.topologyError);
      reasons.push({ component: 'topology', fails: 'ready', message: `the last declaration failed: ${why}` });
    }
    for (const consumer of this.consumers) {
      const intake = consumer.intake;
      if (!intake.consuming) {
        // Paused on purpose: alive and ready, and saying why it takes nothing.
        reasons.push({ component: `consumer ${consumer.name}`, fails: 'none', message: pausedText(consumer.declaration.queue, intake) });
      } else if (!consumer.attached) {
        const waiting = this.connection.connected ? 're-attaching' : 'it attaches when the connection is up';
        reasons.push({ component: `consumer ${consumer.name}`, fails: 'ready', message: `not attached to queue ${consumer.declaration.queue}; ${waiting}` });
      }
    }
    return Promise.resolve(healthReport(reasons));
  }

  /** Closes consumers (gracefully, see {@link Consumer.close}), then the publisher, then the connection. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.archive?.stop();
    await Promise.all(this.consumers.map((c) => c.close()));
    await Promise.all([this.publisher.close(), this.mover.close()]);
    await Promise.all([this.connection.close(), this.publishConnection.close()]);
  }
}

/** Why a paused consumer takes no messages, for health and logs. */
export function pausedText(queue: string, intake: IntakeState): string {
  const parts: string[] = [];
  if (intake.hand !== undefined) parts.push(`paused by hand by ${intake.hand.actor} since ${intake.hand.since.toISOString()}: ${intake.hand.reason}`);
  if (intake.open !== undefined) {
    const next = intake.open.nextProbeAt === undefined ? (intake.breaker === 'half-open' ? '; a probe is running' : '') : `; next probe at ${intake.open.nextProbeAt.toISOString()}`;
    parts.push(`breaker ${intake.breaker} since ${intake.open.since.toISOString()}: ${intake.open.reason}${next}`);
  }
  return `takes no messages (${parts.join('; ')}); they wait in queue ${queue}`;
}
