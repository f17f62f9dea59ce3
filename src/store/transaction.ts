import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Thrown inside a store's transaction body to roll back and return `value` instead of
 * failing: the idempotency guard uses it for a duplicate.
 */
export class Rollback<T> {
  constructor(readonly value: T) {}
}

/** A FIFO lock for one connection that async transactions take turns on. */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  private held = 0;

  /** Resolves with a release function once every earlier holder has released. */
  lock(): Promise<() => void> {
    let release!: () => void;
    const next = new Promise<void>((r) => (release = r));
    this.held++;
    const acquired = this.tail.then(() => {
      let released = false;
      return () => {
        if (released) return;
        released = true;
        this.held--;
        release();
      };
    });
    this.tail = this.tail.then(() => next);
    return acquired;
  }

  /** True while someone holds or waits for the lock. */
  get busy(): boolean {
    return this.held > 0;
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
