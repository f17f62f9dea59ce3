/**
 * A delivery's way to its decision, as the consumer takes it: the {@link DeliveryPath}
 * (shared with `warren/testing`) with the consumer's own handler start (its clock, the
 * delivery's span, the idempotency guard held through a database outage); the decision
 * goes to the {@link Settler}.
 */
import { WarrenError } from '../errors.js';
import { backoffDelay } from '../connection/index.js';
import { traceDelivery } from '../trace/index.js';
import type { BodyDecoder } from './decode.js';
import type { MessageIdReader } from './message-id.js';
import type { Delivery } from './delivery.js';
import { DuplicateDelivery, type HandlerClock, HandlerRun, runHandler, StoreOutage } from './handler-run.js';
import type { ConsumerParts } from './parts.js';
import { DeliveryPath } from './path.js';
import type { Settler } from './settle.js';
import type { ConsumerOptions, Handler } from './types.js';

/** Takes one consumer's deliveries from arrival to decision, and hands the decision to its settler. */
export class Processor<T, Tx> {
  /** The delivery whose handler {@link startHandler} starts (trace.run calls it at once). */
  private starting: Delivery | undefined;
  private readonly path: DeliveryPath<T, Tx, Delivery>;

  constructor(
    private readonly parts: ConsumerParts<T, Tx>,
    private readonly handler: Handler<T, Tx>,
    decoder: BodyDecoder,
    idReader: MessageIdReader | undefined,
    private readonly clock: HandlerClock,
    settler: Settler<T, Tx>,
  ) {
    // Each decision is told to the consumer (its breaker learns from it) before it is carried out.
    const apply = settler.apply.bind(settler);
    this.path = new DeliveryPath<T, Tx, Delivery>(parts, decoder, idReader, this.start, (d, headers, decision) => {
      parts.decided(d, decision);
      return apply(d, headers, decision);
    });
  }

  /** Processes `d` to its outcome. Rejects only when its failure path threw (the consumer's last resort takes it). */
  process(d: Delivery): Promise<void> {
    const { parts } = this;
    const { msg } = d;
    d.started = performance.now();
    const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
    const failed = this.path.attempts(msg, headers);
    d.trace = traceDelivery(parts.declaration, msg, failed + 1);
    return this.path.process(d, headers, failed, msg.fields.redelivered && parts.blips.wasSeenInFlight(msg));
  }

  /** Starts a delivery's handler in its span: one function for all deliveries rather than a closure made for each. */
  private readonly start = (d: Delivery): Promise<void> => {
    this.starting = d;
    return d.trace === undefined ? this.startHandler() : d.trace.run(this.startHandler);
  };

  /**
   * Runs the handler of {@link starting} (its payload and run set by the path): what
   * `trace.run` calls, at once, with the delivery's span active.
   */
  private readonly startHandler = (): Promise<void> => {
    const d = this.starting;
    this.starting = undefined;
    if (d === undefined || d.run === undefined) return Promise.reject(new Error('no delivery to run the handler of'));
    const run = d.run as HandlerRun<Tx>;
    const guard = this.parts.options.idempotency;
    return runHandler(this.handler, d.payload as T, run, this.parts.timeoutMs, this.parts.name, guard && ((work, signal) => this.runGuarded(guard, run.messageId as string, work, signal)), this.clock);
  };

  /**
   * Runs the guard, holding the message while the database is unreachable or busy (a
   * twin of this message still running). `signal` lets the guard roll back a handler
   * that times out, even one that never settles.
   */
  private async runGuarded(guard: NonNullable<ConsumerOptions<T, Tx>['idempotency']>, messageId: string, work: (tx: Tx) => Promise<void>, signal: AbortSignal): Promise<void> {
    const { parts } = this;
    const holdUntil = Date.now() + parts.storeOutageHoldMs;
    for (let attempt = 1; ; attempt++) {
      let result: 'done' | 'duplicate';
      try {
        result = await guard.run(messageId, parts.name, work, signal);
      } catch (error) {
        if (!(error instanceof WarrenError && error.code === 'STORE_UNAVAILABLE')) throw error;
        if (Date.now() >= holdUntil || parts.stopping()) throw new StoreOutage(error);
        parts.logger.warn('database unavailable; holding the message and trying again', { consumer: parts.name, messageId, attempt, error: error.message });
        await new Promise((r) => setTimeout(r, Math.min(backoffDelay(attempt, 100, 5000), Math.max(1, holdUntil - Date.now()))));
        continue;
      }
      if (result === 'duplicate') throw new DuplicateDelivery();
      return;
    }
  }
}
