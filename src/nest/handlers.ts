import type { ConsumerOptions, Handler } from '../consume/types.js';
import type { Topology } from '../topology/declaration.js';
import { WARREN_CONSUMER, type WarrenConsumerMetadata } from './decorators.js';
import { ConsumerHandlerError } from './errors.js';
import { suggestion } from './names.js';

/** A method that `@WarrenConsumer` marked, on the instance it will be called on. */
export interface FoundHandler {
  readonly consumer: string;
  /** `ClassName.method`, for messages. */
  readonly where: string;
  readonly options: ConsumerOptions<never, never>;
  /** Calls the method on its instance; undefined when the provider is not a singleton. */
  readonly handler: Handler<never, never> | undefined;
  /** Why the provider cannot host a handler (`request`-scoped, transient). */
  readonly scope?: string;
}

/** What the module reads of one of Nest's instance wrappers. */
export interface ProviderLike {
  readonly instance: unknown;
  /** The class, for a class provider; the factory, for a factory provider. */
  readonly metatype?: unknown;
  /** True when `metatype` is not the instance's class (a factory, a value). */
  readonly isNotMetatype?: boolean;
  readonly isTransient?: boolean;
  isDependencyTreeStatic?(): boolean;
}

/**
 * The handlers `@WarrenConsumer` marked on the providers' and controllers' methods.
 * An instance reached through several tokens (an alias with `useExisting`) counts once.
 * A request-scoped or transient provider has no one instance to call: its handlers are
 * returned without a `handler`, with the `scope` that rules them out.
 */
export function findHandlers(providers: Iterable<ProviderLike>, methodNames: (prototype: object) => readonly string[]): FoundHandler[] {
  const found: FoundHandler[] = [];
  const seen = new WeakSet<object>();
  for (const wrapper of providers) {
    const scope = wrapper.isTransient === true ? 'transient' : wrapper.isDependencyTreeStatic?.() === false ? 'request-scoped' : undefined;
    const instance = wrapper.instance;
    let prototype: object | null | undefined;
    if (scope !== undefined) {
      // Its static instance, if any, was never given its dependencies: read the class.
      prototype = wrapper.isNotMetatype !== true && typeof wrapper.metatype === 'function' ? (wrapper.metatype.prototype as object) : undefined;
    } else if (typeof instance === 'object' && instance !== null && !seen.has(instance)) {
      seen.add(instance);
      prototype = Object.getPrototypeOf(instance) as object | null;
    }
    if (prototype === undefined || prototype === null || prototype === Object.prototype || seen.has(prototype)) continue;
    if (scope !== undefined) seen.add(prototype);
    for (const method of methodNames(prototype)) {
      const fn = (prototype as Record<string, unknown>)[method];
      if (typeof fn !== 'function') continue;
      const marks = Reflect.getMetadata(WARREN_CONSUMER, fn) as WarrenConsumerMetadata[] | undefined;
      if (marks === undefined) continue;
      const where = `${prototype.constructor.name}.${method}`;
      const target = instance as Record<string, (payload: never, context: never) => unknown>;
      // Called through the instance at each delivery: `this` is the provider, and a
      // method replaced on the instance (a spy) is the one called.
      const handler: Handler<never, never> | undefined = scope === undefined ? (payload, context) => target[method]!(payload, context as never) : undefined;
      for (const mark of marks) found.push({ consumer: mark.consumer, where, options: mark.options, handler, ...(scope === undefined ? {} : { scope }) });
    }
  }
  return found;
}

/**
 * The handlers that declare they need a transaction (`requiresTx: true`, on the decorator
 * or in the module's consumer options) while their consumer has no idempotency guard to
 * give them one: one sentence each, for a {@link ConsumerHandlerError}.
 */
export function transactionProblems(handlers: ReadonlyMap<string, FoundHandler>, effective: (name: string) => { readonly requiresTx?: boolean | undefined; readonly idempotency?: unknown }): string[] {
  const problems: string[] = [];
  for (const [name, h] of handlers) {
    const options = effective(name);
    if (options.requiresTx === true && options.idempotency === undefined) {
      problems.push(
        `${h.where} handles '${name}' with requiresTx: true (it uses ctx.tx), but the module has no store to give it a transaction. ` +
          `Pass \`store\` (postgresStore() or sqliteStore()) to WarrenModule, or an \`idempotency\` guard in consumerOptions.${name}.`,
      );
    }
  }
  return problems;
}

/**
 * Pairs the topology's consumers (those in `handle`, or all) with their handlers, one
 * each, in the topology's order. Throws {@link ConsumerHandlerError} listing every
 * problem: a consumer with no handler, a handler naming a consumer the topology does not
 * declare (with the closest name) or one `handle` leaves out, two handlers for one
 * consumer, a handler on a provider that is not a singleton.
 */
export function matchHandlers(topology: Topology, handle: readonly string[] | undefined, found: readonly FoundHandler[]): Map<string, FoundHandler & { handler: Handler<never, never> }> {
  const declared = [...topology.consumers.keys()];
  const wanted = handle ?? declared;
  const problems: string[] = [];
  const byConsumer = new Map<string, FoundHandler[]>();
  for (const h of found) {
    if (h.scope !== undefined) {
      problems.push(`${h.where} handles '${h.consumer}' but its provider is ${h.scope}: a consumer calls one instance for the life of the application. Make ${h.where.split('.')[0] ?? 'it'} a default-scoped (singleton) provider, with nothing request-scoped injected into it.`);
      continue;
    }
    if (!topology.consumers.has(h.consumer)) {
      problems.push(`${h.where} has @WarrenConsumer('${h.consumer}'), a consumer the topology does not declare. ${suggestion(h.consumer, declared)}The topology declares: ${declared.join(', ')}.`);
      continue;
    }
    if (!wanted.includes(h.consumer)) {
      problems.push(`${h.where} handles '${h.consumer}', which the module's \`handle\` option leaves out (handle: [${wanted.map((n) => `'${n}'`).join(', ')}]). Add '${h.consumer}' to \`handle\`, or remove the decorator.`);
      continue;
    }
    byConsumer.set(h.consumer, [...(byConsumer.get(h.consumer) ?? []), h]);
  }
  const matched = new Map<string, FoundHandler & { handler: Handler<never, never> }>();
  for (const name of declared.filter((n) => wanted.includes(n))) {
    const handlers = byConsumer.get(name) ?? [];
    const [first] = handlers;
    if (first === undefined) {
      const handled = declared.filter((n) => byConsumer.has(n));
      problems.push(
        `consumer '${name}' has no handler. Put @WarrenConsumer('${name}') on a method of a provider of a module the application imports, ` +
          `or leave '${name}' out of the module's \`handle\` option if this application does not consume it (handle: [${handled.map((n) => `'${n}'`).join(', ')}]).`,
      );
    } else if (handlers.length > 1) {
      const twice = new Set(handlers.map((h) => h.where)).size < handlers.length ? ' (one class provided in several modules makes an instance in each: provide it in one module and export it)' : '';
      problems.push(`consumer '${name}' has ${handlers.length} handlers: ${handlers.map((h) => h.where).join(', ')}${twice}. Keep one: each message of a consumer goes to one handler.`);
    } else if (first.handler !== undefined) {
      matched.set(name, { ...first, handler: first.handler });
    }
  }
  if (problems.length > 0) throw new ConsumerHandlerError(problems);
  return matched;
}
