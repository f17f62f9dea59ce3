import type * as amqp from 'amqplib';
import { InvalidOptionError, UnroutableError } from '../errors.js';
import type { PublishObserver } from '../publish/publisher.js';
import type { ConsumerTopology } from '../topology/declaration.js';
import { QueueNotFoundError, WalkInterruptedError } from './errors.js';
import { isEmptyFilter, matchesFilter, type ParkedFilter } from './filter.js';
import { traceReplay } from '../trace/index.js';
import { copyProperties, decodeBody, plainValue, replayHeaders, type ParkedMessage } from './message.js';
import { parkedIdentity } from './identity.js';
import { closeChannel } from '../connection/channel.js';
import { walkParked, type MoveFailure, type Verdict, type WalkOptions, type WalkResult } from './reader.js';
import { sleepUnless } from '../sleeper.js';

/** The queues of a consumer that the parked-queue operations use. */
export type ParkedTarget = Pick<ConsumerTopology, 'name' | 'queue' | 'parkedQueue' | 'queueType'>;

/** Options shared by every operation on a parked queue. */
export interface ParkedOperationOptions extends Omit<WalkOptions, 'queueType' | 'maxScanned'> {
  /** Which messages to act on; the others stay parked, in their order. @default every message */
  filter?: ParkedFilter;
  /** Act on at most this many matching messages, from the head of the queue. @default no limit */
  limit?: number;
}

/** What an operation did: the walk, and how many messages matched the filter. */
export interface ParkedOperationResult extends WalkResult {
  readonly consumer: string;
  /** Messages that matched the filter (and the limit). */
  readonly matched: number;
  /** True when a `limit` ended the operation. */
  readonly limitReached: boolean;
}

const KEEP: Verdict = Object.freeze({ action: 'keep' });
const KEEP_AND_STOP: Verdict = Object.freeze({ action: 'keep', stop: true });

function checkLimit(limit: number | undefined): void {
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1)) throw new InvalidOptionError('limit', `${limit} is not a whole number of at least 1`);
}

/**
 * The walk's options. `everyMatch` says that every message examined counts against the
 * limit (no filter, nothing set aside): then the walk reads no further than the limit.
 */
function walkOptions(target: ParkedTarget, options: ParkedOperationOptions, everyMatch = isEmptyFilter(options.filter ?? {})): WalkOptions {
  const { filter: _f, limit, ...walk } = options;
  return { ...walk, queueType: target.queueType, ...(everyMatch && limit !== undefined ? { maxScanned: limit } : {}) };
}

/**
 * The read-ahead of a paced replay: ten minutes of messages at most, so that none waits
 * near the broker's `consumer_timeout` (30 minutes by default) before its turn.
 */
function pacedReadAhead(ratePerSecond: number, maxInFlight: number | undefined): number {
  return Math.max(1, Math.min(2 * (maxInFlight ?? 500), 65_535, Math.floor(ratePerSecond * 600)));
}

/**
 * Counts matches, stopping after `limit`. Returns a visitor that calls `act` on each
 * matching message and keeps the rest.
 */
function matcher(options: ParkedOperationOptions, act: (m: ParkedMessage, last: boolean) => Verdict | Promise<Verdict>) {
  checkLimit(options.limit);
  const filter = options.filter ?? {};
  const all = isEmptyFilter(filter);
  const state = { matched: 0, limitReached: false };
  const visit = (m: ParkedMessage): Verdict | Promise<Verdict> => {
    if (!all && !matchesFilter(m, filter)) return KEEP;
    state.matched += 1;
    const last = options.limit !== undefined && state.matched >= options.limit;
    if (last) state.limitReached = true;
    return act(m, last);
  };
  return { visit, state };
}

/** Options of {@link browseParked}. */
export interface BrowseOptions extends ParkedOperationOptions {
  /** Called with each matching message, in queue order. Return `'stop'` to end early. */
  onMessage: (message: ParkedMessage) => void | 'stop' | Promise<void | 'stop'>;
}

/**
 * Reads a parked queue without changing it: every message is put back in its order.
 * Matching messages are handed to `onMessage` in queue order.
 *
 * @example
 * await browseParked(model, topology.consumer('billing'), {
 *   filter: { errorClass: 'HttpError' },
 *   onMessage: (m) => console.log(m.messageId, m.errorMessage),
 * });
 */
export async function browseParked(model: amqp.ChannelModel, target: ParkedTarget, options: BrowseOptions): Promise<ParkedOperationResult> {
  const { visit, state } = matcher(options, async (m, last) => {
    const answer = await options.onMessage(m);
    return last || answer === 'stop' ? KEEP_AND_STOP : KEEP;
  });
  const { onMessage: _o, ...rest } = options;
  const result = await walkParked(model, target.parkedQueue, visit, walkOptions(target, rest));
  return { ...result, consumer: target.name, matched: state.matched, limitReached: state.limitReached };
}

/** {@link browseParked}, collecting the matching messages. */
export async function listParked(model: amqp.ChannelModel, target: ParkedTarget, options: ParkedOperationOptions = {}): Promise<ParkedOperationResult & { readonly messages: ParkedMessage[] }> {
  const messages: ParkedMessage[] = [];
  const result = await browseParked(model, target, {
    ...options,
    onMessage: (m) => {
      messages.push(m);
    },
  });
  return { ...result, messages };
}

/** Progress of a replay, reported after each message examined. */
export interface ReplayProgress {
  /** Messages in the parked queue when the replay began. */
  readonly total: number;
  readonly scanned: number;
  readonly matched: number;
  /** Copies published so far (the last batch may not be committed yet). */
  readonly published: number;
  readonly elapsedMs: number;
  /** The `limit`, when one is set. */
  readonly limit: number | undefined;
}

/** Options of {@link replayParked}. */
export interface ReplayOptions extends ParkedOperationOptions {
  /**
   * Publishes per second at most, paced evenly from the first one.
   * @default no limit (as fast as confirms allow)
   */
  ratePerSecond?: number;
  /** Examine and count, change nothing. @default false */
  dryRun?: boolean;
  /** Called after each message examined. */
  onProgress?: (progress: ReplayProgress) => void;
  /** Called with each message that matches (and would be replayed, on a dry run). */
  onMatch?: (message: ParkedMessage) => void;
  /** The clock, for `warren-replayed-at`. @default () => new Date() */
  now?: () => Date;
  /** Who asks for the replay, recorded on its trace span (see docs/tracing.md). @default not recorded */
  actor?: string;
  /**
   * Leave these messages parked, by {@link parkedIdentity}, even when they match: e.g. the
   * canaries of a {@link canaryReplay} that failed again.
   * @default none
   */
  except?: Iterable<string>;
  /**
   * Told of each copy once the walk ends (or is interrupted): committed, or returned by
   * the broker; for the publish metrics, pass `metrics.observePublish`.
   * @default none
   */
  onPublished?: PublishObserver;
}

/** What a replay did. */
export interface ReplayResult extends ParkedOperationResult {
  /** The work queue the copies went to. */
  readonly targetQueue: string;
  readonly dryRun: boolean;
  /** Copies confirmed and their originals acknowledged (0 on a dry run). */
  readonly replayed: number;
  readonly elapsedMs: number;
  /** Replayed messages per second, from the first publish to the last (intervals between publishes per second). */
  readonly ratePerSecond: number;
}


async function checkQueueExists(model: amqp.ChannelModel, queue: string): Promise<void> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  try {
    await ch.checkQueue(queue);
  } catch (error) {
    if (typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 404) throw new QueueNotFoundError(queue, { cause: error });
    throw error;
  } finally {
    await closeChannel(ch);
  }
}

/**
 * Replays parked messages to their consumer's own work queue, through the default
 * exchange (so no other queue bound to the routing key gets a copy), with the same
 * message id and properties, the attempt count reset and the replay recorded in
 * headers (see {@link replayHeaders}). Each copy and the acknowledgement of its original
 * are committed in one transaction: if the process dies or its connection closes
 * half-way, each message is either replayed or still parked, never both and never
 * neither, and running the replay again finishes the job. Messages that do not match
 * stay parked, in their order.
 *
 * @example
 * const result = await replayParked(model, topology.consumer('billing'), {
 *   filter: { errorClass: 'HttpError', since: new Date(Date.now() - 3_600_000) },
 *   ratePerSecond: 50,
 * });
 * console.log(`${result.replayed} replayed`);
 */
export async function replayParked(model: amqp.ChannelModel, target: ParkedTarget, options: ReplayOptions = {}): Promise<ReplayResult> {
  const rate = options.ratePerSecond;
  if (rate !== undefined && (!Number.isFinite(rate) || rate <= 0 || rate > 1_000_000)) {
    throw new InvalidOptionError('ratePerSecond', `${rate} is not a rate above 0 and at most 1000000 per second`);
  }
  const dryRun = options.dryRun ?? false;
  const now = options.now ?? (() => new Date());
  if (!dryRun) await checkQueueExists(model, target.queue);
  const trace = dryRun ? undefined : traceReplay(target.name, target.parkedQueue, options.actor);
  const started = Date.now();
  let firstPublish: number | undefined;
  let lastPublish = 0;
  let published = 0;
  let scanned = 0;
  let total = 0;
  const report = (matched: number) => {
    options.onProgress?.({ total, scanned, matched, published, elapsedMs: Date.now() - started, limit: options.limit });
  };
  const { visit: matchVisit, state } = matcher(options, async (m, last) => {
    options.onMatch?.(m);
    if (dryRun) return last ? KEEP_AND_STOP : KEEP;
    if (rate !== undefined) {
      firstPublish ??= Date.now();
      await sleepUnless(firstPublish + (published * 1000) / rate - Date.now(), options.signal);
      if (options.signal?.aborted) return KEEP_AND_STOP;
    }
    firstPublish ??= Date.now();
    lastPublish = Date.now();
    published += 1;
    const headers = replayHeaders(m, now());
    trace?.headers(headers);
    // The headers are this copy's own and hold none of the broker's; `mandatory` is set
    // here so that the walk publishes these properties as they are.
    const properties: amqp.Options.Publish = copyProperties(m.properties, headers, true);
    properties.mandatory = true;
    return {
      action: 'move',
      to: { exchange: '', routingKey: target.queue, content: m.content, properties },
      stop: last,
    };
  });
  const except = options.except === undefined ? undefined : new Set(options.except);
  const visit = async (m: ParkedMessage): Promise<Verdict> => {
    scanned = m.position;
    const verdict = except !== undefined && except.size > 0 && except.has(parkedIdentity(m)) ? KEEP : await matchVisit(m);
    report(state.matched);
    return verdict;
  };
  const rest = { ...options };
  delete rest.onProgress;
  delete rest.onMatch;
  delete rest.now;
  delete rest.ratePerSecond;
  delete rest.dryRun;
  delete rest.actor;
  delete rest.except;
  delete rest.onPublished;
  const onStart = options.onStart;
  const everyMatch = isEmptyFilter(options.filter ?? {}) && (except === undefined || except.size === 0);
  const paced = rate !== undefined && options.readAhead === undefined ? { readAhead: pacedReadAhead(rate, options.maxInFlight) } : {};
  let result: Awaited<ReturnType<typeof walkParked>>;
  try {
    result = await walkParked(model, target.parkedQueue, visit, {
      ...walkOptions(target, rest, everyMatch),
      ...paced,
      onStart: (n) => {
        total = n;
        onStart?.(n);
      },
    });
  } catch (error) {
    trace?.end({ error });
    if (error instanceof WalkInterruptedError) tellPublished(options.onPublished, target, error.moved, []);
    throw error;
  }
  trace?.end({ replayed: result.moved });
  tellPublished(options.onPublished, target, result.moved, result.failed);
  const elapsedMs = Date.now() - started;
  // n publishes paced at r per second span n - 1 intervals: count intervals, not messages.
  // The pace is that of the publishes: the last commit's wait for the disk is not part of it.
  const span = firstPublish === undefined ? 0 : lastPublish - firstPublish;
  const intervals = result.moved > 1 ? result.moved - 1 : result.moved;
  return {
    ...result,
    consumer: target.name,
    matched: state.matched,
    limitReached: state.limitReached,
    targetQueue: target.queue,
    dryRun,
    replayed: result.moved,
    elapsedMs,
    ratePerSecond: span > 0 ? (intervals * 1000) / span : 0,
  };
}

/** A replay's copies, for {@link ReplayOptions.onPublished}: the committed ones, then those the broker returned. */
function tellPublished(observer: PublishObserver | undefined, target: ParkedTarget, committed: number, failed: readonly MoveFailure[]): void {
  if (observer === undefined) return;
  try {
    for (let i = 0; i < committed; i++) observer(undefined, undefined, 'replay');
    for (const f of failed) observer(new UnroutableError('', target.queue, f.messageId, f.error), undefined, 'replay');
  } catch {
    // An observer's failure is not the replay's: it is done already.
  }
}

/** Options of {@link purgeParked}. */
export interface PurgeOptions extends ParkedOperationOptions {
  /**
   * Delete only these messages, by {@link parkedIdentity} (an identity given twice
   * deletes two messages that have it): the ones a person counted and agreed to delete.
   * Messages parked since, or with another identity, stay. The filter still applies.
   * @default every message that matches the filter
   */
  only?: Iterable<string>;
}

/** What a purge did. */
export interface PurgeResult extends ParkedOperationResult {
  /** Of the messages `only` named, how many were not found (replayed or deleted meanwhile). */
  readonly notFound: number;
}

/**
 * Deletes matching parked messages (acknowledges them); the others stay, in their order.
 * With a `limit`, deletes at most that many, from the head. With `only`, deletes exactly
 * the messages named, by identity, whatever was parked meanwhile.
 *
 * @example
 * // Count, ask, then delete what was counted (not "that many from the head").
 * const counted = await listParked(model, billing, { filter });
 * await purgeParked(model, billing, { filter, only: counted.messages.map(parkedIdentity) });
 */
export async function purgeParked(model: amqp.ChannelModel, target: ParkedTarget, options: PurgeOptions = {}): Promise<PurgeResult> {
  const { only, ...rest } = options;
  let wanted: Map<string, number> | undefined;
  let left = 0;
  if (only !== undefined) {
    wanted = new Map();
    for (const id of only) {
      wanted.set(id, (wanted.get(id) ?? 0) + 1);
      left += 1;
    }
  }
  const { visit: matchVisit, state } = matcher(rest, (_m, last) => ({ action: 'remove', stop: last }));
  const visit = (m: ParkedMessage): Verdict | Promise<Verdict> => {
    if (wanted === undefined) return matchVisit(m);
    const id = parkedIdentity(m);
    const n = wanted.get(id) ?? 0;
    if (n === 0) return KEEP;
    const verdict = matchVisit(m);
    if (!('then' in verdict) && verdict.action === 'remove') {
      wanted.set(id, n - 1);
      left -= 1;
      // Every named message found: the rest of the queue need not be read.
      if (left === 0) return { action: 'remove', stop: true };
    }
    return verdict;
  };
  const result = left === 0 && wanted !== undefined ? await emptyResult(model, target) : await walkParked(model, target.parkedQueue, visit, walkOptions(target, rest, wanted === undefined && isEmptyFilter(rest.filter ?? {})));
  return { ...result, consumer: target.name, matched: state.matched, limitReached: state.limitReached, notFound: left };
}

/** The result of a purge that had nothing to delete: the queue is not read. */
async function emptyResult(model: amqp.ChannelModel, target: ParkedTarget): Promise<WalkResult> {
  const ch = await model.createChannel();
  ch.on('error', () => undefined);
  try {
    const ok = await ch.checkQueue(target.parkedQueue);
    return { queue: target.parkedQueue, total: ok.messageCount, scanned: 0, kept: 0, removed: 0, moved: 0, failed: [], notExamined: ok.messageCount, missed: 0, stopReason: 'stopped', rewritten: 0, readers: ok.consumerCount };
  } catch (error) {
    if (typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 404) throw new QueueNotFoundError(target.parkedQueue, { cause: error });
    throw error;
  } finally {
    await closeChannel(ch);
  }
}

/** One exported parked message: a JSON line of {@link exportParked}. */
export interface ExportRecord {
  readonly position: number;
  readonly messageId: string | null;
  readonly consumer: string | null;
  readonly exchange: string | null;
  readonly routingKey: string;
  readonly failure: {
    readonly errorClass: string | null;
    readonly message: string | null;
    readonly stack: string | null;
    readonly attempts: number | null;
    readonly reason: string | null;
    readonly firstFailedAt: string | null;
    readonly lastFailedAt: string | null;
    readonly parkedAt: string | null;
    readonly fingerprint: string;
  };
  readonly replays: number;
  readonly properties: Readonly<Record<string, unknown>>;
  readonly headers: Readonly<Record<string, unknown>>;
  /** The body: parsed JSON when it is JSON, else a string when it is UTF-8 text, else `null` (see `bodyBase64`). */
  readonly body: unknown;
  readonly bodyEncoding: 'json' | 'text' | 'base64';
  readonly bodyBase64?: string;
}

/** The export record of one message. Pure. */
export function exportRecord(m: ParkedMessage): ExportRecord {
  const body = decodeBody(m.content);
  const { headers: _h, ...props } = m.properties;
  return {
    position: m.position,
    messageId: m.messageId ?? null,
    consumer: m.consumer ?? null,
    exchange: m.exchange ?? null,
    routingKey: m.routingKey,
    failure: {
      errorClass: m.errorClass ?? null,
      message: m.errorMessage ?? null,
      stack: m.errorStack ?? null,
      attempts: m.attempts ?? null,
      reason: m.reason ?? null,
      firstFailedAt: m.firstFailedAt?.toISOString() ?? null,
      lastFailedAt: m.lastFailedAt?.toISOString() ?? null,
      parkedAt: m.parkedAt?.toISOString() ?? null,
      fingerprint: m.fingerprint,
    },
    replays: m.replays,
    properties: plainValue(Object.fromEntries(Object.entries(props).filter(([, v]) => v !== undefined && v !== null))) as Record<string, unknown>,
    headers: plainValue(m.headers) as Record<string, unknown>,
    ...(body.kind === 'json'
      ? { body: body.value, bodyEncoding: 'json' as const }
      : body.kind === 'text'
        ? { body: body.text, bodyEncoding: 'text' as const }
        : { body: null, bodyEncoding: 'base64' as const, bodyBase64: body.base64 }),
  };
}

/** Options of {@link exportParked}. */
export interface ExportOptions extends ParkedOperationOptions {
  /** Receives one JSON line (with its newline) per matching message, in queue order. */
  write: (line: string) => void | Promise<void>;
}

/** Writes matching parked messages as JSON lines ({@link ExportRecord}); the queue is left as it was. */
export async function exportParked(model: amqp.ChannelModel, target: ParkedTarget, options: ExportOptions): Promise<ParkedOperationResult> {
  const { write, ...rest } = options;
  return browseParked(model, target, {
    ...rest,
    onMessage: async (m) => {
      await write(`${JSON.stringify(exportRecord(m))}\n`);
    },
  });
}
