/**
 * What the PostgreSQL store's guard, outbox, relay driver, pruner and retry-table
 * driver use of the store: warren's own, never exported from `warren/postgres`.
 */
import type { StoreTables } from '../index.js';
import type { ResolvedStoreOptions } from '../options.js';
import type { PgClient, PgPool, PgQueryResult } from './driver.js';

/** State of one checked-out connection. */
export interface ClientState {
  /** Set when the connection failed while we held it: it must not go back to the pool. */
  broken: Error | undefined;
}

/** The store's own internals that its guard, outbox and pruner use. */
export interface PostgresInternals<C extends PgClient> {
  readonly tables: StoreTables;
  /** NOTIFY channel of the outbox; undefined when `notify` is off. */
  readonly channel: string | undefined;
  /** The channel name, whether or not inserts notify (relays always LISTEN). */
  readonly listenChannel: string;
  readonly isReady: boolean;
  ready(): Promise<PgPool<C>>;
  /** A pooled connection for `fn`, released afterwards (destroyed if it broke). */
  withClient<R>(fn: (client: C, state: ClientState) => Promise<R>, doing: string): Promise<R>;
  /** A connection of its own (the caller releases it), e.g. for LISTEN. */
  connect(doing: string): Promise<C>;
  /**
   * BEGIN, `body`, COMMIT on one connection; rolls back on a throw. `first`, when given,
   * is a statement sent in the same round trip as BEGIN; `body` gets its result.
   */
  transaction<R>(body: (client: C, first: PgQueryResult<unknown> | undefined) => Promise<R>, doing: string, first?: string): Promise<R>;
  /** A query whose outage errors become {@link StoreUnavailableError}. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as PgClient.query
  query<R = any>(client: PgClient, sql: string, values: unknown[] | undefined, doing: string): Promise<PgQueryResult<R>>;
  readonly options: ResolvedStoreOptions;
}

/**
 * Thrown by a transaction body to give up the transaction without waiting on its
 * connection (a timed-out handler's): the connection is discarded instead of rolled back,
 * and `reason` is thrown.
 */
export class AbandonTransaction {
  constructor(
    readonly reason: unknown,
    /** A query may still be running on the connection: cancel it. */
    readonly queryInFlight: boolean,
  ) {}
}
