/**
 * The archive as operators and the console use it: reading (pages, counts, groups, one
 * message, a message's history) and actions on rows (replay, canary, purge, resolve,
 * export, edit and retry). Actions take the rows that exist when they start (`throughId`):
 * a row parked meanwhile, a replayed message that fails again among them, is not acted on.
 */
import { randomUUID } from 'node:crypto';
import type * as amqp from 'amqplib';
import { closeChannel } from '../connection/channel.js';
import { coalesceWrites } from '../connection/writes.js';
import { InvalidOptionError } from '../errors.js';
import { HEADER } from '../headers.js';
import { toLogger, type Logger } from '../logger.js';
import { QueueNotFoundError } from '../park/errors.js';
import { copyProperties, decodeBody, plainValue, replayHeaders, replaySource } from '../park/message.js';
import { exportRecord, type ParkedTarget } from '../park/operations.js';
import { uuidv7 } from '../publish/message-id.js';
import { ARCHIVE_STATES, type ArchiveCounts, type ArchiveFilter, type ArchiveGroup, type ArchivePage, type ArchivePageQuery, type ArchiveRecord, type ArchiveSearch, type ArchiveStore } from '../store/archive.js';
import { traceReplay } from '../trace/index.js';
import { decodeFields } from './encoding.js';
import { isTransient } from './ingest.js';
import { archivedMessage } from './row.js';
import type {
  ArchiveActionOptions,
  ArchiveCanary,
  ArchiveCanaryOptions,
  ArchiveCanaryResult,
  ArchiveChangeResult,
  ArchivedMessage,
  ArchiveEdit,
  ArchiveEditOptions,
  ArchiveEditResult,
  ArchiveHistoryEntry,
  ArchiveReplayOptions,
  ArchiveReplayResult,
} from './types.js';

/** What the archive needs of a store: its archive tables, and the idempotency markers for replays. */
export interface ArchiveHost {
  readonly archive: ArchiveStore;
  /** Which of `messageIds` have an idempotency marker for `consumer`. */
  processed(consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
}

/** Options of {@link Archive}. */
export interface ArchiveOptions {
  /**
   * Allow {@link Archive.editAndRetry}: changing an archived message and sending it again
   * as a new message. For operators only; off unless a deployment turns it on.
   * @default false
   */
  edits?: boolean;
  /** @default none */
  logger?: Logger;
}

/** Rows changed per statement by purge and resolve. */
const CHANGE_BATCH = 1000;
/** Row ids a replay reports (a canary watches them). */
const MAX_REPORTED_IDS = 1000;
/** Rows per batch of a replay that is not paced. */
const REPLAY_BATCH = 500;
/** Batches of a replay that is not paced sent and not yet settled at most: claimed and sent while the broker confirms the earlier. */
const REPLAY_WINDOW = 3;
/** Bytes of a body kept in an edit's diff, each side. */
const DIFF_BODY_CHARS = 8192;

function checkRate(rate: number | undefined): void {
  if (rate !== undefined && (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0 || rate > 1_000_000)) throw new InvalidOptionError('ratePerSecond', `${JSON.stringify(rate)} is not a rate above 0 and at most 1000000 per second`);
}

function checkLimit(limit: number | undefined): void {
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1)) throw new InvalidOptionError('limit', `${JSON.stringify(limit)} is not a whole number of at least 1`);
}

function checkActor(actor: unknown): string {
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > 200) throw new InvalidOptionError('actor', `${JSON.stringify(actor)} is not a name of 1 to 200 characters`);
  return actor.trim();
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (ms <= 0 || signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

async function checkQueue(model: amqp.ChannelModel, queue: string): Promise<void> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  try {
    await ch.checkQueue(queue);
  } catch (error) {
    if ((error as { code?: unknown }).code === 404) throw new QueueNotFoundError(queue, { cause: error });
    throw error;
  } finally {
    await closeChannel(ch);
  }
}

/** Retries a store call that meets an outage, for up to `forMs`. */
async function persist<T>(fn: () => Promise<T>, forMs: number): Promise<T> {
  const deadline = Date.now() + forMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      if (!isTransient(error) || Date.now() >= deadline) throw error;
      await sleep(Math.min(2000, 100 * 2 ** attempt));
    }
  }
}

/** A batch of a replay, sent: its rows published, those it stopped before, and the broker's word on them. */
interface SentBatch {
  readonly published: readonly ArchiveRecord[];
  readonly unsent: readonly ArchiveRecord[];
  /** Resolves once every copy is confirmed (undefined), or with why one was not. */
  readonly confirmed: Promise<string | undefined>;
}

/**
 * The publisher confirms of one batch: a callback per publish, and a promise of them all
 * that settles when the last comes in (a nack or the channel's close calls them with an
 * error). Other batches' confirms are counted on their own.
 */
class Confirms {
  private expected = 0;
  private arrived = 0;
  private failure: string | undefined;
  private resolve: ((failure: string | undefined) => void) | undefined;
  private sealed = false;

  /** The callback of the next publish. */
  next(): (err: unknown) => void {
    this.expected++;
    let called = false;
    return (err: unknown) => {
      if (called) return;
      called = true;
      this.arrived++;
      if (err !== null && err !== undefined) this.failure ??= err instanceof Error ? err.message : String(err);
      this.check();
    };
  }

  /** Every confirm of the batch, once no more publishes are added. */
  all(): Promise<string | undefined> {
    this.sealed = true;
    const p = new Promise<string | undefined>((resolve) => (this.resolve = resolve));
    this.check();
    return p;
  }

  private check(): void {
    if (this.sealed && this.resolve !== undefined && this.arrived >= this.expected) this.resolve(this.failure);
  }
}

/**
 * The failure archive of a store: read it, act on its rows.
 *
 * @example
 * const archive = new Archive(store);
 * const groups = await archive.groups({ consumer: 'billing' });
 * const page = await archive.page({ filter: archiveFilter({ consumer: 'billing', error: 'tenant t4', since: '2d' }) });
 * await archive.replay(model, topology.consumer('billing'), { filter: { consumer: 'billing', fingerprint: groups[0].fingerprint }, actor: 'alice' });
 */
export class Archive {
  readonly store: ArchiveHost;
  private readonly edits: boolean;
  private readonly logger: Logger;

  constructor(store: ArchiveHost, options: ArchiveOptions = {}) {
    if (typeof store?.archive?.page !== 'function') throw new InvalidOptionError('store', 'expected a store with archive tables, such as sqliteStore() or postgresStore()');
    if (options.edits !== undefined && typeof options.edits !== 'boolean') throw new InvalidOptionError('edits', 'expected true or false');
    this.store = store;
    this.edits = options.edits === true;
    this.logger = toLogger(options.logger);
  }

  private get tables(): ArchiveStore {
    return this.store.archive;
  }

  /** A page of rows (newest failure first by default), with the position of the next. */
  page(query: ArchivePageQuery): Promise<ArchivePage> {
    return this.tables.page(query);
  }

  /** Rows matching, exactly. */
  count(filter: ArchiveFilter): Promise<number> {
    return this.tables.count(filter);
  }

  /** Rows by failure fingerprint, largest group first; exact over every matching row. */
  groups(filter: ArchiveFilter, options: { limit?: number } = {}): Promise<ArchiveGroup[]> {
    return this.tables.groups(filter, options.limit ?? 100);
  }

  /** Counts per consumer (open, replayed, resolved, bytes, oldest): for metrics and the overview. */
  counts(consumer?: string): Promise<ArchiveCounts[]> {
    return this.tables.counts(consumer);
  }

  /** How the backend searches (indexes, and why one is missing). */
  search(): Promise<ArchiveSearch> {
    return this.tables.search();
  }

  /**
   * One archived message, decoded. With `viewed`, it counts as looked at (retention
   * warns before deleting rows nobody looked at).
   */
  async get(id: string, options: { viewed?: boolean } = {}): Promise<ArchivedMessage | undefined> {
    const record = await this.tables.get(id);
    if (record === undefined) return undefined;
    if (options.viewed === true) await this.tables.markViewed([id], new Date()).catch((error: unknown) => this.logger.warn('could not note an archived message as viewed', { id, error: String(error) }));
    return archivedMessage(record);
  }

  /**
   * The timeline of one message id at one consumer, over every parking: when it first
   * failed, when and why it was parked (which attempt), who replayed or resolved it.
   * Oldest first; at most 100 parkings.
   */
  async history(consumer: string, messageId: string): Promise<{ readonly entries: ArchiveHistoryEntry[]; readonly rows: ArchivedMessage[] }> {
    const { rows } = await this.tables.records({ consumer, messageIds: [messageId], states: ARCHIVE_STATES }, 100);
    const messages = rows.map(archivedMessage);
    const entries: ArchiveHistoryEntry[] = [];
    for (const m of messages) {
      const p = m.parked;
      if (p.firstFailedAt !== undefined && (m.attempts ?? 1) > 1) entries.push({ at: p.firstFailedAt, event: 'first-failure', rowId: m.id, attempt: 1, actor: null, detail: 'attempt 1 failed' });
      const what = [m.errorClass, m.errorMessage].filter(Boolean).join(': ');
      entries.push({ at: m.parkedAt ?? m.failedAt, event: 'parked', rowId: m.id, attempt: m.attempts, actor: null, detail: `parked: ${m.reason ?? 'reason unknown'}${m.attempts !== null ? ` after attempt ${m.attempts}` : ''}${m.replays > 0 ? ` (after ${m.replays} replay${m.replays === 1 ? '' : 's'})` : ''}${what ? `: ${what}` : ''}` });
      if (m.replayedAt !== null) entries.push({ at: m.replayedAt, event: 'replayed', rowId: m.id, attempt: null, actor: m.replayedBy, detail: `replayed${m.replayCount > 1 ? ` (${m.replayCount} times, the last)` : ''} by ${m.replayedBy ?? 'unknown'}` });
      if (m.resolvedAt !== null) entries.push({ at: m.resolvedAt, event: 'resolved', rowId: m.id, attempt: null, actor: m.resolvedBy, detail: `resolved by ${m.resolvedBy ?? 'unknown'}: ${m.resolveReason ?? ''}` });
    }
    // In the order things happened to the message: each parking, then what was done with
    // it (a replay's mark is written after the broker's confirm, by when the copy may
    // have failed and been parked again, so times alone would put them out of order).
    return { entries, rows: messages };
  }

  /** The rows as they are now, for an action: bounded by the last row id. */
  private async bounded(filter: ArchiveFilter): Promise<ArchiveFilter> {
    if (filter.throughId !== undefined) return filter;
    const last = await this.tables.lastId();
    return { ...filter, throughId: last ?? '0' };
  }

  /**
   * Replays rows to their consumer's own work queue (through the default exchange, so no
   * other queue bound to the routing key gets a copy), with the same message id and
   * properties and replay headers, confirmed by the broker; then marks the rows replayed.
   * Rows are claimed first, so two replays never send the same row; a replay that dies
   * leaves its claim to expire, and the rows it had sent but not marked are sent at most
   * once more by the next. Rows whose idempotency marker exists for the consumer are not
   * sent: they are resolved as already done (unless `force`).
   *
   * Not paced, it keeps up to three batches under way: while the broker confirms one, the
   * next is claimed and sent. Each batch is marked once all its copies are confirmed, the
   * batches in the order they were sent, so a replay that dies leaves at most those three
   * batches claimed and unmarked.
   */
  async replay(model: amqp.ChannelModel, target: ParkedTarget, options: ArchiveReplayOptions): Promise<ArchiveReplayResult> {
    const started = Date.now();
    if (options.filter.consumer !== target.name) throw new InvalidOptionError('filter.consumer', `${JSON.stringify(options.filter.consumer)} is not the consumer replayed to (${target.name})`);
    checkRate(options.ratePerSecond);
    checkLimit(options.limit);
    const actor = checkActor(options.actor);
    const rate = options.ratePerSecond;
    const leaseMs = options.leaseMs ?? 60_000;
    if (!Number.isInteger(leaseMs) || leaseMs < 1000 || leaseMs > 3_600_000) throw new InvalidOptionError('leaseMs', `${JSON.stringify(leaseMs)} is not a whole number from 1000 to 3600000`);
    if (options.batchSize !== undefined && (!Number.isInteger(options.batchSize) || options.batchSize < 1)) throw new InvalidOptionError('batchSize', `${JSON.stringify(options.batchSize)} is not a whole number of at least 1`);
    // Paced, a batch is sent within half its claim's lease: a claim that ran out while its
    // rows were still being sent would let another replay claim and send them too.
    const batchSize = Math.max(1, Math.min(options.batchSize ?? (rate === undefined ? REPLAY_BATCH : 200), 1000, rate === undefined ? 1000 : Math.min(Math.ceil(rate * 5), Math.floor((rate * leaseMs) / 2000))));
    // Unpaced, the next batches are claimed and sent while the broker confirms the earlier
    // ones; paced, the confirms are not what holds it back, and a batch claimed ahead would
    // wait out its pacing while claimed.
    const window = rate === undefined ? REPLAY_WINDOW : 1;
    const filter = await this.bounded(options.filter);
    const matched = await this.tables.count(filter);
    const total = options.limit === undefined ? matched : Math.min(matched, options.limit);
    const base = { consumer: target.name, targetQueue: target.queue, matched };
    if (options.dryRun === true) return { ...base, dryRun: true, replayed: 0, alreadyDone: 0, replayedIds: [], stopReason: 'done', error: undefined, elapsedMs: Date.now() - started, ratePerSecond: 0 };
    await checkQueue(model, target.queue);
    // A batch is up to a thousand publishes: one socket write per turn of the event loop, not one each.
    coalesceWrites(model);
    const owner = `replay ${randomUUID()}`;
    const trace = traceReplay(target.name, target.parkedQueue, actor);
    const ch = await model.createConfirmChannel();
    let channelError: Error | undefined;
    ch.on('error', (e: Error) => (channelError = e));
    const returned = new Set<string>();
    ch.on('return', (m: amqp.Message) => returned.add(String(m.properties.headers?.[HEADER.archiveRow] ?? '')));
    let replayed = 0;
    let alreadyDone = 0;
    const replayedIds: string[] = [];
    let stopReason: ArchiveReplayResult['stopReason'] = 'done';
    let error: string | undefined;
    /** Set by a batch that settled badly: no further batch is claimed. */
    let halted = false;
    const halt = (reason: ArchiveReplayResult['stopReason'], why: string) => {
      if (!halted) {
        stopReason = reason;
        error = why;
      }
      halted = true;
    };
    let cursor: string | undefined;
    let firstPublish: number | undefined;
    let lastPublish = 0;
    let sent = 0;
    const progress = () => options.onProgress?.({ total, replayed, alreadyDone, elapsedMs: Date.now() - started });
    /**
     * A published batch's end, in the order the batches were sent, one at a time: once the
     * broker has confirmed every copy of it, the confirmed rows are marked replayed and the
     * rest let go. A row is marked only after its copy's confirm, so a replay that dies
     * (or whose copies the broker does not confirm) leaves the rows of every batch not yet
     * marked claimed until their lease ends; the next replay sends them once more.
     */
    const settle = async (batch: SentBatch): Promise<void> => {
      const failure = await batch.confirmed;
      if (failure !== undefined) {
        halt('failed', `the broker did not confirm the copies: ${failure}`);
        return;
      }
      // The broker returns an unroutable copy before it confirms it.
      const ok = batch.published.filter((r) => !returned.has(r.id));
      const bounced = batch.published.filter((r) => returned.has(r.id));
      await persist(() => this.tables.markReplayed(ok.map((r) => r.id), { owner, actor, at: new Date() }), 60_000);
      await this.tables.release([...bounced, ...batch.unsent].map((r) => r.id), owner).catch(() => undefined);
      replayed += ok.length;
      for (const r of ok) if (replayedIds.length < MAX_REPORTED_IDS) replayedIds.push(r.id);
      progress();
      if (bounced.length > 0) halt('unroutable', `the broker could not route a copy to queue ${target.queue} (it was deleted, or is not a queue of this vhost)`);
    };
    let tail: Promise<void> = Promise.resolve();
    const unsettled: Promise<void>[] = [];
    /** Rows published or skipped so far, settled or not: what the limit counts. */
    let taken = 0;
    try {
      while (!options.signal?.aborted && !halted) {
        const left = options.limit === undefined ? batchSize : Math.min(batchSize, options.limit - taken);
        if (left <= 0) {
          stopReason = 'limit';
          break;
        }
        if (rate !== undefined && firstPublish !== undefined) {
          // Paced: the wait for the batch's first send comes before its claim, not inside it.
          await sleep(firstPublish + (sent * 1000) / rate - Date.now(), options.signal);
          if (options.signal?.aborted) break;
        }
        const claimed = await persist(() => this.tables.claim(filter, { owner, leaseMs, limit: left, ...(cursor !== undefined ? { after: cursor } : {}) }), 30_000);
        cursor = claimed.next;
        if (claimed.rows.length === 0) {
          if (claimed.next === undefined) break;
          continue;
        }
        let rows: ArchiveRecord[] = claimed.rows;
        if (options.force !== true) {
          // One marker query per batch.
          const ids = rows.map((r) => r.messageId).filter((id): id is string => id !== null);
          const done = ids.length === 0 ? new Set<string>() : await this.store.processed(target.name, ids);
          if (done.size > 0) {
            const skip = rows.filter((r) => r.messageId !== null && done.has(r.messageId));
            rows = rows.filter((r) => !(r.messageId !== null && done.has(r.messageId)));
            await this.tables.release(skip.map((r) => r.id), owner);
            alreadyDone += await this.tables.resolve({ consumer: target.name, ids: skip.map((r) => r.id), states: ['open', 'replayed'] }, { actor, reason: 'already done: the consumer has the idempotency marker of this message id (replay skipped it)', at: new Date() }, skip.length);
            taken += skip.length;
          }
        }
        const confirms = new Confirms();
        const published: ArchiveRecord[] = [];
        for (const row of rows) {
          if (options.signal?.aborted) break;
          if (rate !== undefined) {
            firstPublish ??= Date.now();
            await sleep(firstPublish + (sent * 1000) / rate - Date.now(), options.signal);
            if (options.signal?.aborted) break;
          }
          // What `archivedMessage` gives, without the parts a replay does not send.
          const kept = decodeFields(row.headers);
          const headers = trace.headers(replayHeaders(replaySource(kept, row.routingKey), new Date()));
          headers[HEADER.archiveRow] = row.id;
          const properties: amqp.Options.Publish = { ...copyProperties(decodeFields(row.properties), headers, true), mandatory: true };
          firstPublish ??= Date.now();
          const confirmed = confirms.next();
          try {
            ch.publish('', target.queue, row.body, properties, confirmed);
          } catch (e) {
            // The channel closed under it: nothing more goes out on it.
            confirmed(e);
            break;
          }
          lastPublish = Date.now();
          sent++;
          taken++;
          published.push(row);
        }
        const batch: SentBatch = { published, unsent: rows.slice(published.length), confirmed: confirms.all() };
        const settled = tail.then(() => settle(batch));
        // Awaited below, or after the loop: a mark that fails while a claim is awaited is not an unhandled rejection.
        settled.catch(() => undefined);
        tail = settled;
        unsettled.push(settled);
        while (unsettled.length >= window) await unsettled.shift();
        if (channelError !== undefined && !halted) throw channelError;
      }
      await tail;
      if (options.signal?.aborted && stopReason === 'done') stopReason = 'aborted';
      trace.end({ replayed });
    } catch (e) {
      // What the broker confirms of the batches under way is still marked.
      await tail.catch(() => undefined);
      trace.end({ error: e });
      stopReason = 'failed';
      error = e instanceof Error ? e.message : String(e);
      this.logger.warn('archive replay stopped; what was confirmed is marked replayed, the rest stays open (claims expire by themselves)', { consumer: target.name, replayed, error });
    } finally {
      await closeChannel(ch);
    }
    const span = firstPublish === undefined ? 0 : lastPublish - firstPublish;
    return { ...base, dryRun: false, replayed, alreadyDone, replayedIds, stopReason, error, elapsedMs: Date.now() - started, ratePerSecond: span > 0 && replayed > 1 ? ((replayed - 1) * 1000) / span : 0 };
  }

  /**
   * Replays a few rows first and watches them: a canary succeeded when the consumer's
   * idempotency marker appears, failed when its message id is parked (and archived) again,
   * and is taken as succeeded when neither happens within the window. The archive must
   * be ingesting for a failure to be seen.
   */
  async canary(model: amqp.ChannelModel, target: ParkedTarget, options: ArchiveCanaryOptions): Promise<ArchiveCanaryResult> {
    const count = options.count ?? 3;
    if (!Number.isInteger(count) || count < 1 || count > 100) throw new InvalidOptionError('count', `${JSON.stringify(count)} is not a whole number from 1 to 100`);
    const windowMs = options.windowMs ?? 30_000;
    const pollMs = options.pollMs ?? 1000;
    if (!Number.isInteger(windowMs) || windowMs < 0 || windowMs > 3_600_000) throw new InvalidOptionError('windowMs', `${JSON.stringify(windowMs)} is not a whole number of milliseconds up to one hour`);
    if (!Number.isInteger(pollMs) || pollMs < 10 || pollMs > 60_000) throw new InvalidOptionError('pollMs', `${JSON.stringify(pollMs)} is not a whole number from 10 to 60000`);
    const filter = await this.bounded(options.filter);
    const { count: _c, windowMs: _w, pollMs: _p, onOutcome, ...replayOptions } = options;
    const replay = await this.replay(model, target, { ...replayOptions, filter, limit: count });
    const rows = await Promise.all(replay.replayedIds.map((id) => this.tables.get(id)));
    const watched = new Map<string, ArchiveCanary>();
    const pending = new Map<string, { rowId: string; messageId: string }>();
    for (const r of rows) {
      if (r === undefined) continue;
      if (r.messageId === null) {
        const c: ArchiveCanary = { rowId: r.id, messageId: null, outcome: 'unknown', evidence: 'no-message-id' };
        watched.set(r.id, c);
        onOutcome?.(c);
      } else pending.set(r.id, { rowId: r.id, messageId: r.messageId });
    }
    const deadline = Date.now() + windowMs;
    while (pending.size > 0 && !options.signal?.aborted) {
      const ids = [...pending.values()].map((p) => p.messageId);
      const done = await this.store.processed(target.name, ids);
      const again = await this.tables.page({ filter: { consumer: target.name, messageIds: ids, states: ARCHIVE_STATES }, limit: 1000 });
      for (const [rowId, p] of pending) {
        const newer = again.rows.find((r) => r.messageId === p.messageId && BigInt(r.id) > BigInt(filter.throughId ?? '0'));
        let c: ArchiveCanary | undefined;
        if (newer !== undefined) c = { rowId, messageId: p.messageId, outcome: 'failed', evidence: 'parked-again', newRowId: newer.id, error: [newer.errorClass, newer.errorMessage].filter(Boolean).join(': ') };
        else if (done.has(p.messageId)) c = { rowId, messageId: p.messageId, outcome: 'succeeded', evidence: 'processed' };
        else if (Date.now() >= deadline) c = { rowId, messageId: p.messageId, outcome: 'succeeded', evidence: 'window' };
        if (c !== undefined) {
          pending.delete(rowId);
          watched.set(rowId, c);
          onOutcome?.(c);
        }
      }
      if (pending.size > 0) await sleep(Math.min(pollMs, Math.max(0, deadline - Date.now()) + 1), options.signal);
    }
    const canaries = [...watched.values()];
    const failed = canaries.some((c) => c.outcome === 'failed');
    const verdict = replay.replayed === 0 ? 'empty' : failed ? 'failed' : canaries.some((c) => c.outcome === 'succeeded') ? 'succeeded' : 'unknown';
    return { replay, canaries, verdict, remaining: await this.tables.count({ ...filter, states: ['open'] }) };
  }

  /** Applies a batch action until it finds no more rows, the limit, or the signal. */
  private async change(options: ArchiveActionOptions, step: (filter: ArchiveFilter, limit: number) => Promise<number>): Promise<ArchiveChangeResult> {
    checkLimit(options.limit);
    checkActor(options.actor);
    const filter = await this.bounded(options.filter);
    let count = 0;
    for (;;) {
      if (options.signal?.aborted) return { consumer: filter.consumer, count, stopReason: 'aborted' };
      const left = options.limit === undefined ? CHANGE_BATCH : Math.min(CHANGE_BATCH, options.limit - count);
      if (left <= 0) return { consumer: filter.consumer, count, stopReason: 'limit' };
      const n = await persist(() => step(filter, left), 30_000);
      count += n;
      if (n < left) return { consumer: filter.consumer, count, stopReason: 'done' };
    }
  }

  /** Deletes matching rows (and their payloads), in batches. */
  async purge(options: ArchiveActionOptions): Promise<ArchiveChangeResult> {
    return this.change(options, (filter, limit) => this.tables.purge(filter, limit));
  }

  /** Resolves matching rows with a reason: the failures are no longer open (ServicePulse's "archive a group"). */
  async resolve(options: ArchiveActionOptions & { reason: string }): Promise<ArchiveChangeResult> {
    if (typeof options.reason !== 'string' || options.reason.trim() === '' || options.reason.length > 1000) throw new InvalidOptionError('reason', `${JSON.stringify(options.reason)} is not a reason of 1 to 1000 characters`, 'Say why these failures need nothing more, e.g. "customer refunded by hand".');
    const actor = checkActor(options.actor);
    return this.change(options, (filter, limit) => this.tables.resolve(filter, { actor, reason: options.reason.trim(), at: new Date() }, limit));
  }

  /**
   * Writes matching rows as JSON lines, oldest failure first: the parked-message export
   * (`exportRecord`) with the row's id, state and history columns. The rows count as
   * looked at.
   */
  async export(options: { filter: ArchiveFilter; write: (line: string) => void | Promise<void>; limit?: number; signal?: AbortSignal }): Promise<{ readonly exported: number; readonly stopReason: 'done' | 'limit' | 'aborted' }> {
    checkLimit(options.limit);
    const filter = await this.bounded(options.filter);
    let exported = 0;
    let after: string | undefined;
    for (;;) {
      if (options.signal?.aborted) return { exported, stopReason: 'aborted' };
      const left = options.limit === undefined ? 500 : Math.min(500, options.limit - exported);
      if (left <= 0) return { exported, stopReason: 'limit' };
      const page = await this.tables.records(filter, left, after);
      for (const record of page.rows) {
        const m = archivedMessage(record);
        const { position: _p, ...rest } = exportRecord(m.parked);
        await options.write(`${JSON.stringify({ rowId: m.id, state: m.state, archivedAt: m.archivedAt.toISOString(), replayCount: m.replayCount, replayedAt: m.replayedAt?.toISOString() ?? null, replayedBy: m.replayedBy, resolvedAt: m.resolvedAt?.toISOString() ?? null, resolvedBy: m.resolvedBy, resolveReason: m.resolveReason, notIndexed: m.notIndexed, ...rest })}\n`);
        exported++;
      }
      await this.tables.markViewed(page.rows.map((r) => r.id), new Date()).catch(() => undefined);
      if (page.next === undefined) return { exported, stopReason: 'done' };
      after = page.next;
    }
  }

  /**
   * Changes an archived message (its body, headers) and sends it to its consumer's queue
   * as a new message, whose id is new and whose `warren-edited-from` header names the
   * original. The original row is kept, resolved with a reason that names the new
   * message; the result's diff is for the action record. Off unless `edits: true`.
   */
  async editAndRetry(model: amqp.ChannelModel, target: ParkedTarget, rowId: string, edit: ArchiveEdit, options: ArchiveEditOptions): Promise<ArchiveEditResult> {
    if (!this.edits) throw new InvalidOptionError('edits', 'editing archived messages is off', 'Turn it on where operators may use it: new Archive(store, { edits: true }) (on the command line, WARREN_ARCHIVE_EDITS=on).');
    const actor = checkActor(options.actor);
    if (typeof options.reason !== 'string' || options.reason.trim() === '' || options.reason.length > 1000) throw new InvalidOptionError('reason', 'give a reason of 1 to 1000 characters for the action record');
    const record = await this.tables.get(rowId);
    if (record === undefined || record.consumer !== target.name) throw new InvalidOptionError('row', `no archived message ${JSON.stringify(rowId)} of consumer ${target.name}`, 'Find it with `warren parked list CONSUMER --db URL`.');
    const m = archivedMessage(record);
    const body = edit.body === undefined ? m.body : Buffer.isBuffer(edit.body) ? edit.body : Buffer.from(JSON.stringify(edit.body.json) ?? 'null');
    if (body.length > 16 * 1024 * 1024) throw new InvalidOptionError('body', `is ${body.length} bytes, more than 16 MiB`);
    const headers = replayHeaders(m.parked, new Date());
    const changed: Record<string, { before: unknown; after: unknown }> = {};
    for (const name of edit.removeHeaders ?? []) {
      if (name in headers) changed[name] = { before: plainValue(headers[name]), after: null };
      delete headers[name];
    }
    for (const [name, value] of Object.entries(edit.setHeaders ?? {})) {
      if (name.startsWith('x-') || name.startsWith('warren-')) throw new InvalidOptionError('setHeaders', `${JSON.stringify(name)} is a header warren or the broker owns`, 'Change the producer\'s own headers only.');
      changed[name] = { before: plainValue(headers[name] ?? null), after: plainValue(value) };
      headers[name] = value;
    }
    const messageId = options.messageId ?? uuidv7();
    headers[HEADER.editedFrom] = m.messageId ?? `row ${rowId}`;
    delete headers[HEADER.replays];
    delete headers[HEADER.replayedAt];
    await checkQueue(model, target.queue);
    const ch = await model.createConfirmChannel();
    ch.on('error', () => undefined);
    let returned = false;
    ch.on('return', () => (returned = true));
    try {
      ch.publish('', target.queue, body, { ...copyProperties(m.parked.properties, headers, true), messageId, mandatory: true });
      await ch.waitForConfirms();
    } finally {
      await closeChannel(ch);
    }
    if (returned) throw new QueueNotFoundError(target.queue);
    await persist(() => this.tables.resolve({ consumer: target.name, ids: [rowId], states: ['open', 'replayed'] }, { actor, reason: `edited and sent again as message ${messageId}: ${options.reason.trim()}`, at: new Date() }, 1), 30_000);
    const shown = (b: Buffer) => {
      const d = decodeBody(b);
      const text = d.kind === 'json' ? JSON.stringify(d.value) : d.kind === 'text' ? d.text : `base64:${d.base64}`;
      return text.length > DIFF_BODY_CHARS ? `${text.slice(0, DIFF_BODY_CHARS)}… [${text.length - DIFF_BODY_CHARS} more characters]` : text;
    };
    const diff: { body?: { before: string; after: string }; headers?: Record<string, { before: unknown; after: unknown }> } = {};
    if (!body.equals(m.body)) diff.body = { before: shown(m.body), after: shown(body) };
    if (Object.keys(changed).length > 0) diff.headers = changed;
    return { rowId, originalMessageId: m.messageId, messageId, diff };
  }
}
