import { backoffDelay } from '../../connection/index.js';
import type { Logger } from '../../logger.js';
import type { Outbox, OutboxAddOptions, OutboxFailure, OutboxLag, OutboxReceipt } from '../index.js';
import { outboxRecord, rowOrigin, storedHeaders, type OutboxRow } from '../outbox-message.js';
import type { ClaimOptions, RelayBatch, RelayDriver, RowOutcome } from '../outbox-relay.js';
import type { PgClient, PgNotification } from './driver.js';
import type { PostgresInternals } from './internals.js';

/**
 * The PostgreSQL outbox. `add` inserts on the client you pass, inside your transaction,
 * and (unless `notify: false`) queues a NOTIFY that PostgreSQL delivers at commit.
 */
export class PostgresOutbox<C extends PgClient> implements Outbox<C> {
  constructor(private readonly store: PostgresInternals<C>) {}

  async add(tx: C, routingKey: string, payload: unknown, options?: OutboxAddOptions): Promise<OutboxReceipt> {
    if (!this.store.isReady) await this.store.ready();
    const r = outboxRecord(routingKey, payload, options);
    const t = this.store.tables.outbox;
    // The transaction takes its id (pg_current_xact_id) before the row takes its id from
    // the sequence: a relay that sees a gap in row ids then finds the gap's transaction
    // among those in progress, and holds the rows behind it until that one has ended.
    // A one-time filter, evaluated before the row's projection (and its nextval): an
    // unused subquery column would be planned away and the id taken first.
    const insert = `INSERT INTO ${t} (message_id, exchange, routing_key, content, properties)
      SELECT $1, $2, $3, $4, $5::jsonb WHERE pg_current_xact_id() IS NOT NULL RETURNING id::text AS id`;
    const values: unknown[] = [r.messageId, r.exchange, r.routingKey, r.content, r.properties];
    // One round trip: the insert and its notification in one statement.
    const sql = this.store.channel === undefined ? insert : `WITH ins AS (${insert}) SELECT ins.id, pg_notify($6, '') FROM ins`;
    if (this.store.channel !== undefined) values.push(this.store.channel);
    const { rows } = await tx.query<{ id: string }>(sql, values);
    return { messageId: r.messageId, id: String(rows[0]?.id) };
  }

  lag(): Promise<OutboxLag> {
    const t = this.store.tables.outbox;
    const sql = `SELECT count(*) FILTER (WHERE failed_at IS NULL)::float8 AS pending,
        coalesce(extract(epoch FROM clock_timestamp() - min(created_at) FILTER (WHERE failed_at IS NULL)) * 1000, 0)::float8 AS age,
        count(*) FILTER (WHERE failed_at IS NOT NULL)::float8 AS failed
      FROM ${t} WHERE sent_at IS NULL`;
    return this.store.withClient(async (c) => {
      const row = (await this.store.query<{ pending: number; age: number; failed: number }>(c, sql, [], 'read the outbox lag')).rows[0];
      return { pending: Number(row?.pending ?? 0), oldestPendingAgeMs: Math.max(0, Math.round(Number(row?.age ?? 0))), failed: Number(row?.failed ?? 0) };
    }, 'read the outbox lag');
  }

  failed(limit = 100): Promise<OutboxFailure[]> {
    const t = this.store.tables.outbox;
    return this.store.withClient(async (c) => {
      const { rows } = await this.store.query<{ id: string; message_id: string; exchange: string | null; routing_key: string; last_error: string | null; failed_at: Date; attempts: number; content: string; properties: string }>(
        c,
        `SELECT o.id::text AS id, o.message_id, o.exchange, o.routing_key, o.last_error, o.failed_at, o.attempts, o.content, o.properties::text AS properties FROM ${t} AS o WHERE o.failed_at IS NOT NULL AND o.sent_at IS NULL ORDER BY o.id LIMIT $1`,
        [limit],
        'list flagged outbox rows',
      );
      return rows.map((r) => ({ id: r.id, messageId: r.message_id, exchange: r.exchange, routingKey: r.routing_key, error: r.last_error ?? '', failedAt: new Date(r.failed_at), attempts: Number(r.attempts), headers: storedHeaders(r.properties), body: r.content }));
    }, 'list flagged outbox rows');
  }

  release(ids?: readonly string[]): Promise<number> {
    const t = this.store.tables.outbox;
    const notify = this.store.channel === undefined ? '' : `, n AS (SELECT pg_notify('${this.store.channel.replace(/'/g, "''")}', '') WHERE EXISTS (SELECT 1 FROM up))`;
    const where = ids === undefined ? '' : ' AND id = ANY($1::bigint[])';
    const sql = `WITH up AS (UPDATE ${t} SET failed_at = NULL WHERE failed_at IS NOT NULL AND sent_at IS NULL${where} RETURNING id)${notify} SELECT count(*)::float8 AS n FROM up`;
    return this.store.withClient(async (c) => Number((await this.store.query<{ n: number }>(c, sql, ids === undefined ? [] : [ids], 'release flagged outbox rows')).rows[0]?.n ?? 0), 'release flagged outbox rows');
  }
}

interface RowRecord {
  id: string;
  message_id: string;
  exchange: string | null;
  routing_key: string;
  content: string;
  properties: string;
  attempts: number;
  /** Read by the relay only. */
  origin?: string | null;
}

interface ClaimRecord extends RowRecord {
  /** Row ids missing between the last row before the batch and its last row. */
  missing: string[] | null;
  /** The claim's snapshot: every transaction below `xmin` has ended; `xmax` is the next id. */
  xmin: string;
  xmax: string;
}

/** When a missing row id was first seen, and which transactions could still commit it. */
interface Gap {
  /** Transactions with an id below this were the only ones that could hold the row id. */
  readonly xmax: bigint;
  readonly since: number;
  warned: boolean;
}

/** With nothing committed below a batch, how far back to look for rows that may still commit. */
const LOOKBACK = 1000;

/**
 * The relay's view of PostgreSQL. One transaction per batch: claim rows with
 * `FOR UPDATE SKIP LOCKED` (with `strictOrder`, first a transaction-scoped advisory lock
 * so one relay at a time publishes), publish them, mark them, COMMIT. A relay that dies
 * before COMMIT loses its locks with its connection, and the rows go out again.
 *
 * Strict order over concurrent writers: row ids come from a sequence at INSERT, rows
 * become visible at COMMIT, so a row id below a visible row can still be missing because
 * its transaction has not committed yet. The claim reads, in the same snapshot, which ids
 * are missing below its last row. A missing id belongs to a transaction that was in
 * progress when the relay first saw the gap (an outbox insert takes its transaction id
 * before its row id), so once every transaction below that snapshot's `xmax` has ended
 * (`xmin` has passed it) the id either appeared or never will (rolled back). Until then,
 * and at most `gapTimeoutMs`, the rows behind it are held back.
 */
export class PostgresRelayDriver<C extends PgClient> implements RelayDriver {
  readonly backend = 'postgres' as const;
  readonly defaultPollMs = 1000;

  /** Row ids this relay saw missing below rows it claimed, by id. */
  private gaps = new Map<string, Gap>();

  constructor(private readonly store: PostgresInternals<C>) {}

  relayBatch(claim: ClaimOptions, publish: (rows: readonly OutboxRow[]) => Promise<RowOutcome[]>): Promise<RelayBatch | 'busy'> {
    const t = this.store.tables.outbox;
    return this.store.transaction(async (client) => {
      const q = <R>(sql: string, values: unknown[]) => this.store.query<R>(client, sql, values, 'relay outbox rows');
      let rows: RowRecord[];
      let heldBack = 0;
      if (claim.strictOrder) {
        const lock = await q<{ ok: boolean }>('SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok', [`warren.relay:${t}`]);
        if (!lock.rows[0]?.ok) return 'busy' as const;
        // One statement, so the claim, the gaps and the snapshot agree.
        const claimed = (
          await q<ClaimRecord>(
            `WITH claimed AS (
               SELECT o.id, o.message_id, o.exchange, o.routing_key, o.content, o.properties::text AS properties, o.attempts, o.origin FROM ${t} AS o
               WHERE o.sent_at IS NULL AND o.failed_at IS NULL ORDER BY o.id LIMIT $1 FOR UPDATE SKIP LOCKED),
             bounds AS (SELECT min(id) AS first, max(id) AS last FROM claimed),
             span AS (SELECT coalesce((SELECT max(o.id) FROM ${t} AS o WHERE o.id < b.first), greatest(b.first - $2, 0)) AS lo, b.last FROM bounds AS b)
             SELECT c.id::text AS id, c.message_id, c.exchange, c.routing_key, c.content, c.properties, c.attempts, c.origin,
               (SELECT array_agg(g::text ORDER BY g) FROM span, generate_series(span.lo + 1, span.last) AS g
                 WHERE NOT EXISTS (SELECT 1 FROM ${t} AS o WHERE o.id = g)) AS missing,
               pg_snapshot_xmin(pg_current_snapshot())::text AS xmin, pg_snapshot_xmax(pg_current_snapshot())::text AS xmax
             FROM claimed AS c ORDER BY c.id`,
            [claim.limit, LOOKBACK + 1],
          )
        ).rows;
        const ready = this.beforeGap(claimed, claim);
        heldBack = claimed.length - ready;
        rows = claimed.slice(0, ready);
      } else {
        rows = (
          await q<RowRecord>(
            // Order by the bigint column, not the text alias (which would sort '10' before '2').
            `SELECT o.id::text AS id, o.message_id, o.exchange, o.routing_key, o.content, o.properties::text AS properties, o.attempts, o.origin FROM ${t} AS o
             WHERE o.sent_at IS NULL AND o.failed_at IS NULL ORDER BY o.id LIMIT $1 FOR UPDATE SKIP LOCKED`,
            [claim.limit],
          )
        ).rows;
      }
      if (rows.length === 0) return { outcomes: [], heldBack };
      const outcomes = await publish(
        rows.map((r): OutboxRow => ({ id: r.id, messageId: r.message_id, exchange: r.exchange, routingKey: r.routing_key, content: r.content, properties: r.properties, attempts: Number(r.attempts), origin: rowOrigin(r.origin) })),
      );
      const sent = outcomes.filter((o) => o.status === 'sent').map((o) => o.id);
      if (sent.length > 0) await q(`UPDATE ${t} SET sent_at = clock_timestamp() WHERE id = ANY($1::bigint[])`, [sent]);
      for (const status of ['flagged', 'failed'] as const) {
        const rest = outcomes.filter((o): o is Extract<RowOutcome, { status: typeof status }> => o.status === status);
        if (rest.length === 0) continue;
        await q(
          `UPDATE ${t} AS o SET attempts = o.attempts + 1, last_error = u.error${status === 'flagged' ? ', failed_at = clock_timestamp()' : ''}
           FROM unnest($1::bigint[], $2::text[]) AS u(id, error) WHERE o.id = u.id`,
          [rest.map((o) => o.id), rest.map((o) => o.error.slice(0, 2000))],
        );
      }
      return { outcomes, heldBack };
    }, 'relay outbox rows');
  }

  /**
   * How many of the claimed rows (in id order) may go out now: those before the first
   * missing id whose transaction may still commit. A missing id is settled once every
   * transaction that was in progress when it was first seen has ended, or after
   * `gapTimeoutMs` (logged).
   */
  private beforeGap(claimed: readonly ClaimRecord[], claim: ClaimOptions): number {
    const head = claimed[0];
    if (head === undefined || head.missing === null || head.missing.length === 0) {
      this.gaps.clear();
      return claimed.length;
    }
    const xmin = BigInt(head.xmin);
    const xmax = BigInt(head.xmax);
    const now = Date.now();
    const seen = new Map<string, Gap>();
    let open: string | undefined;
    for (const id of head.missing) {
      const gap = this.gaps.get(id) ?? { xmax, since: now, warned: false };
      seen.set(id, gap);
      if (open !== undefined || xmin >= gap.xmax) continue; // its transaction has ended: it rolled back
      if (now - gap.since >= claim.gapTimeoutMs) {
        if (!gap.warned) {
          gap.warned = true;
          claim.logger.warn('outbox relay stopped waiting for a row whose transaction is still open; the rows after it go out first, and it goes out late if it commits', { missingId: id, waitedMs: now - gap.since, gapTimeoutMs: claim.gapTimeoutMs });
        }
        continue;
      }
      open = id;
    }
    this.gaps = seen;
    if (open === undefined) return claimed.length;
    const limit = BigInt(open);
    const index = claimed.findIndex((r) => BigInt(r.id) > limit);
    return index === -1 ? claimed.length : index;
  }

  lag(): Promise<OutboxLag> {
    return new PostgresOutbox<C>(this.store).lag();
  }

  /**
   * LISTENs on a connection of its own, reconnecting with backoff when it drops; wakes
   * the relay after each (re)connect to catch up on what it missed.
   */
  async subscribe(wake: () => void, logger: Logger): Promise<() => Promise<void>> {
    const channel = this.store.listenChannel;
    let current: ((error?: Error) => void) | undefined;
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let attempt = 0;
    const onNotification = (message: PgNotification) => {
      if (message.channel === channel) wake();
    };
    const schedule = () => {
      if (stopped || timer) return;
      attempt++;
      timer = setTimeout(() => {
        timer = undefined;
        void connect();
      }, backoffDelay(attempt, 100, 5000));
      timer.unref();
    };
    const connect = async (): Promise<void> => {
      if (stopped) return;
      let release: ((error?: Error) => void) | undefined;
      try {
        const client = await this.store.connect('listen for outbox rows');
        let released = false;
        const onError = (error: Error) => {
          logger.warn('outbox relay lost its LISTEN connection; reconnecting (polling meanwhile)', { error: error.message });
          release?.(error);
          schedule();
        };
        release = (error?: Error) => {
          if (released) return;
          released = true;
          client.removeListener('notification', onNotification);
          client.removeListener('error', onError);
          if (current === release) current = undefined;
          // A LISTENing connection never goes back to the pool.
          client.release(error ?? true);
        };
        client.on('error', onError);
        client.on('notification', onNotification);
        current = release;
        await client.query(`LISTEN "${channel.replace(/"/g, '""')}"`);
        if (stopped) {
          release();
          return;
        }
        attempt = 0;
        wake();
      } catch (error) {
        logger.warn('outbox relay could not LISTEN; polling, and trying again', { error: error instanceof Error ? error.message : String(error) });
        release?.(error instanceof Error ? error : new Error(String(error)));
        schedule();
      }
    };
    await connect();
    return async () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      current?.();
    };
  }
}
