/**
 * A delivery's way to its decision, in the order it travels: the crash-loop guard for a
 * redelivery, the decoder, the message id, the schema, the handler (in the idempotency
 * guard's transaction when there is one), then `decide()`; the decision goes to the
 * {@link Settler}.
 */
import { WarrenError } from '../errors.js';
import { HEADER } from '../headers.js';
import { backoffDelay } from '../connection/index.js';
import { readAttempts } from '../retry/attempts.js';
import { traceDelivery } from '../trace/index.js';
import type { BodyDecoder } from './decode.js';
import type { MessageIdReader } from './message-id.js';
import type { Decision, Happening } from './contract.js';
import type { Delivery } from './delivery.js';
import { DuplicateDelivery, happening, type HandlerClock, HandlerRun, runHandler, StoreOutage } from './handler-run.js';
import { decideFor, type ConsumerParts } from './parts.js';
import { decodeBody, messageIdOf, validatePayload } from './payload.js';
import type { Settler } from './settle.js';
import type { ConsumerOptions, Handler } from './types.js';

/** What `decide` is told of a handler that resolved (one object for every delivery). */
const RESOLVED: Happening = Object.freeze({ kind: 'resolved' });

/** Takes one consumer's deliveries from arrival to decision, and hands the decision to its settler. */
export class Processor<T, Tx> {
  /** The delivery whose handler {@link startHandler} starts (trace.run calls it at once). */
  private starting: Delivery | undefined;

  constructor(
    private readonly parts: ConsumerParts<T, Tx>,
    private readonly handler: Handler<T, Tx>,
    private readonly decoder: BodyDecoder,
    private readonly idReader: MessageIdReader | undefined,
    private readonly clock: HandlerClock,
    private readonly settler: Settler<T, Tx>,
  ) {}

  /** Processes `d` to its outcome. Rejects only when its failure path threw (the consumer's last resort takes it). */
  async process(d: Delivery): Promise<void> {
    const { parts } = this;
    const { msg } = d;
    d.started = performance.now();
    let messageId = msg.properties.messageId as string | undefined;
    const headers = (msg.properties.headers ?? {}) as Record<string, unknown>;
    const attempts = readAttempts(headers, parts.retryQueueSet);
    if (attempts.warning) parts.logger.warn('attempt count unreadable', { consumer: parts.name, messageId, warning: attempts.warning });
    const trace = (d.trace = traceDelivery(parts.declaration, msg, attempts.failed + 1));

    let payload: T | undefined;
    let decision: Decision | undefined;
    try {
      if (msg.fields.redelivered) {
        const guard = decideFor(parts, d, headers, attempts.failed, { kind: 'redelivered', seenInFlight: parts.blips.wasSeenInFlight(msg) });
        if (guard.kind === 'move-back') return await this.settler.apply(d, headers, guard);
        if (guard.kind !== 'run') decision = guard;
      }
      if (decision === undefined) {
        const body = decodeBody(this.decoder, msg, parts.timeoutMs, parts.name);
        const value: unknown = body instanceof Promise ? await body : body;
        // The producer's id, when there is one, is the id (see messageIdOf).
        if (messageId === undefined || messageId === '') {
          const id = messageIdOf(this.idReader, msg, value, messageId, parts.options.idempotency !== undefined);
          if (id.found && id.id !== undefined) d.foundId = id.id;
          messageId = id.id;
        }
        const schema = parts.options.schema;
        payload = schema ? await validatePayload(schema, value, parts.timeoutMs, parts.name) : (value as T);
        const routingKey = typeof headers[HEADER.routingKey] === 'string' ? (headers[HEADER.routingKey] as string) : msg.fields.routingKey;
        d.payload = payload;
        d.run = new HandlerRun<Tx>(messageId, routingKey, headers, attempts.failed + 1, msg, undefined as Tx) as HandlerRun<unknown>;
        this.starting = d;
        await trace.run(this.startHandler);
        decision = decideFor(parts, d, headers, attempts.failed, RESOLVED);
      }
    } catch (caught) {
      decision = decideFor(parts, d, headers, attempts.failed, happening(caught), payload);
    }
    d.run = undefined;
    d.payload = undefined;
    const applying = this.settler.apply(d, headers, decision);
    if (applying !== undefined) await applying;
  }

  /**
   * Runs the handler of {@link starting} (its payload and run set by `process`): what
   * `trace.run` calls, at once, with the delivery's span active. One function for all
   * deliveries rather than a closure made for each.
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
