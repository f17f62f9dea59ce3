/**
 * What the pieces of one consumer share: its declaration, options, logger and stats,
 * the blip memory, and the contract's decision for a delivery with its notes logged.
 */
import type * as amqp from 'amqplib';
import type { Logger } from '../logger.js';
import type { BrokerConnection } from '../connection/index.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import { describeFailure } from '../park/failure.js';
import type { BlipMemory } from './blips.js';
import { decide, type Decision, type Happening } from './contract.js';
import { idOf, type Delivery } from './delivery.js';
import type { ConsumerOptions, ConsumerStats, MessageContext, Outcome } from './types.js';

/** One consumer's settings and state, as its processing and its settling read them. */
export interface ConsumerParts<T, Tx> {
  readonly name: string;
  readonly declaration: ConsumerTopology;
  readonly topology: Topology;
  readonly connection: BrokerConnection;
  readonly publisher: Publisher;
  readonly options: ConsumerOptions<T, Tx>;
  readonly logger: Logger;
  readonly stats: ConsumerStats;
  readonly blips: BlipMemory;
  readonly timeoutMs: number;
  readonly storeOutageHoldMs: number;
  /** The consumer's retry queues, for reading attempts. */
  readonly retryQueueSet: ReadonlySet<string>;
  /** True while `ch` is the consumer's channel (a delivery on another one is the broker's again). */
  current(ch: amqp.Channel): boolean;
  /** True once close() has begun. */
  stopping(): boolean;
  /** Tells the consumer's `outcome` listeners (a listener's throw comes back here). */
  emit(outcome: Outcome): void;
}

/**
 * What `decide` passes to the retry table's tenant functions for a failed delivery. Its
 * signal (already aborted: no handler runs now) is made only if read: AbortSignal.abort()
 * builds a DOMException, a stack trace on every delivery.
 */
class DecisionContext implements MessageContext<undefined> {
  readonly tx = undefined;

  constructor(
    readonly messageId: string | undefined,
    readonly routingKey: string,
    readonly headers: Readonly<Record<string, unknown>>,
    readonly attempt: number,
    readonly raw: amqp.ConsumeMessage,
  ) {}

  get signal(): AbortSignal {
    return AbortSignal.abort();
  }
}

/** The contract's decision for this delivery (see {@link decide}), its notes logged. */
export function decideFor<T, Tx>(parts: ConsumerParts<T, Tx>, d: Delivery, headers: Record<string, unknown>, failed: number, happened: Happening, payload?: T): Decision {
  const messageId = idOf(d);
  // Only a failure's decision reads the context (the retry table's tenant functions).
  const context = happened.kind === 'threw' || happened.kind === 'timed-out' ? new DecisionContext(messageId, d.msg.fields.routingKey, headers, failed + 1, d.msg) : undefined;
  const decision = decide({ happened, attempts: failed, headers, consumer: parts.declaration, classify: parts.options.classify, retryTable: parts.options.retryTable, payload, context });
  if (decision.notes !== undefined) for (const note of decision.notes) parts.logger.error(note.message, { consumer: parts.name, messageId, ...(note.error === undefined ? {} : { error: errorText(note.error) }) });
  return decision;
}

/** Text for a log line about any thrown value; never throws. */
export function errorText(error: unknown): string {
  return describeFailure(error).message;
}

/** What `work` resolves to, or 'timeout' after `ms` (none below 0), whichever is first. `work` must not reject. */
export function orTimeout<T>(work: Promise<T>, ms: number): Promise<T | 'timeout'> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve('timeout'), Math.max(0, ms));
    void work.then((value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

/** 'done' when `work` settles (either way), or 'timeout' after `ms`, whichever is first. */
export function within(work: Promise<unknown>, ms: number): Promise<'done' | 'timeout'> {
  const done = (): 'done' => 'done';
  return orTimeout(work.then(done, done), ms);
}
