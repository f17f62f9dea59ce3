import { AsyncLocalStorage } from 'node:async_hooks';
import { StoreError, StoreUnavailableError } from '../errors.js';

/**
 * Thrown inside a store's transaction body to roll back and return `value` instead of
 * failing: the idempotency guard uses it for a duplicate.
 */
export class Rollback<T> {
  constructor(readonly value: T) {}
}

/**
 * The database is reachable but cannot take this transaction now: another delivery of the
 * same message holds its idempotency marker, or the store's connection stayed busy past
 * the wait allowed. The consumer holds the message and tries again, as in an outage,
 * without counting an attempt.
 */
export class StoreBusyError extends StoreUnavailableError {}

/**
 * A handler used its `tx` after warren had ended that transaction: the handler ran past
 * its `timeoutMs` (or the consumer closed past its deadline) and warren rolled the
 * transaction back, or the handler kept `tx` after returning. Nothing it wrote is kept.
 */
export class TransactionClosedError extends StoreError {}

interface Waiter {
  grant: (release: () => void) => void;
  timer: NodeJS.Timeout | undefined;
}

/** A FIFO lock for one connection that async transactions take turns on. */
export class Mutex {
  private locked = false;
  private readonly waiters: Waiter[] = [];

  /**
   * Resolves with a release function once every earlier holder has released; with
   * `timeoutMs`, rejects with `onTimeout()` if the lock is not free by then.
   */
  lock(timeoutMs?: number, onTimeout?: () => Error): Promise<() => void> {
    if (!this.locked) {
      this.locked = true;
      return Promise.resolve(this.releaser());
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { grant: resolve, timer: undefined };
      if (timeoutMs !== undefined) {
        waiter.timer = setTimeout(() => {
          const i = this.waiters.indexOf(waiter);
          if (i !== -1) this.waiters.splice(i, 1);
          reject(onTimeout?.() ?? new Error(`lock not free within ${timeoutMs} ms`));
        }, timeoutMs);
      }
      this.waiters.push(waiter);
    });
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      if (next === undefined) {
        this.locked = false;
        return;
      }
      clearTimeout(next.timer);
      next.grant(this.releaser());
    };
  }

  /** True while someone holds or waits for the lock. */
  get busy(): boolean {
    return this.locked;
  }
}

/** Which store's transaction the current async context runs inside, while it is open. */
interface OpenTransaction {
  readonly owner: object;
  open: boolean;
}

const current = new AsyncLocalStorage<OpenTransaction>();

/** Runs `fn` marked as inside a transaction of `owner`; the mark ends when `fn` settles. */
export async function insideTransaction<R>(owner: object, fn: () => Promise<R> | R): Promise<R> {
  const mark: OpenTransaction = { owner, open: true };
  try {
    return await current.run(mark, fn);
  } finally {
    mark.open = false;
  }
}

/** True when the caller runs inside a still-open transaction of `owner`. */
export function isInsideTransaction(owner: object): boolean {
  const mark = current.getStore();
  return mark !== undefined && mark.open && mark.owner === owner;
}

/**
 * Settles as `work` does, or rejects with the signal's reason as soon as it aborts, even
 * if `work` never settles (it is left to run; what it does next must fail on its own).
 */
export function untilAborted<R>(work: Promise<R>, signal: AbortSignal | undefined): Promise<R> {
  if (signal === undefined) return work;
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(signal.reason as Error);
  }
  return new Promise<R>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error as Error);
      },
    );
  });
}

const targets = new WeakMap<object, { target: object; closed: () => Error | undefined }>();

/**
 * A stand-in for a transaction handle (a connection) that a handler gets as `tx`: it
 * forwards everything to `target` until `close(error)`, then every use throws that error,
 * so a handler that outlived its transaction cannot write outside it, or inside the next
 * transaction on the same connection. `wrap` may wrap what a method returns (SQLite
 * statements); `onCall` sees each call's promise (to tell whether a query is in flight).
 */
export function closableHandle<T extends object>(
  target: T,
  options: { wrap?: (method: string, result: unknown, guard: () => void) => unknown; onCall?: (result: unknown) => void } = {},
): { handle: T; close(error: Error): void } {
  let closedWith: Error | undefined;
  const guard = () => {
    if (closedWith !== undefined) throw closedWith;
  };
  const methods = new Map<PropertyKey, unknown>();
  const handle = new Proxy(target, {
    get(t, prop) {
      guard();
      const value: unknown = Reflect.get(t, prop, t);
      if (typeof value !== 'function') return value;
      let method = methods.get(prop);
      if (method === undefined) {
        const fn = value as (...args: unknown[]) => unknown;
        method = function (this: unknown, ...args: unknown[]) {
          guard();
          const result = fn.apply(t, args);
          if (result === t) return handle;
          options.onCall?.(result);
          return options.wrap === undefined || typeof prop !== 'string' ? result : options.wrap(prop, result, guard);
        };
        methods.set(prop, method);
      }
      return method;
    },
    set(t, prop, value) {
      guard();
      return Reflect.set(t, prop, value, t);
    },
  });
  targets.set(handle, { target, closed: () => closedWith });
  return {
    handle,
    close(error: Error) {
      closedWith ??= error;
    },
  };
}

/** The connection behind a handle from {@link closableHandle} (or the value itself); throws once the handle is closed. */
export function unwrapHandle<T extends object>(value: T): T {
  const entry = targets.get(value);
  if (entry === undefined) return value;
  const closed = entry.closed();
  if (closed !== undefined) throw closed;
  return entry.target as T;
}
