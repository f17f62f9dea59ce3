/**
 * Ingestion: every message that reaches a consumer's parked queue is moved into the
 * archive. Insert (committed) first, ack second, a batch at a time: one transaction per
 * batch, one `ack` (multiple) for it. A crash between the two leaves the messages in the
 * queue; they come again, and the archive recognises each by its parked identity and
 * keeps it once. So several ingesters may read the same queues.
 *
 * While the database cannot take a batch, the messages stay unacknowledged for at most
 * `holdMs`, then the channel is closed (the broker puts them back, in their order) and
 * reading starts again once the database answers: the parked queue is the buffer. A batch
 * the database refuses for what it holds is stored row by row, and a row refused again
 * is stored with nothing indexed but its identity (its bytes all kept): no message loops.
 */
import { EventEmitter } from 'node:events';
import type * as amqp from 'amqplib';
import { closeChannel } from '../connection/channel.js';
import { backoffDelay } from '../connection/index.js';
import { InvalidOptionError, StoreUnavailableError } from '../errors.js';
import { toLogger, type Logger } from '../logger.js';
import type { ArchiveInsertResult, ArchiveRowInput, ArchiveStore } from '../store/archive.js';
import { channelSender, faultEvent, publishFaultEvent, type ClosableFaultSender } from '../park/fault-event.js';
import type { Topology } from '../topology/declaration.js';
import { ArchiveRetentionSchedule } from './retention.js';
import { archiveRow, minimalRow } from './row.js';
import type { ArchivedEvent, ArchiveIngestOptions, ArchiveIngestState, ArchiveIngestStatus } from './types.js';

/** Defaults of {@link ArchiveIngestOptions}, in one place. */
export const INGEST_DEFAULTS = Object.freeze({ batchSize: 500, maxBatchDelayMs: 50, holdMs: 30_000, initialDelayMs: 200, maxDelayMs: 10_000, parallel: 2 });

/** What an ingester needs. */
export interface ArchiveIngesterDeps {
  /** The store whose archive tables receive the messages. */
  readonly store: { readonly archive: ArchiveStore };
  readonly topology: Topology;
  /** The broker connection; called again after a connection or channel is lost. */
  readonly connection: () => Promise<amqp.ChannelModel>;
}

interface Resolved {
  readonly consumers: readonly string[];
  readonly batchSize: number;
  readonly maxBatchDelayMs: number;
  readonly prefetch: number;
  readonly holdMs: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
  readonly onArchived: ((rows: readonly ArchivedEvent[]) => void) | undefined;
  readonly logger: Logger;
}

function whole(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${JSON.stringify(v)} is not a whole number from ${min} to ${max}`);
  return v;
}

function resolveOptions(topology: Topology, o: ArchiveIngestOptions): Resolved {
  const batchSize = whole(o.batchSize, INGEST_DEFAULTS.batchSize, 'batchSize', 1, 10_000);
  const consumers = o.consumers ?? [...topology.consumers.keys()];
  if (!Array.isArray(consumers) || consumers.length === 0) throw new InvalidOptionError('consumers', 'names no consumer', `Give names of the topology's consumers: ${[...topology.consumers.keys()].join(', ')}.`);
  for (const c of consumers) topology.consumer(c);
  if (o.onArchived !== undefined && typeof o.onArchived !== 'function') throw new InvalidOptionError('onArchived', 'expected a function');
  return Object.freeze({
    consumers: [...new Set(consumers)],
    batchSize,
    maxBatchDelayMs: whole(o.maxBatchDelayMs, INGEST_DEFAULTS.maxBatchDelayMs, 'maxBatchDelayMs', 0, 60_000),
    // Two batches being stored and two filling: the broker keeps sending while both slots commit.
    prefetch: whole(o.prefetch, Math.min(65_535, 2 * INGEST_DEFAULTS.parallel * batchSize), 'prefetch', batchSize, 65_535),
    holdMs: whole(o.holdMs, INGEST_DEFAULTS.holdMs, 'holdMs', 100, 600_000),
    initialDelayMs: whole(o.retry?.initialDelayMs, INGEST_DEFAULTS.initialDelayMs, 'retry.initialDelayMs', 1, 600_000),
    maxDelayMs: whole(o.retry?.maxDelayMs, INGEST_DEFAULTS.maxDelayMs, 'retry.maxDelayMs', 1, 600_000),
    onArchived: o.onArchived,
    logger: toLogger(o.logger),
  });
}

/** An error of the database's state (down, busy, a deadlock or conflict to retry), not of what a batch holds. */
export function isTransient(error: unknown): boolean {
  if (error instanceof StoreUnavailableError) return true;
  const code = (error as { code?: unknown } | null)?.code;
  // PostgreSQL: serialization failure, deadlock, lock not available, out of disk or memory; SQLite: busy, locked, full, I/O.
  return typeof code === 'string' && (/^(40001|40P01|55P03|53\d{3}|58\d{3})$/.test(code) || /^SQLITE_(BUSY|LOCKED|FULL|IOERR|CANTOPEN|READONLY)/.test(code));
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

class Timeout extends StoreUnavailableError {}

function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Timeout(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

interface Batch {
  readonly channel: amqp.Channel;
  readonly messages: amqp.ConsumeMessage[];
  stored: boolean;
}

/** One consumer's parked queue, read into the archive. */
class Reader {
  status: ArchiveIngestStatus = 'connecting';
  archived = 0;
  duplicates = 0;
  batches = 0;
  lastArchivedAt: Date | undefined;
  behindSince: Date | undefined;
  lastError: string | undefined;
  faultEventsFailed = 0;
  private channel: amqp.Channel | undefined;
  private consumerTag: string | undefined;
  private held: amqp.ConsumeMessage[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** The held messages waited their `maxBatchDelayMs` while every store slot was busy: cut them when one frees. */
  private due = false;
  /** Batches being stored, in delivery order: acknowledged in that order. */
  private inFlight: Batch[] = [];
  private storing = 0;
  private waiting: Batch[] = [];
  private stopping = false;
  private wake: (() => void) | undefined;
  private loopDone: Promise<void> | undefined;
  private faultSender: ClosableFaultSender | undefined;

  constructor(
    readonly consumer: string,
    readonly queue: string,
    private readonly deps: ArchiveIngesterDeps,
    private readonly o: Resolved,
    private readonly events: EventEmitter,
  ) {}

  get heldCount(): number {
    return this.held.length + this.inFlight.reduce((n, b) => n + b.messages.length, 0);
  }

  start(): void {
    this.loopDone ??= this.loop();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private async loop(): Promise<void> {
    let attempt = 0;
    while (!this.stopping) {
      let closed: Promise<void> | undefined;
      try {
        // After the database failed, read again only once it answers: until then the queue keeps the messages.
        if (this.behindSince !== undefined) await within(this.deps.store.archive.lastId(), this.o.holdMs, 'the database');
        if (this.stopping) break;
        const model = await this.deps.connection();
        const ch = await model.createChannel();
        ch.on('error', (error: Error) => {
          this.lastError = `channel: ${error.message}`;
        });
        closed = new Promise<void>((resolve) => ch.once('close', () => resolve()));
        this.channel = ch;
        await ch.prefetch(this.o.prefetch);
        const queue = await ch.checkQueue(this.queue);
        const ok = await ch.consume(this.queue, (m) => this.onMessage(ch, m), { noAck: false });
        this.consumerTag = ok.consumerTag;
        // Behind until a batch is stored, or there is nothing left to store.
        if (queue.messageCount === 0) this.caughtUp();
        if (this.behindSince === undefined) this.status = 'running';
        attempt = 0;
        await closed;
      } catch (error) {
        this.lastError = message(error);
        if (this.behindSince === undefined) this.status = 'connecting';
        this.o.logger.debug('archive ingestion: not reading the parked queue; trying again', { consumer: this.consumer, queue: this.queue, error: this.lastError });
      }
      const ch = this.channel;
      this.channel = undefined;
      this.consumerTag = undefined;
      if (ch !== undefined) await this.drop(ch);
      if (this.stopping) break;
      if (this.status === 'running') this.status = 'connecting';
      await this.sleep(backoffDelay(++attempt, this.o.initialDelayMs, this.o.maxDelayMs));
    }
    this.status = 'stopped';
  }

  /** The channel is gone (or going): what it held is back in the queue; forget it. */
  private async drop(ch: amqp.Channel): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.due = false;
    this.held = [];
    this.waiting = this.waiting.filter((b) => b.channel !== ch);
    this.inFlight = this.inFlight.filter((b) => b.channel !== ch);
    await closeQuietly(ch);
  }

  private onMessage(ch: amqp.Channel, m: amqp.ConsumeMessage | null): void {
    if (m === null) {
      // Cancelled by the broker (the queue was deleted): read it again later.
      void closeQuietly(ch);
      return;
    }
    if (ch !== this.channel) return;
    this.held.push(m);
    if (this.held.length >= this.o.batchSize) this.cut(ch);
    else if (!this.due) this.timer ??= setTimeout(() => this.delayed(ch), this.o.maxBatchDelayMs);
  }

  /**
   * The held messages have waited `maxBatchDelayMs`. With a store slot free they are stored
   * now; with every slot busy, a part batch cut now would only wait behind them, so the
   * messages go on filling it until a slot frees (fewer, fuller transactions under load).
   */
  private delayed(ch: amqp.Channel): void {
    this.timer = undefined;
    if (this.storing < INGEST_DEFAULTS.parallel) this.cut(ch);
    else this.due = true;
  }

  /** Makes a batch of what is held and stores it (at most `parallel` batches at once). */
  private cut(ch: amqp.Channel): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.due = false;
    while (this.held.length > 0) {
      const batch: Batch = { channel: ch, messages: this.held.splice(0, this.o.batchSize), stored: false };
      this.inFlight.push(batch);
      this.waiting.push(batch);
    }
    this.pump();
  }

  private pump(): void {
    while (this.storing < INGEST_DEFAULTS.parallel && this.waiting.length > 0) {
      const batch = this.waiting.shift() as Batch;
      this.storing++;
      void this.store(batch).finally(() => {
        this.storing--;
        const ch = this.channel;
        if (this.due && this.waiting.length === 0 && ch !== undefined) this.cut(ch);
        else this.pump();
      });
    }
  }

  private rows(batch: Batch): ArchiveRowInput[] {
    const now = new Date();
    return batch.messages.map((m) => archiveRow(this.consumer, m, now));
  }

  private async store(batch: Batch): Promise<void> {
    const rows = this.rows(batch);
    const deadline = Date.now() + this.o.holdMs;
    let attempt = 0;
    let result: ArchiveInsertResult | undefined;
    while (result === undefined) {
      if (batch.channel !== this.channel) return; // given back already
      const insert = this.insert(rows);
      try {
        result = await within(insert, Math.max(100, deadline - Date.now()), 'the database');
      } catch (error) {
        // An insert that outlives its wait may still commit: count it then (its messages come again as copies).
        if (error instanceof Timeout) insert.then((late) => this.count(late), () => undefined);
        this.fellBehind(error);
        if (Date.now() >= deadline || this.stopping) {
          // Held long enough: the queue takes them back (closing the channel returns every unacknowledged message).
          this.o.logger.warn('archive ingestion: the database did not take a batch; the parked queue keeps the messages, and ingestion resumes once the database answers', { consumer: this.consumer, messages: batch.messages.length, error: message(error) });
          await closeQuietly(batch.channel);
          return;
        }
        await new Promise((r) => setTimeout(r, Math.min(backoffDelay(++attempt, this.o.initialDelayMs, this.o.maxDelayMs), Math.max(0, deadline - Date.now()))));
      }
    }
    batch.stored = true;
    this.count(result);
    this.caughtUp();
    if (this.channel === batch.channel) this.status = 'running';
    this.settle();
    this.events.emit('batch', { consumer: this.consumer, inserted: result.inserted, duplicates: result.duplicates });
    if (this.o.onArchived !== undefined && result.inserted > 0) {
      const events: ArchivedEvent[] = [];
      result.ids.forEach((id, i) => {
        const r = rows[i] as ArchiveRowInput;
        if (id !== undefined) events.push({ id, consumer: r.consumer, messageId: r.messageId, reason: r.reason, errorClass: r.errorClass, errorMessage: r.errorMessage, fingerprint: r.fingerprint, failedAt: r.failedAt });
      });
      try {
        this.o.onArchived(events);
      } catch (error) {
        this.o.logger.warn('archive ingestion: onArchived threw; the rows are archived', { consumer: this.consumer, error: message(error) });
      }
    }
    if (result.inserted > 0) this.announce(rows, result.ids);
  }

  /** The fault events of the rows just archived, when the topology asks for them; a failure is logged and counted, never the rows'. */
  private announce(rows: readonly ArchiveRowInput[], ids: ReadonlyArray<string | undefined>): void {
    const faults = this.deps.topology.faults;
    if (faults === undefined) return;
    const sender = (this.faultSender ??= channelSender(this.deps.connection));
    const report = { logger: this.o.logger, failed: (): void => void this.faultEventsFailed++ };
    ids.forEach((id, i) => {
      const r = rows[i];
      if (id === undefined || r === undefined) return;
      const failure = { errorClass: r.errorClass ?? 'unknown', message: r.errorMessage ?? '', stack: r.errorStack ?? '' };
      const event = faultEvent(faults, { stage: 'archived', consumer: r.consumer, messageId: r.messageId ?? undefined, reason: r.reason ?? 'unknown', failure, fingerprint: r.fingerprint, parkedAt: r.parkedAt ?? r.failedAt, attempts: r.attempts ?? 0, body: r.body });
      void publishFaultEvent(sender, faults, event, report);
    });
  }

  /** A batch in one transaction; refused for what it holds, row by row, then rows stripped to their identity. */
  private async insert(rows: ArchiveRowInput[]): Promise<ArchiveInsertResult> {
    const archive = this.deps.store.archive;
    try {
      return await archive.insert(rows);
    } catch (error) {
      if (isTransient(error)) throw error;
      this.o.logger.warn('archive ingestion: the database refused a batch; storing its messages one by one', { consumer: this.consumer, error: message(error) });
      const ids: Array<string | undefined> = [];
      let inserted = 0;
      let duplicates = 0;
      for (const row of rows) {
        let r: ArchiveInsertResult;
        try {
          r = await archive.insert([row]);
        } catch (refused) {
          if (isTransient(refused)) throw refused;
          r = await archive.insert([minimalRow(row, message(refused))]);
          this.o.logger.warn('archive ingestion: a message was archived with nothing indexed but its identity (its bytes are kept)', { consumer: this.consumer, messageId: row.messageId, error: message(refused) });
        }
        ids.push(r.ids[0]);
        inserted += r.inserted;
        duplicates += r.duplicates;
      }
      return { ids, inserted, duplicates };
    }
  }

  private count(result: ArchiveInsertResult): void {
    this.batches++;
    this.archived += result.inserted;
    this.duplicates += result.duplicates;
    this.lastArchivedAt = new Date();
  }

  private caughtUp(): void {
    if (this.behindSince === undefined) return;
    this.o.logger.info('archive ingestion resumes: the database answers again', { consumer: this.consumer, behindMs: Date.now() - this.behindSince.getTime() });
    this.behindSince = undefined;
    this.status = this.channel !== undefined ? 'running' : 'connecting';
    this.events.emit('caught-up', { consumer: this.consumer });
  }

  private fellBehind(error: unknown): void {
    this.lastError = message(error);
    if (this.behindSince === undefined) {
      this.behindSince = new Date();
      this.status = 'behind';
      this.o.logger.warn('archive ingestion is behind: the database does not take batches; the parked queue keeps the messages', { consumer: this.consumer, error: this.lastError });
      this.events.emit('behind', { consumer: this.consumer, error: this.lastError });
    }
  }

  /** Acknowledges stored batches from the oldest, each with one multiple ack, stopping at the first not stored yet. */
  private settle(): void {
    while (this.inFlight[0]?.stored === true) {
      const b = this.inFlight.shift() as Batch;
      const last = b.messages[b.messages.length - 1];
      if (last === undefined) continue;
      try {
        b.channel.ack(last, true);
      } catch {
        // The channel closed: the messages come again, and the archive keeps each once.
      }
    }
  }

  /** Stops taking messages, stores (and acknowledges) what it holds, then lets go. */
  async stop(): Promise<void> {
    this.stopping = true;
    const ch = this.channel;
    if (ch !== undefined && this.consumerTag !== undefined) await ch.cancel(this.consumerTag).catch(() => undefined);
    if (ch !== undefined) {
      this.cut(ch);
      const until = Date.now() + this.o.holdMs + 1000;
      while (this.inFlight.some((b) => b.channel === ch) && this.channel === ch && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
      await closeQuietly(ch);
    }
    this.wake?.();
    await this.loopDone;
    await this.faultSender?.close();
  }

  state(): ArchiveIngestState {
    return { consumer: this.consumer, queue: this.queue, status: this.status, archived: this.archived, duplicates: this.duplicates, batches: this.batches, held: this.heldCount, lastArchivedAt: this.lastArchivedAt, behindSince: this.behindSince, lastError: this.lastError, faultEventsFailed: this.faultEventsFailed };
  }
}

function closeQuietly(ch: amqp.Channel): Promise<void> {
  return closeChannel(ch);
}

/**
 * Reads the parked queues of a topology's consumers into the archive of a store.
 *
 * Events: `batch` (`{ consumer, inserted, duplicates }`) after each stored batch,
 * `behind` (`{ consumer, error }`) when the database stops taking batches, `caught-up`
 * (`{ consumer }`) when it takes them again.
 *
 * @example
 * const ingester = archiveIngester({ store, topology, connection: () => model }, { batchSize: 500 });
 * ingester.start();
 * // on shutdown:
 * await ingester.stop();
 */
export class ArchiveIngester extends EventEmitter {
  private readonly readers: Reader[];
  private started = false;
  /** The retention schedule of the `retention` option. */
  readonly retention: ArchiveRetentionSchedule | undefined;

  constructor(deps: ArchiveIngesterDeps, options: ArchiveIngestOptions = {}) {
    super();
    if (typeof deps?.store?.archive?.insert !== 'function') throw new InvalidOptionError('store', 'expected a store with archive tables, such as sqliteStore() or postgresStore()');
    if (typeof deps.connection !== 'function') throw new InvalidOptionError('connection', 'expected a function that gives the broker connection');
    const o = resolveOptions(deps.topology, options);
    this.readers = o.consumers.map((name) => new Reader(name, deps.topology.consumer(name).parkedQueue, deps, o, this));
    this.retention = options.retention === undefined ? undefined : new ArchiveRetentionSchedule(deps.store.archive, options.retention, o.logger);
  }

  /** Starts reading every parked queue; returns at once (see {@link state}). */
  start(): void {
    if (this.started) return;
    this.started = true;
    for (const r of this.readers) r.start();
    this.retention?.start();
  }

  /** Each consumer's ingestion. */
  state(): ArchiveIngestState[] {
    return this.readers.map((r) => r.state());
  }

  /** True while any consumer's ingestion is behind (the database does not take its batches). */
  get behind(): boolean {
    return this.readers.some((r) => r.status === 'behind');
  }

  /** Stops taking messages, stores what is held (up to `holdMs`), and closes its channels. Messages not stored stay in their queue. */
  async stop(): Promise<void> {
    await Promise.all([...this.readers.map((r) => r.stop()), this.retention?.stop()]);
  }
}

/** An {@link ArchiveIngester}. */
export function archiveIngester(deps: ArchiveIngesterDeps, options: ArchiveIngestOptions = {}): ArchiveIngester {
  return new ArchiveIngester(deps, options);
}
