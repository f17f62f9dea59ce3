import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { InvalidOptionError, WarrenError } from '../errors.js';
import { backoffDelay } from '../connection/index.js';
import { toLogger, type Logger } from '../logger.js';
import type { OutgoingMessage, PublishKind } from '../publish/publisher.js';
import type { OutboxLag, StoreBackend } from './types.js';
import { outgoingMessage, type OutboxRow } from './outbox-message.js';
import { checkInt } from './options.js';
import { Sleeper } from '../sleeper.js';
import { traceRelay, type RelayTrace } from '../trace/index.js';

/** How soon a relay looks again while rows wait behind a transaction that may still commit. */
const GAP_RECHECK_MS = 20;

/** What the relay needs from a publisher: `Publisher.send` (confirmed, `mandatory`). */
export interface OutboxPublisher {
  /** Publishes with confirms and `mandatory`; rejects when the broker refuses or cannot route it. */
  send(message: OutgoingMessage, kind?: PublishKind): Promise<void>;
}

/** Options of a relay, from `store.relay(options)`. */
export interface OutboxRelayOptions {
  /**
   * Publishes with confirms and `mandatory`: pass `warren.publisher`.
   * @example store.relay({ publisher: warren.publisher, exchange: warren.topology.exchange })
   */
  publisher: OutboxPublisher;
  /** Exchange for rows added without one: the topology's, `warren.topology.exchange`. */
  exchange: string;
  /**
   * Rows claimed and published per pass (sent pipelined on one confirm channel).
   * @default 100
   */
  batchSize?: number;
  /**
   * Longest wait between passes when nothing wakes the relay. On PostgreSQL, LISTEN/NOTIFY
   * wakes it at once and the poll only covers a lost notification; on SQLite a commit in
   * this process wakes it and the poll finds rows committed by other processes.
   * @default 1000 on PostgreSQL, 100 on SQLite
   */
  pollMs?: number;
  /**
   * Only one relay publishes at a time (a PostgreSQL advisory lock, a SQLite lease), and
   * a row is marked sent only once every row before it was confirmed (or flagged), even
   * with several relays running. When a publish fails (nack, no confirm), the rows sent
   * behind it in the same pipelined batch stay pending, even if confirmed, and go out
   * again after it; until it goes through, the relay sends one row at a time. So the
   * last copy of each row reaches the broker in insertion order; a row sent right
   * behind a nacked one may also have reached its queue once before it (a duplicate,
   * like after a crash). Only `batchSize: 1` rules that out. When false, relays publish
   * disjoint batches side by side (`FOR UPDATE SKIP LOCKED`), faster but with batches
   * of different relays interleaved, and a failed row goes again after the rows behind it.
   * @default true
   */
  strictOrder?: boolean;
  /**
   * Wait after a failed pass (broker down, database down): doubling from the first to
   * the longest, with jitter.
   * @default { initialDelayMs: 100, maxDelayMs: 5000 }
   */
  retry?: { initialDelayMs?: number; maxDelayMs?: number };
  /**
   * SQLite only: how long claimed rows stay reserved for a relay past its last renewal.
   * The relay renews the lease every third of it while it publishes, so a slow publish
   * (a confirm can take the publisher's `confirmTimeoutMs`) keeps its rows; if the relay
   * dies between publishing and marking, another relay publishes them again once it
   * has seen the lease expired, unrenewed, for a further `leaseMs` (a renewal may be
   * stuck behind another process's long write transaction, so an expired lease alone
   * does not prove its relay gone): a duplicate, never a loss. On PostgreSQL the claim is a row lock
   * that ends with the relay's connection.
   * @default 30000
   */
  leaseMs?: number;
  /**
   * PostgreSQL only, with `strictOrder`: the longest the relay holds rows back behind an
   * id whose transaction may still commit (ids are taken at insert, rows become visible at
   * commit, so a transaction that inserted first can commit last). Past it the rows
   * behind go out, and a row that commits later still goes out, late (logged). Keep it
   * above your longest transaction that adds outbox rows, e.g. a guarded handler's
   * `timeoutMs`.
   * @default 60000
   */
  gapTimeoutMs?: number;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/** The outcome of publishing one row. */
export type RowOutcome =
  | { readonly id: string; readonly status: 'sent' }
  /** Will never go out as it is (unroutable, no such exchange, undecodable, not encodable by amqplib): flagged with the reason. */
  | { readonly id: string; readonly status: 'flagged'; readonly error: string }
  /**
   * Failed this time (broker down, nack, no confirm), or held back behind such a row in
   * strict order: stays pending.
   */
  | { readonly id: string; readonly status: 'failed'; readonly error: string };

/** How rows are claimed; see {@link OutboxRelayOptions}. */
export interface ClaimOptions {
  readonly limit: number;
  readonly strictOrder: boolean;
  readonly relayId: string;
  readonly leaseMs: number;
  readonly gapTimeoutMs: number;
  readonly logger: Logger;
}

/** What one batch did: the rows published, and the rows held back behind an id gap. */
export interface RelayBatch {
  readonly outcomes: readonly RowOutcome[];
  /** Rows claimed but not published this time (behind a row that may still commit). */
  readonly heldBack: number;
}

/**
 * What a backend gives the relay. `relayBatch` claims up to `limit` pending rows in id
 * order, hands them to `publish` (all of them, or those before a row that may still
 * commit), and records the outcomes; it returns `'busy'` when another relay holds the
 * order lock.
 */
export interface RelayDriver {
  readonly backend: StoreBackend;
  readonly defaultPollMs: number;
  relayBatch(claim: ClaimOptions, publish: (rows: readonly OutboxRow[]) => Promise<RowOutcome[]>): Promise<RelayBatch | 'busy'>;
  lag(): Promise<OutboxLag>;
  /** Calls `wake` when rows may have been committed; returns the unsubscribe. */
  subscribe(wake: () => void, logger: Logger): Promise<() => Promise<void>>;
}

/** What one pass did. */
export interface RelayPass {
  /** Rows claimed. */
  readonly claimed: number;
  /** Rows confirmed by the broker and marked sent. */
  readonly published: number;
  /** Rows flagged (unroutable, no such exchange, not encodable); they wait for a person. */
  readonly flagged: number;
  /** Rows whose publish failed this time, or held back behind one (strict order); they stay pending. */
  readonly failed: number;
  /** True when another relay held the order lock and this pass did nothing. */
  readonly busy: boolean;
  /** Rows held back behind a row whose transaction may still commit (PostgreSQL, strict order). */
  readonly heldBack: number;
}

/** Running totals of a relay. */
export interface RelayStats {
  published: number;
  flagged: number;
  failed: number;
  passes: number;
}

/**
 * Publishes committed outbox rows with confirms and `mandatory`, oldest first, and marks
 * them sent. Wakes on NOTIFY (PostgreSQL) or a commit in this process (SQLite), polls
 * otherwise, and backs off while the broker or the database is down. A relay killed
 * between publish and mark publishes those rows again later: a duplicate, never a loss
 * (consumers' idempotency guards absorb it). A row that cannot go out as it is (no
 * queue bound for its key, an `exchange` that does not exist, undecodable, or refused by
 * amqplib's encoder) is flagged with the broker's or the encoder's reason (see `store.outbox.failed()`), logged, and skipped until
 * `store.outbox.release()`. On order (`strictOrder`): a row is marked sent only after
 * every row before it; see {@link OutboxRelayOptions.strictOrder} for what a nack in
 * the middle of a pipelined batch does.
 *
 * With an OpenTelemetry SDK registered, each row goes out in a PRODUCER span of its own
 * (`relay <exchange>`; `release <queue>` for a row the retry-table scheduler sent back;
 * `park <parked queue>` for a retry-table row an operator parked), a child of the trace
 * context stored in the row and ended with the row's outcome;
 * the message carries that span's context (see docs/tracing.md).
 *
 * Events: `pass` ({@link RelayPass}) after each pass that claimed rows, `flagged`
 * (`{ id, messageId, error }`). No `error` event: failures are logged and retried.
 *
 * @example
 * const relay = store.relay({ publisher: warren.publisher, exchange: warren.topology.exchange });
 * await relay.start();
 * // on shutdown: stop the relay before closing warren
 * await relay.stop();
 */
export class OutboxRelay extends EventEmitter {
  readonly stats: RelayStats = { published: 0, flagged: 0, failed: 0, passes: 0 };
  private readonly publisher: OutboxPublisher;
  private readonly exchange: string;
  private readonly claim: ClaimOptions;
  private readonly pollMs: number;
  private readonly initialDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly logger: Logger;
  private running = false;
  private readonly sleeper = new Sleeper(() => this.running);
  private loopDone: Promise<void> | undefined;
  private unsubscribe: (() => Promise<void>) | undefined;
  private passing: Promise<RelayPass> = Promise.resolve({ claimed: 0, published: 0, flagged: 0, failed: 0, busy: false, heldBack: 0 });
  /** Strict order after a failed row: claim one row at a time until a pass goes through. */
  private single = false;
  /** The claim limit of the last pass: a pass that filled it goes again at once. */
  private lastLimit = 0;

  /** @internal Made by `store.relay()`, with the store's own driver. */
  constructor(
    private readonly driver: RelayDriver,
    options: OutboxRelayOptions,
  ) {
    super();
    if (typeof options?.publisher?.send !== 'function') throw new InvalidOptionError('publisher', 'expected a publisher with `send(message)`, such as `warren.publisher`');
    if (typeof options.exchange !== 'string') throw new InvalidOptionError('exchange', 'expected the exchange to publish to, such as `warren.topology.exchange`');
    this.publisher = options.publisher;
    this.exchange = options.exchange;
    if (options.strictOrder !== undefined && typeof options.strictOrder !== 'boolean') throw new InvalidOptionError('strictOrder', 'expected true or false');
    this.claim = Object.freeze({
      limit: checkInt(options.batchSize, 100, 'batchSize', 1, 10_000),
      strictOrder: options.strictOrder ?? true,
      relayId: `${process.pid}.${randomBytes(4).toString('hex')}`,
      leaseMs: checkInt(options.leaseMs, 30_000, 'leaseMs', 1, 24 * 3600 * 1000),
      gapTimeoutMs: checkInt(options.gapTimeoutMs, 60_000, 'gapTimeoutMs', 0, 24 * 3600 * 1000),
      logger: toLogger(options.logger),
    });
    this.pollMs = checkInt(options.pollMs, driver.defaultPollMs, 'pollMs', 1, 3_600_000);
    this.initialDelayMs = checkInt(options.retry?.initialDelayMs, 100, 'retry.initialDelayMs', 1, 3_600_000);
    this.maxDelayMs = checkInt(options.retry?.maxDelayMs, 5000, 'retry.maxDelayMs', this.initialDelayMs, 3_600_000);
    this.logger = toLogger(options.logger);
  }

  /** True between `start()` and `stop()`. */
  get started(): boolean {
    return this.running;
  }

  /** Pending rows and the age of the oldest: the relay's lag. */
  lag(): Promise<OutboxLag> {
    return this.driver.lag();
  }

  /** Subscribes to wake-ups and starts publishing in the background. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const unsubscribe = await this.driver.subscribe(() => this.wake(), this.logger);
    if (!this.running) {
      // stop() was called while subscribing: it had nothing to unsubscribe yet.
      await unsubscribe().catch(() => undefined);
      return;
    }
    this.unsubscribe = unsubscribe;
    this.loopDone = this.loop();
  }

  /** Finishes the pass in progress, then stops. Rows left are published by the next relay. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.sleeper.stopped();
    await this.loopDone;
    await this.unsubscribe?.().catch(() => undefined);
    this.unsubscribe = undefined;
  }

  /** Publishes one batch now (after any pass in progress). Throws when the database is down. */
  runOnce(): Promise<RelayPass> {
    const next = this.passing.catch(() => undefined).then(() => this.pass());
    this.passing = next;
    return next;
  }

  private wake(): void {
    this.sleeper.wake();
  }

  private async loop(): Promise<void> {
    let failures = 0;
    while (this.running) {
      this.sleeper.clearWake();
      let pass: RelayPass;
      try {
        pass = await this.runOnce();
      } catch (error) {
        failures++;
        const delay = backoffDelay(failures, this.initialDelayMs, this.maxDelayMs);
        this.logger.warn('outbox relay pass failed; trying again', { backend: this.driver.backend, attempt: failures, delayMs: delay, error: error instanceof Error ? error.message : String(error) });
        await this.sleeper.sleep(delay, false);
        continue;
      }
      if (pass.failed > 0) {
        failures++;
        await this.sleeper.sleep(backoffDelay(failures, this.initialDelayMs, this.maxDelayMs), false);
        continue;
      }
      failures = 0;
      // Rows wait behind a transaction that may still commit: look again soon (its
      // commit notifies; a rollback does not).
      if (pass.heldBack > 0) await this.sleeper.sleep(Math.min(this.pollMs, GAP_RECHECK_MS), true);
      else if (pass.busy) await this.sleeper.sleep(this.pollMs, true);
      else if (pass.claimed < this.lastLimit) await this.sleeper.sleep(this.pollMs, true);
    }
  }

  private async pass(): Promise<RelayPass> {
    const claim = this.single && this.claim.strictOrder ? { ...this.claim, limit: 1 } : this.claim;
    this.lastLimit = claim.limit;
    const batch = await this.driver.relayBatch(claim, (rows) => this.publish(rows));
    if (batch === 'busy') return { claimed: 0, published: 0, flagged: 0, failed: 0, busy: true, heldBack: 0 };
    const { outcomes, heldBack } = batch;
    let published = 0;
    let flagged = 0;
    let failed = 0;
    for (const o of outcomes) {
      if (o.status === 'sent') published++;
      else if (o.status === 'flagged') flagged++;
      else failed++;
    }
    this.stats.published += published;
    this.stats.flagged += flagged;
    this.stats.failed += failed;
    this.stats.passes++;
    if (outcomes.length > 0) this.single = failed > 0;
    const pass: RelayPass = { claimed: outcomes.length, published, flagged, failed, busy: false, heldBack };
    if (outcomes.length > 0) this.emit('pass', pass);
    return pass;
  }

  private async publish(rows: readonly OutboxRow[]): Promise<RowOutcome[]> {
    // One producer span per row (see docs/tracing.md), ended with the row's outcome.
    const traces: Array<RelayTrace | undefined> = [];
    // All sends are written in order on one confirm channel, then confirmed together.
    const settled = await Promise.allSettled(
      rows.map(async (row, i) => {
        let message: OutgoingMessage;
        try {
          message = outgoingMessage(row, this.exchange);
        } catch (error) {
          throw new Undecodable(error);
        }
        const trace = (traces[i] = traceRelay(row.origin ?? 'outbox', row, { exchange: message.exchange, routingKey: message.routingKey, headers: (message.properties.headers ?? {}) as Record<string, unknown> }));
        await this.publisher.send({ ...message, properties: { ...message.properties, headers: trace.headers } }, row.origin ?? 'outbox');
      }),
    );
    const outcomes: RowOutcome[] = [];
    let firstFailure: { id: string; error: string } | undefined;
    let held = 0;
    settled.forEach((result, i) => {
      const row = rows[i] as OutboxRow;
      if (result.status === 'fulfilled') {
        if (firstFailure !== undefined && this.claim.strictOrder) {
          // Confirmed, but behind a row that was not: marking it sent would let the failed
          // row go out after it. It stays pending and goes again after that row.
          held++;
          outcomes.push({ id: row.id, status: 'failed', error: `held back (strict order): row ${firstFailure.id} before it was not published (${firstFailure.error}); it goes out again after that row` });
          traces[i]?.end({ status: 'held-back' });
        } else {
          outcomes.push({ id: row.id, status: 'sent' });
          traces[i]?.end({ status: 'sent' });
        }
        return;
      }
      const error: unknown = result.reason;
      const message = error instanceof Error ? error.message : String(error);
      const permanent = permanentReason(error, message, row.exchange ?? this.exchange);
      if (permanent !== undefined) {
        outcomes.push({ id: row.id, status: 'flagged', error: permanent });
        traces[i]?.end({ status: 'flagged', error: permanent });
        this.logger.error('outbox row flagged: it cannot be published as it is; fix it, then `store.outbox.release()`', { id: row.id, messageId: row.messageId, routingKey: row.routingKey, error: permanent });
        this.emit('flagged', { id: row.id, messageId: row.messageId, error: permanent });
        return;
      }
      firstFailure ??= { id: row.id, error: message };
      outcomes.push({ id: row.id, status: 'failed', error: message });
      traces[i]?.end({ status: 'failed', error: message });
    });
    if (firstFailure !== undefined) {
      const failed = outcomes.filter((o) => o.status === 'failed').length;
      this.logger.warn('outbox rows not published; they stay pending and are tried again', { failed: failed - held, heldBack: held, error: firstFailure.error });
    }
    return outcomes;
  }
}

/**
 * Why a failed publish will fail the same way every time, or undefined when it may
 * succeed later. Unroutable, undecodable and unencodable rows; and a row whose exchange does not
 * exist: the broker closes the channel with 404 NOT_FOUND naming the exchange. That
 * close fails every publish in flight on the channel, each carrying the same reason, so
 * only a row whose own exchange is the one named is at fault. amqplib rejects the
 * unconfirmed publishes with a bare 'channel closed' (no reply code), so the text is
 * what tells; a `code` of 404 anywhere in the cause chain is taken too.
 */
function permanentReason(error: unknown, message: string, exchange: string): string | undefined {
  if (error instanceof Undecodable || (error instanceof WarrenError && error.code === 'UNROUTABLE')) return message;
  const refused = encoderError(error);
  if (refused !== undefined) return `amqplib cannot encode the message, so it can never be sent as it is (${refused.name}: ${refused.message})`;
  const named = `no exchange '${exchange}' in vhost`;
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if ((code === 404 || e.message.includes('NOT_FOUND')) && e.message.includes(named)) {
      return `404 NOT_FOUND: exchange '${exchange}' does not exist (${message})`;
    }
  }
  return undefined;
}

/**
 * The encoder's error when amqplib refused to write the message (a header table over
 * its size, a value of no AMQP type, a short string over 255 bytes): the publisher
 * rejects with PUBLISH_NOT_SENT and keeps that RangeError or TypeError as the cause. A
 * PUBLISH_NOT_SENT without one (a blocked connection) may go through later.
 */
function encoderError(error: unknown): Error | undefined {
  if (!(error instanceof WarrenError) || error.code !== 'PUBLISH_NOT_SENT') return undefined;
  for (let e: unknown = error.cause, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof RangeError || e instanceof TypeError) return e;
  }
  return undefined;
}

class Undecodable extends Error {
  constructor(cause: unknown) {
    super(`the row cannot be decoded (${cause instanceof Error ? cause.message : String(cause)})`);
  }
}
