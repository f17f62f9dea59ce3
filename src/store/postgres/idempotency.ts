import { StoreError, StoreUnavailableError } from '../../errors.js';
import type { GuardStats, StoreGuard } from '../index.js';
import { checkInt } from '../options.js';
import { closableHandle, Rollback, StoreBusyError, TransactionClosedError, untilAborted } from '../transaction.js';
import type { PgClient } from './driver.js';
import { AbandonTransaction, type PostgresInternals } from './internals.js';

/**
 * The idempotency guard over PostgreSQL: BEGIN, `INSERT … ON CONFLICT DO NOTHING` of the
 * `(message_id, consumer)` marker, the handler with the same client, COMMIT.
 *
 * A second delivery of the same message while the first still runs never waits on the
 * first one's uncommitted marker (that would park a connection on a row lock for as long
 * as the first handler runs): the marker insert first takes a transaction-scoped advisory
 * lock on the pair with `pg_try_advisory_xact_lock`, and a copy that cannot take it is
 * refused at once with {@link StoreBusyError}; the consumer holds it and tries again
 * without counting an attempt, and finds the marker (duplicate) or, if the first rolled
 * back, runs.
 *
 * The handler gets a stand-in for the client: when its `signal` aborts (it ran past
 * `timeoutMs`) the connection is discarded at once, whether or not the handler settles,
 * so PostgreSQL rolls the transaction back and its locks go (a query still running on it
 * is cancelled); every later use of that `tx` throws {@link TransactionClosedError}.
 *
 * A process that cannot enforce its own timeout (frozen, paused, or cut off from the
 * database without a FIN or RST) would keep its connection idle in transaction, with the
 * advisory lock, until TCP keepalive gives up (hours): its twins would be held busy all
 * that time, with no attempt counted. So the guard's transaction sets
 * `idle_in_transaction_session_timeout` for itself (`idleInTransactionTimeoutMs`, in the
 * BEGIN round trip): PostgreSQL ends a session that stays idle inside it longer than
 * that, rolls it back and frees the lock, and the held copy then runs (or is a duplicate).
 */
export class PostgresIdempotencyGuard<C extends PgClient> implements StoreGuard<C> {
  readonly stats: GuardStats = { done: 0, duplicate: 0, failed: 0, unavailable: 0, busy: 0 };
  private readonly idleInTransactionTimeoutMs: number;

  constructor(
    private readonly store: PostgresInternals<C>,
    options: PostgresGuardOptions = {},
  ) {
    this.idleInTransactionTimeoutMs = checkInt(options.idleInTransactionTimeoutMs, GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS, 'idleInTransactionTimeoutMs', 0, 2 ** 31 - 1);
  }

  async run(messageId: string, consumer: string, work: (tx: C) => Promise<void>, signal?: AbortSignal): Promise<'done' | 'duplicate'> {
    if (signal?.aborted) throw signal.reason;
    // Sent with BEGIN in one round trip, so the guard costs no round trip of its own:
    // the handler needed BEGIN anyway.
    const table = this.store.tables.processed;
    const key = sqlLiteral(JSON.stringify([table, consumer, messageId]));
    const insert = `WITH lock AS (SELECT pg_try_advisory_xact_lock(hashtextextended(${key}, 0)) AS ok),
      ins AS (INSERT INTO ${table} (message_id, consumer) SELECT ${sqlLiteral(messageId)}, ${sqlLiteral(consumer)} FROM lock WHERE lock.ok ON CONFLICT DO NOTHING RETURNING 1)
      SELECT (SELECT ok FROM lock) AS locked, (SELECT count(*) FROM ins)::int AS inserted`;
    const idle = this.idleInTransactionTimeoutMs === 0 ? '' : `SET LOCAL idle_in_transaction_session_timeout = ${this.idleInTransactionTimeoutMs}; `;
    try {
      const outcome = await this.store.transaction(
        async (client, first) => {
          // Fail closed: a driver or wrapper that reports no result must not turn a
          // duplicate into a second run of the handler.
          const row = first?.rows[0] as { locked?: unknown; inserted?: unknown } | undefined;
          if (typeof row?.locked !== 'boolean' || (row.inserted !== 0 && row.inserted !== 1)) {
            throw new StoreError('postgres', `The idempotency marker insert answered ${JSON.stringify(row)} instead of whether it was inserted, so a duplicate cannot be told from new work; the message was not handled. Use pg's own client (or one that returns the rows of multi-statement queries).`);
          }
          if (!row.locked) throw new StoreBusyError(`another delivery of message '${messageId}' to consumer '${consumer}' is still running (its idempotency marker is taken); held and tried again`);
          if (row.inserted === 0) throw new Rollback('duplicate' as const);
          let inFlight = 0;
          // A query given a callback, or a submittable (a cursor, a stream), returns no
          // promise: there is no telling when it ends, so it counts as running.
          let untracked = false;
          const settled = () => void inFlight--;
          const tx = closableHandle(client, {
            onCall: (result) => {
              if (result instanceof Promise) {
                inFlight++;
                result.then(settled, settled);
              }
            },
            wrap: (method, result) => {
              if (method === 'query' && !(result instanceof Promise)) untracked = true;
              return result;
            },
          });
          try {
            await untilAborted(work(tx.handle), signal);
          } catch (error) {
            tx.close(new TransactionClosedError('postgres', `The handler of message '${messageId}' (consumer '${consumer}') used its \`tx\` after its transaction was rolled back (${error instanceof Error ? error.message : String(error)}); nothing it wrote is kept.`));
            if (signal?.aborted === true && error === signal.reason) throw new AbandonTransaction(error, inFlight > 0 || untracked);
            // A handler that failed with a query of its still running: a ROLLBACK would
            // wait behind that query, with the transaction's locks, for as long as it runs.
            if (inFlight > 0) throw new AbandonTransaction(error, true);
            throw error;
          }
          tx.close(new TransactionClosedError('postgres', `The handler of message '${messageId}' (consumer '${consumer}') used its \`tx\` after it returned and the transaction had ended: use \`tx\` only while the handler runs.`));
          return 'done' as const;
        },
        'run an idempotent handler',
        idle + insert,
      );
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

/** Default of {@link PostgresGuardOptions.idleInTransactionTimeoutMs}: 10 minutes. */
export const GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS = 10 * 60 * 1000;

/** Options of the PostgreSQL store's `idempotency(options)`. */
export interface PostgresGuardOptions {
  /**
   * PostgreSQL ends a guarded transaction's session once it has been idle inside the
   * transaction (no query running) this long, rolling it back: the bound on how long a
   * frozen or vanished process keeps a message's marker lock, and so on how long its
   * redelivered copy is held busy. Keep it well above the consumer's `timeoutMs` (a live
   * process ends a handler's transaction itself at `timeoutMs`); a handler that idles
   * longer than this between its queries loses its transaction (its next query fails and
   * the message is retried). 0 leaves the server's own setting (off by default).
   * @default 600000 (10 minutes)
   */
  idleInTransactionTimeoutMs?: number;
}

/**
 * A string as an SQL literal, as node-postgres' `escapeLiteral` writes it: quotes doubled,
 * and backslashes doubled under `E''`, so the value is the same whatever
 * `standard_conforming_strings` says.
 */
function sqlLiteral(value: string): string {
  const body = value.replace(/'/g, "''").replace(/\\/g, '\\\\');
  return value.includes('\\') ? `E'${body}'` : `'${body}'`;
}
