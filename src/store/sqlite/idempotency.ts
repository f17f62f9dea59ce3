import { StoreUnavailableError } from '../../errors.js';
import type { GuardStats, StoreGuard } from '../index.js';
import { closableHandle, Rollback, StoreBusyError, TransactionClosedError, untilAborted } from '../transaction.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

/**
 * The idempotency guard over SQLite: BEGIN IMMEDIATE, insert the `(message_id, consumer)`
 * marker (a duplicate inserts nothing: roll back, skip the handler), run the handler with
 * the database, COMMIT both. A handler that throws rolls the marker back with its writes.
 *
 * The handler gets a stand-in for the connection, not the connection: when its `signal`
 * aborts (it ran past `timeoutMs`) the transaction is rolled back and the connection
 * given to the next transaction at once, whether or not the handler settles, and from
 * then on every use of its `tx` (and of statements it prepared on it) throws
 * {@link TransactionClosedError} instead of writing outside the transaction or inside
 * another one.
 */
export class SqliteIdempotencyGuard<DB extends SqliteDatabase> implements StoreGuard<DB> {
  readonly stats: GuardStats = { done: 0, duplicate: 0, failed: 0, unavailable: 0, busy: 0 };

  constructor(private readonly store: SqliteInternals<DB>) {}

  async run(messageId: string, consumer: string, work: (tx: DB) => Promise<void>, signal?: AbortSignal): Promise<'done' | 'duplicate'> {
    if (signal?.aborted) throw signal.reason;
    const insert = `INSERT INTO ${this.store.tables.processed} (message_id, consumer, processed_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`;
    try {
      const outcome = await this.store.write(async (db) => {
        const { changes } = this.store.statement(db, insert).run(messageId, consumer, Date.now());
        if (Number(changes) === 0) throw new Rollback('duplicate' as const);
        // Iterators the handler left open keep the connection busy: ROLLBACK and COMMIT
        // would fail on it, and the next transaction could not begin.
        const iterators = new Set<Iterator<unknown>>();
        const tx: { handle: DB; close(error: Error): void } = closableHandle(db, { wrap: (method, result, guard): unknown => (method === 'prepare' ? closableStatement(result as object, guard, iterators, () => tx.handle) : result) });
        const close = (error: TransactionClosedError) => {
          tx.close(error);
          for (const iterator of iterators) {
            try {
              iterator.return?.();
            } catch {
              // Ended already; the ROLLBACK or COMMIT reports a connection still busy.
            }
          }
          iterators.clear();
        };
        try {
          await untilAborted(work(tx.handle), signal);
        } catch (error) {
          close(new TransactionClosedError('sqlite', `The handler of message '${messageId}' (consumer '${consumer}') used its \`tx\` after its transaction was rolled back (${error instanceof Error ? error.message : String(error)}); nothing it wrote is kept.`));
          throw error;
        }
        close(new TransactionClosedError('sqlite', `The handler of message '${messageId}' (consumer '${consumer}') used its \`tx\` after it returned and the transaction had ended: use \`tx\` only while the handler runs.`));
        return 'done' as const;
      }, 'run an idempotent handler');
      this.stats[outcome]++;
      return outcome;
    } catch (error) {
      if (error instanceof StoreBusyError) this.stats.busy++;
      else if (error instanceof StoreUnavailableError) this.stats.unavailable++;
      else this.stats.failed++;
      throw error;
    }
  }
}

/**
 * A prepared statement whose every call fails once the handler's transaction has ended;
 * the iterators it makes (`iterate()`) are tracked in `iterators` until they finish, and
 * its `database` is the handler's stand-in, not the connection.
 */
function closableStatement(statement: object, guard: () => void, iterators: Set<Iterator<unknown>>, database: () => object): object {
  // The proxy's target is an empty object of the statement's class, not the statement:
  // its `database` is a read-only property a proxy of the statement would have to return as is.
  const t = statement;
  return new Proxy(Object.create(Object.getPrototypeOf(statement) as object | null) as object, {
    get(_target, prop) {
      guard();
      // The statement's `database` is the connection itself: hand out the stand-in.
      if (prop === 'database') return database();
      const value: unknown = Reflect.get(t, prop, t);
      if (typeof value !== 'function') return value;
      const fn = value as (...args: unknown[]) => unknown;
      return function (this: unknown, ...args: unknown[]) {
        guard();
        const result = fn.apply(t, args);
        if (result === t) return this;
        return prop === 'iterate' ? closableIterator(result as IterableIterator<unknown>, guard, iterators) : result;
      };
    },
    has(_target, prop) {
      return Reflect.has(t, prop);
    },
  });
}

/** An iterator of a handler's statement: tracked while open, and failing once the transaction has ended. */
function closableIterator(iterator: IterableIterator<unknown>, guard: () => void, iterators: Set<Iterator<unknown>>): IterableIterator<unknown> {
  iterators.add(iterator);
  const wrapped: IterableIterator<unknown> = {
    next(...args: [] | [unknown]) {
      guard();
      const step = iterator.next(...args);
      if (step.done === true) iterators.delete(iterator);
      return step;
    },
    return(value?: unknown) {
      iterators.delete(iterator);
      return iterator.return?.(value) ?? { done: true, value };
    },
    [Symbol.iterator]() {
      return wrapped;
    },
  };
  return wrapped;
}
