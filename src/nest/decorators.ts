import 'reflect-metadata';
import { Inject } from '@nestjs/common';
import type { DeliveryContext, TransactionContext } from '../consume/context.js';
import type { ConsumerOptions } from '../consume/types.js';
import { InvalidOptionError } from '../errors.js';
import { Publisher } from '../publish/publisher.js';
import { Warren } from '../warren.js';

/** Metadata key of {@link WarrenConsumer} on a method. */
export const WARREN_CONSUMER = 'warren:consumer';

/** What {@link WarrenConsumer} records on a method (a method may handle several consumers). */
export interface WarrenConsumerMetadata {
  readonly consumer: string;
  readonly options: ConsumerOptions<never, never>;
}

/**
 * What `@WarrenConsumer(...)` returns: a decorator for a method of a provider whose
 * context parameter accepts `C`. Without `requiresTx`, `C` has no `tx`: a method typed
 * `ctx: MessageContext<pg.PoolClient>` does not compile until the decorator declares
 * `{ requiresTx: true }`, which the module checks against its `store` at start.
 * @typeParam C - the context the method is given
 * @typeParam M - the decorated method's type: `(payload, context) => ...`
 */
export type ConsumerMethodDecorator<C = DeliveryContext> = <M extends (payload: never, context: C) => unknown>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<M>) => void;

/** The context of a method whose decorator declares `requiresTx: true`: with the store's transaction. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the store's type is the module's, unknown here
export type TransactionalContext = DeliveryContext & TransactionContext<any>;

/**
 * Makes a method of a provider (or controller) the handler of a consumer the topology
 * declares. The method gets the payload and the context (`ctx.attempt`, `ctx.signal`,
 * `ctx.tx` with a store, ...) and is called on the provider's instance, so what was
 * injected into it is there. Resolve to ack; throw to retry or park, as with
 * `warren.consume()`. The provider must be a singleton (the default scope).
 *
 * `options` are the consumer's (`prefetch`, `concurrency`, `timeoutMs`, `schema`,
 * `classify`, ...); the module's `consumerOptions` for the same consumer override them.
 * A method that uses `ctx.tx` (the store's transaction) declares `requiresTx: true`: its
 * context is then typed with `tx`, and the module refuses to start without a `store`.
 * Without it, the method's context has no `tx`, and a method typed otherwise does not
 * compile.
 * The decorator it returns takes a method of type `M`: `(payload, context) => ...`.
 *
 * @example
 * ```ts
 * @Injectable()
 * export class BillingHandlers {
 *   constructor(@Inject(PaymentGateway) private readonly gateway: PaymentGateway) {}
 *
 *   @WarrenConsumer('billing', { concurrency: 4 })
 *   async charge(order: Order, ctx: MessageContext) {
 *     await this.gateway.charge(order, { signal: ctx.signal });
 *   }
 *
 *   @WarrenConsumer('receipts', { requiresTx: true })
 *   async record(paid: Paid, ctx: MessageContext<pg.PoolClient>) {
 *     await ctx.tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [paid.orderId]);
 *   }
 * }
 * ```
 */
export function WarrenConsumer<T = unknown>(consumer: string, options?: ConsumerOptions<T, unknown> & { readonly requiresTx?: false }): ConsumerMethodDecorator;
export function WarrenConsumer<T = unknown>(consumer: string, options: ConsumerOptions<T, unknown> & { readonly requiresTx: true }): ConsumerMethodDecorator<TransactionalContext>;
export function WarrenConsumer<T = unknown>(consumer: string, options: ConsumerOptions<T, unknown> = {}): ConsumerMethodDecorator<TransactionalContext> {
  if (typeof consumer !== 'string' || consumer === '') {
    throw new InvalidOptionError('@WarrenConsumer', `expected the name of a consumer of the topology, got ${JSON.stringify(consumer)}`, "Example: @WarrenConsumer('billing')");
  }
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError(`@WarrenConsumer('${consumer}') options`, 'expected an object of consumer options');
  return <M extends (payload: never, context: never) => unknown>(target: object, key: string | symbol, descriptor: TypedPropertyDescriptor<M>): void => {
    const method = descriptor.value;
    if (typeof method !== 'function') {
      throw new InvalidOptionError(`@WarrenConsumer('${consumer}')`, `${target.constructor.name}.${String(key)} is not a method`, 'Put it on a method of an injectable class.');
    }
    const before = (Reflect.getMetadata(WARREN_CONSUMER, method) as WarrenConsumerMetadata[] | undefined) ?? [];
    const entry: WarrenConsumerMetadata = Object.freeze({ consumer, options: options as unknown as ConsumerOptions<never, never> });
    Reflect.defineMetadata(WARREN_CONSUMER, [...before, entry], method);
  };
}

/**
 * Injects the module's `Warren` (the same as injecting by its class: `constructor(private
 * readonly warren: Warren)` where the compiler emits decorator metadata).
 */
export function InjectWarren(): PropertyDecorator & ParameterDecorator {
  return Inject(Warren);
}

/** Injects the module's `Publisher` (`warren.publisher`). */
export function InjectPublisher(): PropertyDecorator & ParameterDecorator {
  return Inject(Publisher);
}
