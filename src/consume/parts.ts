/**
 * What the pieces of one consumer share: what its path to a decision reads (declaration,
 * options, logger), its stats, connection and publisher, and the blip memory.
 */
import type * as amqp from 'amqplib';
import type { BrokerConnection } from '../connection/index.js';
import type { Topology } from '../topology/declaration.js';
import type { Publisher } from '../publish/publisher.js';
import type { BlipMemory } from './blips.js';
import type { Decision } from './contract.js';
import type { Delivery } from './delivery.js';
import type { PathParts } from './path.js';
import type { ConsumerStats, Outcome } from './types.js';

// The decision and the log text are the path's, shared with warren/testing.
export { decideFor, errorText } from './path.js';

/** One consumer's settings and state, as its processing and its settling read them. */
export interface ConsumerParts<T, Tx> extends PathParts<T, Tx> {
  readonly topology: Topology;
  readonly connection: BrokerConnection;
  readonly publisher: Publisher;
  readonly stats: ConsumerStats;
  readonly blips: BlipMemory;
  readonly storeOutageHoldMs: number;
  /** True while `ch` is the consumer's channel (a delivery on another one is the broker's again). */
  current(ch: amqp.Channel): boolean;
  /** True once close() has begun. */
  stopping(): boolean;
  /** Tells the consumer's `outcome` listeners (a listener's throw comes back here). */
  emit(outcome: Outcome): void;
  /** A delivery's decision, before it is carried out (the breaker learns from it). */
  decided(d: Delivery, decision: Decision): void;
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
