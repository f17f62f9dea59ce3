/**
 * Carries out a {@link Decision} for a delivery: the ack, a retry or park move
 * (publish-with-confirm first, ack second), a retry-table row, a put-back, a move to the
 * back of the queue; counts the outcome. The last resort for a failure path that threw.
 */
import { WarrenError } from '../errors.js';
import { backoffDelay } from '../connection/index.js';
import { describeFailure } from '../park/failure.js';
import { faultEvent, publishFaultEvent } from '../park/fault-event.js';
import { readAttempts, readInQueueAttempts } from '../retry/attempts.js';
import type { RetryTablePolicy } from '../retry-table/wait.js';
import { traced } from '../trace/index.js';
import type { Decision } from './contract.js';
import { copyHeaders } from './copy-headers.js';
import { idOf, type Delivery } from './delivery.js';
import { copyProperties, moveCopy } from './move.js';
import type { ConsumerParts } from './parts.js';
import { decideFor, errorText, logParked, logRetried, logWaiting, waitingRow } from './path.js';
import type { Outcome } from './types.js';

/** Settles one consumer's deliveries as their decisions say. */
export class Settler<T, Tx> {
  constructor(private readonly parts: ConsumerParts<T, Tx>) {}

  /**
   * Carries out a decision: the ack, the move, the retry-table row or the put-back.
   * Returns the promise of what goes on after it returns, or undefined when it is done
   * (an ack: no promise made for the most common outcome).
   */
  apply(d: Delivery, headers: Record<string, unknown>, decision: Decision): Promise<void> | undefined {
    switch (decision.kind) {
      case 'ack':
        d.done = 'ack';
        d.ackAs = decision.duplicate ? 'duplicate' : 'acked';
        if (d.line !== undefined && !this.parts.stopping() && !traced(d.trace)) {
          // Written with the others that succeeded in this turn (see AckLine); counted then.
          d.doneAt = performance.now();
          d.line.ackSoon(d);
        } else if (this.ack(d)) {
          this.count({ kind: decision.duplicate ? 'duplicate' : 'acked', messageId: idOf(d), durationMs: performance.now() - d.started }, d);
        }
        return undefined;
      case 'retry':
        return this.retry(d, headers, decision);
      case 'park':
        return this.park(d, headers, decision);
      case 'wait':
        return this.wait(d, headers, decision);
      case 'move-back':
        return this.moveBack(d, headers, decision);
      case 'requeue':
        // A copy would start the broker's delivery count again, the attempts of a consumer
        // that retries inside its queue: that one is given back with a nack (4.3 counts none).
        if (decision.blip && this.parts.declaration.inQueue !== undefined) {
          this.requeue(d);
          return undefined;
        }
        if (decision.blip) return this.putBack(d);
        this.requeue(d, false);
        return undefined;
      case 'run':
        return undefined;
    }
  }

  /** Acks `d` and keeps the ack in doubt until the broker is seen to read it. False when its channel is gone. */
  ack(d: Delivery): boolean {
    try {
      d.ch.ack(d.msg);
      d.settled = true;
      this.parts.blips.ackWritten(d.ch, d.msg);
      return true;
    } catch {
      // The channel closed: the broker will redeliver, and idempotency makes that harmless.
      return false;
    }
  }

  /** A coalesced ack of `d` was written (see AckLine): kept in doubt until proven, and counted. */
  readonly acked = (d: Delivery): void => {
    this.parts.blips.ackWritten(d.ch, d.msg);
    this.count({ kind: d.ackAs, messageId: idOf(d), durationMs: d.doneAt - d.started }, d);
  };

  /**
   * Gives the delivery back to its queue. `asBlip`: its redelivery is no death (a message
   * never started): a nack with requeue. Otherwise (a move that kept failing, a failure
   * path that threw) the crash-loop guard must count it, so a message that can never be
   * moved is not run again without end: a reject with requeue, which every broker counts
   * in a quorum queue's `x-delivery-count` and delivery limit (RabbitMQ 4.3 does not count
   * a nack; docs/brokers.md).
   */
  requeue(d: Delivery, asBlip = true): void {
    try {
      if (asBlip) d.ch.nack(d.msg, false, true);
      else d.ch.reject(d.msg, true);
      d.settled = true;
      if (asBlip) this.parts.blips.remember(d.msg);
      this.count({ kind: 'requeued', messageId: idOf(d) }, d);
    } catch {
      // The channel is gone; the broker requeues the message itself.
    }
  }

  /**
   * A retry inside the queue (`retry.inQueue`): a reject with requeue, which raises the
   * broker's delivery count and has the broker set the message aside for `min` × that
   * count (at most `max`); when the attempt is not to be counted (a database outage), a
   * nack with requeue, which RabbitMQ 4.3 neither counts nor delays (its redelivery is a
   * blip here). No copy: the message keeps its place in the broker's books. False when the
   * channel is gone (the broker has the message back, and counts it as a delivery).
   */
  private giveBackToWait(d: Delivery, counted: boolean): boolean {
    // Not on a channel the broker took back: a redelivery held behind this run then runs
    // again (never acked as done: nothing of the message was kept elsewhere).
    if (!this.parts.current(d.ch)) return false;
    try {
      if (counted) d.ch.reject(d.msg, true);
      else d.ch.nack(d.msg, false, true);
      d.settled = true;
      if (!counted) this.parts.blips.remember(d.msg);
      return true;
    } catch {
      return false;
    }
  }

  /** Counts an outcome, ends the delivery's span with it and tells the listeners (a listener's throw is logged). */
  count(outcome: Outcome, d?: Delivery): void {
    const { stats } = this.parts;
    if (d !== undefined && d.started > 0 && outcome.durationMs === undefined) (outcome as { durationMs?: number }).durationMs = performance.now() - d.started;
    d?.trace?.end(outcome);
    switch (outcome.kind) {
      case 'acked': stats.acked++; break;
      case 'duplicate': stats.duplicate++; break;
      case 'retried': stats.retried++; break;
      case 'parked': stats.parked++; break;
      case 'waiting': stats.waiting++; break;
      case 'requeued': stats.requeued++; break;
      case 'redelivery-moved': stats.redeliveryMoved++; break;
    }
    if (outcome.kind === 'parked' && d !== undefined) this.announce(d, outcome);
    try {
      this.parts.emit(outcome);
    } catch (error) {
      // A listener's failure must not become the message's failure: it is already settled.
      this.parts.logger.error('an outcome listener threw', { consumer: this.parts.name, outcome: outcome.kind, error: errorText(error) });
    }
  }

  /** Publishes the fault event of a parked message, when the topology asks for them; its failure is logged and counted, never the message's. */
  private announce(d: Delivery, outcome: Extract<Outcome, { kind: 'parked' }>): void {
    const { parts } = this;
    const faults = parts.topology.faults;
    if (faults === undefined) return;
    const report = { logger: parts.logger, failed: (): void => void parts.stats.faultEventsFailed++ };
    try {
      const event = faultEvent(faults, { stage: 'parked', consumer: parts.name, messageId: outcome.messageId, reason: outcome.reason, failure: describeFailure(outcome.error), parkedAt: new Date(), attempts: outcome.attempts, body: d.msg.content });
      void publishFaultEvent({ send: (m) => parts.publisher.send(m, 'publish') }, faults, event, report);
    } catch (error) {
      report.failed();
      parts.logger.error('could not make a fault event; the message is parked all the same', { consumer: parts.name, messageId: outcome.messageId, error: errorText(error) });
    }
  }

  private async retry(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'retry' }>): Promise<void> {
    const { parts } = this;
    const messageId = idOf(d);
    // Described once, for the copy's headers and the log line.
    const failure = describeFailure(decision.error);
    if (decision.inQueue === true) {
      if (this.giveBackToWait(d, decision.counted)) {
        logRetried(parts, messageId, decision, failure);
        this.count({ kind: 'retried', messageId, attempts: decision.attempts, queue: decision.queue, error: decision.error }, d);
      }
      return;
    }
    if (await moveCopy(this, parts, d, decision.queue, copyHeaders(decision, headers, d.msg.fields, parts.name, new Date(), failure), decision)) {
      logRetried(parts, messageId, decision, failure);
      this.count({ kind: 'retried', messageId, attempts: decision.attempts, queue: decision.queue, error: decision.error }, d);
    }
  }

  private async park(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'park' }>): Promise<void> {
    const { parts } = this;
    const messageId = idOf(d);
    const { reason, attempts } = decision;
    const failure = describeFailure(decision.error);
    if (await moveCopy(this, parts, d, parts.declaration.parkedQueue, copyHeaders(decision, headers, d.msg.fields, parts.name, new Date(), failure), decision)) {
      logParked(parts, messageId, decision, failure);
      this.count({ kind: 'parked', messageId, reason, attempts, error: decision.error }, d);
    }
  }

  private async moveBack(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'move-back' }>): Promise<void> {
    const { parts } = this;
    if (await moveCopy(this, parts, d, parts.declaration.queue, copyHeaders(decision, headers, d.msg.fields, parts.name, new Date()), decision)) {
      this.count({ kind: 'redelivery-moved', messageId: idOf(d), redeliveries: decision.redeliveries }, d);
    }
  }

  /**
   * Stores the message as a retry-table row and acks it once the row is committed.
   * While the database is unreachable the message is held unacked and the insert tried
   * again; a row that cannot be stored is decided again (`not-stored`).
   */
  private async wait(d: Delivery, headers: Record<string, unknown>, decision: Extract<Decision, { kind: 'wait' }>): Promise<void> {
    const { parts } = this;
    const policy = parts.options.retryTable as RetryTablePolicy<T>;
    const messageId = idOf(d);
    // The path gives every message that is to wait an id (its own, found or made up).
    if (messageId === undefined) throw new Error('a message without an id was to wait in the retry table');
    const recordedInfo = describeFailure(decision.error);
    const row = waitingRow(parts, d, messageId, d.trace?.headers(headers) ?? headers, decision, recordedInfo, new Date());
    const holdUntil = Date.now() + parts.storeOutageHoldMs;
    let stored: { id: string; paused: boolean };
    for (let attempt = 1; ; attempt++) {
      if (!parts.current(d.ch)) return; // its channel is gone: the broker redelivers it
      try {
        stored = await policy.table.insert(row);
        break;
      } catch (e) {
        const outage = e instanceof WarrenError && e.code === 'STORE_UNAVAILABLE';
        if (outage && Date.now() < holdUntil && !parts.stopping()) {
          parts.logger.warn('database unavailable; holding the message and trying the retry table again', { consumer: parts.name, messageId, attempt, error: e.message });
          await new Promise((r) => setTimeout(r, Math.min(backoffDelay(attempt, 100, 5000), Math.max(1, holdUntil - Date.now()))));
          continue;
        }
        if (outage) parts.logger.error('database still unavailable; the message goes round the first retry tier (no attempt counted) and will ask again', { consumer: parts.name, messageId, error: e.message });
        else parts.logger.error('could not store the message in the retry table; the retry ladder takes it', { consumer: parts.name, messageId, error: errorText(e) });
        await this.apply(d, headers, decideFor(parts, d, headers, decision.attempts, { kind: 'not-stored', error: decision.cause, outage }));
        return;
      }
    }
    if (!this.ack(d)) return; // redelivered; the row is updated, not doubled, next time
    logWaiting(parts, messageId, decision, recordedInfo, stored);
    this.count({ kind: 'waiting', messageId, dependency: decision.dependency, tenant: decision.tenant, row: stored.id, paused: stored.paused, nextAttemptAt: decision.nextAttemptAt, error: decision.error }, d);
  }

  /**
   * Puts a delivery that never started back in its queue. A nack would mark it
   * redelivered, which the crash-loop guard counts as a death; a confirmed copy keeps
   * its counts as they were. If the copy cannot be made, the nack is the fallback.
   */
  private async putBack(d: Delivery): Promise<void> {
    const { parts } = this;
    const messageId = idOf(d);
    try {
      if (!parts.current(d.ch)) return; // its channel is gone: the broker has it back already
      await parts.publisher.send({ exchange: '', routingKey: parts.declaration.queue, content: d.msg.content, properties: copyProperties(d.msg, d.msg.properties.headers ?? {}) }, 'put-back');
      if (this.ack(d)) this.count({ kind: 'requeued', messageId }, d);
    } catch {
      this.requeue(d);
    }
  }

  /**
   * The last resort, for a delivery whose failure path itself threw (a bug, or user
   * code warren did not expect to throw): park it with minimal metadata. If even that
   * cannot be done, nack it with requeue, so the broker has it back at once rather than
   * after its consumer timeout. Never throws.
   */
  async lastResort(d: Delivery, thrown: unknown): Promise<void> {
    const { parts } = this;
    const messageId = idOf(d);
    try {
      if (d.settled) {
        parts.logger.error('a failure after the delivery was settled', { consumer: parts.name, messageId, error: errorText(thrown) });
        return;
      }
      if (!parts.current(d.ch)) {
        parts.logger.error('the failure path threw and the channel is gone; the broker redelivers the message', { consumer: parts.name, messageId, error: errorText(thrown) });
        return;
      }
      parts.logger.error('the failure path threw; parking the message with minimal metadata', { consumer: parts.name, messageId, error: errorText(thrown) });
      const headers = (d.msg.properties.headers ?? {}) as Record<string, unknown>;
      const failed = (parts.declaration.inQueue !== undefined ? readInQueueAttempts(headers, d.msg.fields.redelivered, parts.retryQueueSet) : readAttempts(headers, parts.retryQueueSet)).failed;
      await this.apply(d, headers, decideFor(parts, d, headers, failed, { kind: 'failure-path-threw', error: thrown }));
    } catch (error) {
      if (d.settled || !parts.current(d.ch)) return;
      parts.logger.error('could not park a message whose failure path threw; nacked with requeue, so it will be delivered again', { consumer: parts.name, messageId, error: errorText(error) });
      this.requeue(d, false);
    }
  }
}
