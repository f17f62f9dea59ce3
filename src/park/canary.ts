import type * as amqp from 'amqplib';
import { inQueueDelay } from '../retry/ladder.js';
import { InvalidOptionError } from '../errors.js';
import type { ConsumerTopology } from '../topology/declaration.js';
import { matchesFilter, type ParkedFilter } from './filter.js';
import { parkedIdentity } from './identity.js';
import type { ParkedMessage } from './message.js';
import { browseParked, replayParked, type ParkedTarget, type ReplayOptions, type ReplayResult } from './operations.js';
import { sleepUnless } from '../sleeper.js';

/**
 * What a canary replay reads to prove that a replayed message succeeded: a store's
 * idempotency markers (`sqliteStore()` and `postgresStore()` have this method).
 */
export interface ProcessedLookup {
  /** Which of `messageIds` have a marker for `consumer`. */
  processed(consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>>;
}

/** The consumer a canary replay works on: its queues, and its retry ladder when known (for the default window). */
export type CanaryTarget = ParkedTarget & Partial<Pick<ConsumerTopology, 'delaysMs' | 'maxAttempts' | 'inQueue'>>;

/** Options of {@link canaryReplay}. */
export interface CanaryOptions extends Pick<ReplayOptions, 'filter' | 'actor' | 'maxHeld' | 'maxInFlight' | 'maxCommitDelayMs' | 'signal' | 'now'> {
  /**
   * How many matching messages to replay first, from the head of the parked queue.
   * @default 3
   */
  count?: number;
  /**
   * How long to watch the canaries after the replay. A canary not parked again within it
   * counts as succeeded, so make it longer than the consumer's retry ladder (a message
   * that fails with retries left is parked only after its last tier).
   * @default the ladder's total delay (from `delaysMs`, or `inQueue`, and `maxAttempts`) plus 10000; 30000 when the ladder is not known
   */
  windowMs?: number;
  /**
   * Time between two looks at the parked queue (and at `processed`) while watching.
   * Each look reads the whole parked queue and puts it back, as `listParked` does.
   * @default 1000
   */
  pollMs?: number;
  /**
   * The consumer's idempotency store: a canary with a marker for the consumer is proven
   * succeeded at once, without waiting for the end of the window.
   * @default none: a canary succeeds when the window ends and it is not parked again
   */
  processed?: ProcessedLookup;
  /** Called when a canary's outcome is known. */
  onOutcome?: (canary: CanaryMessage) => void;
}

/**
 * How a canary's outcome was decided.
 * - `parked-again`: its message id came back to the parked queue: it failed again.
 * - `processed`: the idempotency store has its marker: it succeeded.
 * - `window`: the window ended and it was not parked again: taken as succeeded.
 * - `no-message-id`: it has no message id, so it cannot be told from others: not watched.
 * - `not-examined`: the window ended, but the parked queue held more than `maxHeld`
 *   messages, so its tail (where a canary that failed again lands) was never read, or
 *   the last look found another consumer holding parked messages (the canary may be
 *   among them): unknown, not taken as succeeded.
 */
export type CanaryEvidence = 'parked-again' | 'processed' | 'window' | 'no-message-id' | 'not-examined';

/** One replayed canary and what became of it. */
export interface CanaryMessage {
  readonly messageId: string | undefined;
  /** Its {@link parkedIdentity} before the replay. */
  readonly identity: string;
  readonly outcome: 'succeeded' | 'failed' | 'unknown';
  readonly evidence: CanaryEvidence;
  /** When it failed again: the error it was parked with this time. */
  readonly error?: string;
  /** When it failed again: its identity in the parked queue now (see `continueCanary`). */
  readonly parkedIdentity?: string;
  /** From the end of the replay to the outcome. */
  readonly decidedAfterMs: number;
}

/** What a canary replay did and saw. */
export interface CanaryResult {
  readonly consumer: string;
  readonly filter: ParkedFilter;
  /** The replay of the canaries. */
  readonly replay: ReplayResult;
  /** One per replayed canary, in queue order. */
  readonly canaries: readonly CanaryMessage[];
  readonly succeeded: number;
  readonly failed: number;
  /**
   * `succeeded` when every canary succeeded, `failed` when any failed again, `empty` when
   * nothing matched, `unknown` when no canary could be watched (none had a message id).
   */
  readonly verdict: 'succeeded' | 'failed' | 'empty' | 'unknown';
  /** Messages still parked that match the filter, not counting canaries that failed again: what `continueCanary` would replay. */
  readonly remaining: number;
  readonly windowMs: number;
  /** From the start of the replay to the verdict. */
  readonly elapsedMs: number;
}

const DEFAULTS = { count: 3, pollMs: 1000, slackMs: 10_000, unknownLadderMs: 30_000 } as const;

function wholeNumber(value: number | undefined, fallback: number, option: string, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(option, `${v} is not a whole number from ${min} to ${max}`);
  return v;
}

/** The longest a message spends in the retry ladder before it is parked: attempt n waits in tier min(n, tiers) - 1. Pure. */
export function ladderMs(delaysMs: readonly number[], maxAttempts: number): number {
  let total = 0;
  for (let attempt = 1; attempt < maxAttempts && delaysMs.length > 0; attempt++) total += delaysMs[Math.min(attempt, delaysMs.length) - 1] ?? 0;
  return total;
}

/** The same for a consumer that retries inside its queue: failure n waits `min` × n, at most `max`. Pure. */
export function inQueueLadderMs(retry: { readonly minMs: number; readonly maxMs: number }, maxAttempts: number): number {
  let total = 0;
  for (let attempt = 1; attempt < maxAttempts; attempt++) total += inQueueDelay(attempt, retry);
  return total;
}

function defaultWindow(target: CanaryTarget): number {
  if (target.inQueue !== undefined && target.maxAttempts !== undefined) return inQueueLadderMs(target.inQueue, target.maxAttempts) + DEFAULTS.slackMs;
  if (target.delaysMs === undefined || target.maxAttempts === undefined) return DEFAULTS.unknownLadderMs;
  return ladderMs(target.delaysMs, target.maxAttempts) + DEFAULTS.slackMs;
}


interface Watched {
  readonly messageId: string;
  readonly identity: string;
  readonly replays: number;
  decided?: CanaryMessage;
}

/**
 * Replays the first `count` parked messages that match `filter` (typically one failure
 * group: `{ fingerprint }`) to the consumer's own work queue, as {@link replayParked}
 * does, then watches what becomes of them for `windowMs`: a canary whose message id is
 * parked again (with one replay more than it had) failed again; one that is not parked
 * again within the window succeeded (at once, when `processed` shows its idempotency
 * marker). The rest of the group stays parked: replay it with {@link continueCanary},
 * or leave it.
 *
 * Watching reads the parked queue as `listParked` does (each message put back in its
 * place, decided by identity, never consumed), so it can run while consumers park more.
 * Do not run another operation on the same parked queue while a canary is watched.
 *
 * @example
 * const billing = topology.consumer('billing');
 * const canary = await canaryReplay(model, billing, { filter: { fingerprint }, count: 3, processed: store });
 * if (canary.verdict === 'succeeded') await continueCanary(model, billing, canary, { ratePerSecond: 50 });
 * else console.log(canary.canaries.filter((c) => c.outcome === 'failed').map((c) => c.error));
 */
export async function canaryReplay(model: amqp.ChannelModel, target: CanaryTarget, options: CanaryOptions = {}): Promise<CanaryResult> {
  const count = wholeNumber(options.count, DEFAULTS.count, 'count', 1, 100_000);
  const windowMs = wholeNumber(options.windowMs, defaultWindow(target), 'windowMs', 0, 86_400_000);
  const pollMs = wholeNumber(options.pollMs, DEFAULTS.pollMs, 'pollMs', 10, 600_000);
  if (options.processed !== undefined && typeof options.processed.processed !== 'function') {
    throw new InvalidOptionError('processed', 'expected a store with `processed(consumer, messageIds)` (sqliteStore() or postgresStore())');
  }
  const filter = options.filter ?? {};
  const started = Date.now();
  const { onOutcome, processed, count: _c, windowMs: _w, pollMs: _p, ...replayOptions } = options;
  // Messages parked before the replay are not a canary coming back, whatever their id.
  const before = new Set<string>();
  await browseParked(model, target, {
    ...(options.maxHeld !== undefined ? { maxHeld: options.maxHeld } : {}),
    onMessage: (m) => {
      if (m.messageId !== undefined) before.add(parkedIdentity(m));
    },
  });
  const matched: ParkedMessage[] = [];
  const replay = await replayParked(model, target, { ...replayOptions, filter, limit: count, onMatch: (m) => void matched.push(m) });
  // A move the broker returned stayed parked: it is no canary.
  const failedPositions = new Set(replay.failed.map((f) => f.position));
  const moved = matched.filter((m) => !failedPositions.has(m.position)).slice(0, replay.moved);
  const replayedAt = Date.now();
  const decide = (c: CanaryMessage): CanaryMessage => {
    onOutcome?.(c);
    return c;
  };

  const untracked: CanaryMessage[] = [];
  const watched: Watched[] = [];
  for (const m of moved) {
    if (m.messageId === undefined) untracked.push(decide({ messageId: undefined, identity: parkedIdentity(m), outcome: 'unknown', evidence: 'no-message-id', decidedAfterMs: 0 }));
    else watched.push({ messageId: m.messageId, identity: parkedIdentity(m), replays: m.replays });
  }
  const pending = () => watched.filter((w) => w.decided === undefined);
  let remaining = 0;
  let cutShort = false;
  /** The last look could not see every parked message. */
  let unseen = false;

  /** One look at the parked queue: canaries parked again fail; counts what the rest would replay. */
  const look = async (): Promise<void> => {
    const byId = new Map<string, Watched[]>();
    for (const w of pending()) byId.set(w.messageId, [...(byId.get(w.messageId) ?? []), w]);
    const failedIdentities = new Set(watched.filter((w) => w.decided?.parkedIdentity !== undefined).map((w) => w.decided?.parkedIdentity as string));
    let rest = 0;
    const looked = await browseParked(model, target, {
      ...(options.maxHeld !== undefined ? { maxHeld: options.maxHeld } : {}),
      onMessage: (m) => {
        const identity = parkedIdentity(m);
        const candidates = m.messageId === undefined ? undefined : byId.get(m.messageId);
        const w = candidates?.find((c) => m.replays > c.replays && !before.has(identity));
        if (w !== undefined) {
          w.decided = decide({
            messageId: w.messageId,
            identity: w.identity,
            outcome: 'failed',
            evidence: 'parked-again',
            ...(m.errorMessage !== undefined ? { error: `${m.errorClass ?? 'Error'}: ${m.errorMessage}` } : {}),
            parkedIdentity: identity,
            decidedAfterMs: Date.now() - replayedAt,
          });
          candidates?.splice(candidates.indexOf(w), 1);
          return;
        }
        if (!failedIdentities.has(identity) && matchesFilter(m, filter)) rest += 1;
      },
    });
    remaining = rest;
    // A canary that failed again is parked at the tail: a browse cut short never saw it.
    if (looked.stopReason === 'max-held') cutShort = true;
    // Nor did one that ran while another consumer held messages: the canary may be among them.
    unseen = looked.readers > 0 || looked.missed > 0;
    if (processed !== undefined) {
      const open = pending();
      if (open.length === 0) return;
      const done = await processed.processed(target.name, open.map((w) => w.messageId));
      for (const w of open) {
        if (done.has(w.messageId)) w.decided = decide({ messageId: w.messageId, identity: w.identity, outcome: 'succeeded', evidence: 'processed', decidedAfterMs: Date.now() - replayedAt });
      }
    }
  };

  if (watched.length > 0) {
    const deadline = replayedAt + windowMs;
    for (;;) {
      await look();
      if (pending().length === 0 || options.signal?.aborted) break;
      const left = deadline - Date.now();
      if (left <= 0) break;
      await sleepUnless(Math.min(pollMs, left), options.signal);
    }
    for (const w of pending()) {
      // Aborted before the window ended, or the tail never read: no evidence either way.
      const ended = Date.now() >= deadline;
      const blind = cutShort || unseen;
      const outcome = ended && !blind ? 'succeeded' : 'unknown';
      w.decided = decide({ messageId: w.messageId, identity: w.identity, outcome, evidence: blind ? 'not-examined' : 'window', decidedAfterMs: Date.now() - replayedAt });
    }
  } else {
    remaining = await countMatching(model, target, filter, options.maxHeld);
  }

  const canaries = [...watched.map((w) => w.decided as CanaryMessage), ...untracked].sort((a, b) => order(moved, a) - order(moved, b));
  const succeeded = canaries.filter((c) => c.outcome === 'succeeded').length;
  const failed = canaries.filter((c) => c.outcome === 'failed').length;
  const verdict = canaries.length === 0 ? 'empty' : failed > 0 ? 'failed' : succeeded === 0 ? 'unknown' : canaries.some((c) => c.outcome === 'unknown') ? 'unknown' : 'succeeded';
  return { consumer: target.name, filter, replay, canaries, succeeded, failed, verdict, remaining, windowMs, elapsedMs: Date.now() - started };
}

function order(moved: readonly ParkedMessage[], c: CanaryMessage): number {
  return moved.findIndex((m) => parkedIdentity(m) === c.identity);
}

async function countMatching(model: amqp.ChannelModel, target: ParkedTarget, filter: ParkedFilter, maxHeld: number | undefined): Promise<number> {
  let n = 0;
  await browseParked(model, target, { ...(maxHeld !== undefined ? { maxHeld } : {}), filter, onMessage: () => void (n += 1) });
  return n;
}

/**
 * Replays the rest of a canary's group: every parked message that matches its filter,
 * except the canaries that failed again (replay those by hand once you know why), with
 * the options of {@link replayParked} (a `ratePerSecond`, say). Not calling it leaves the
 * rest parked.
 *
 * @example
 * const rest = await continueCanary(model, billing, canary, { ratePerSecond: 100, actor: 'alice' });
 * console.log(`${rest.replayed} more replayed`);
 */
export function continueCanary(model: amqp.ChannelModel, target: ParkedTarget, canary: CanaryResult, options: Omit<ReplayOptions, 'filter'> = {}): Promise<ReplayResult> {
  if (canary.consumer !== target.name) throw new InvalidOptionError('target', `the canary ran on consumer '${canary.consumer}', not '${target.name}'`);
  const except = canary.canaries.flatMap((c) => (c.parkedIdentity === undefined ? [] : [c.parkedIdentity]));
  return replayParked(model, target, { ...options, filter: canary.filter, except: [...except, ...(options.except ?? [])] });
}
