import { StoreSchemaError } from '../../errors.js';
import type { Logger } from '../../logger.js';
import type { OutboxAddOptions, OutboxFailure, OutboxLag, OutboxReceipt } from '../index.js';
import { outboxRecord, rowOrigin, storedHeaders, type OutboxRow } from '../outbox-message.js';
import type { ClaimOptions, RelayBatch, RelayDriver, RowOutcome } from '../outbox-relay.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteOutbox } from './types.js';
import type { SqliteInternals } from './internals.js';
import { LATEST } from './migrations.js';

interface RowRecord {
  id: number | bigint;
  message_id: string;
  exchange: string | null;
  routing_key: string;
  content: string;
  properties: string;
  attempts: number;
  /** Read by the relay only. */
  origin?: string | null;
}

/**
 * The SQLite outbox. `add` and `addSync` insert a row on the handle you pass, inside
 * whatever transaction is open on it; the row is published once that commits.
 */
export class SqliteOutboxImpl<DB extends SqliteDatabase> implements SqliteOutbox<DB> {
  constructor(private readonly store: SqliteInternals<DB>) {}

  async add(tx: DB, routingKey: string, payload: unknown, options?: OutboxAddOptions): Promise<OutboxReceipt> {
    if (!this.store.isReady) await this.store.ready();
    return this.addSync(tx, routingKey, payload, options);
  }

  /**
   * `add` for synchronous code, e.g. inside better-sqlite3's own `db.transaction(fn)`.
   * The store must have been used (or migrated) before, so the table exists.
   *
   * @example
   * db.transaction(() => {
   *   db.prepare('UPDATE orders SET state = ? WHERE id = ?').run('paid', id);
   *   store.outbox.addSync(db, 'order.paid', { orderId: id });
   * })();
   */
  addSync(tx: DB, routingKey: string, payload: unknown, options?: OutboxAddOptions): OutboxReceipt {
    if (!this.store.isReady) throw new StoreSchemaError('sqlite', 0, LATEST, this.store.tables.migrations);
    const r = outboxRecord(routingKey, payload, options);
    const { lastInsertRowid } = this.store
      .statement(tx, `INSERT INTO ${this.store.tables.outbox} (message_id, exchange, routing_key, content, properties, created_at) VALUES (?, ?, ?, ?, ?, ?)`)
      .run(r.messageId, r.exchange, r.routingKey, r.content, r.properties, Date.now());
    this.store.outboxAdded(tx.inTransaction);
    return { messageId: r.messageId, id: String(lastInsertRowid) };
  }

  lag(): Promise<OutboxLag> {
    const t = this.store.tables.outbox;
    return this.store.read((db) => {
      const p = this.store.statement(db, `SELECT count(*) AS n, min(created_at) AS oldest FROM ${t} WHERE sent_at IS NULL AND failed_at IS NULL`).get() as { n: number; oldest: number | null };
      const f = this.store.statement(db, `SELECT count(*) AS n FROM ${t} WHERE failed_at IS NOT NULL AND sent_at IS NULL`).get() as { n: number };
      return { pending: Number(p.n), oldestPendingAgeMs: p.oldest === null ? 0 : Math.max(0, Date.now() - Number(p.oldest)), failed: Number(f.n) };
    }, 'read the outbox lag');
  }

  failed(limit = 100): Promise<OutboxFailure[]> {
    const t = this.store.tables.outbox;
    return this.store.read(
      (db) =>
        (
          this.store
            .statement(db, `SELECT id, message_id, exchange, routing_key, last_error, failed_at, attempts, content, properties FROM ${t} WHERE failed_at IS NOT NULL AND sent_at IS NULL ORDER BY id LIMIT ?`)
            .all(limit) as Array<{ id: number | bigint; message_id: string; exchange: string | null; routing_key: string; last_error: string | null; failed_at: number; attempts: number; content: string; properties: string }>
        ).map((r) => ({
          id: String(r.id),
          messageId: r.message_id,
          exchange: r.exchange,
          routingKey: r.routing_key,
          error: r.last_error ?? '',
          failedAt: new Date(Number(r.failed_at)),
          attempts: Number(r.attempts),
          headers: storedHeaders(r.properties),
          body: r.content,
        })),
      'list flagged outbox rows',
    );
  }

  release(ids?: readonly string[]): Promise<number> {
    const t = this.store.tables.outbox;
    return this.store.write((db) => {
      const changes =
        ids === undefined
          ? db.prepare(`UPDATE ${t} SET failed_at = NULL WHERE failed_at IS NOT NULL AND sent_at IS NULL`).run().changes
          : db.prepare(`UPDATE ${t} SET failed_at = NULL WHERE failed_at IS NOT NULL AND sent_at IS NULL AND id IN (SELECT value FROM json_each(?))`).run(JSON.stringify(ids.map(Number))).changes;
      if (Number(changes) > 0) this.store.outboxAdded(true);
      return Number(changes);
    }, 'release flagged outbox rows');
  }
}

/**
 * The relay's view of SQLite. Rows are claimed with a lease in one short write
 * transaction, published outside it (so handlers' transactions are not held up by the
 * broker), and marked in a second one. A relay that dies in between leaves its lease to
 * expire; the rows then go out again: a duplicate, never a loss.
 *
 * An expired lease alone does not prove its owner gone: renewing it is a write, and
 * waits for the file's write lock, which another process's transaction may hold for
 * longer than the lease (a guarded handler, up to its `timeoutMs`). When that
 * transaction commits, a relay queued behind it would find the lease expired while the
 * owner still publishes. So a relay takes rows over only once it has seen their lease
 * expired, unchanged, for a further `leaseMs`, measured from its first sighting at a
 * claim (which held the write lock, so the lock was free again right after it): a live
 * owner renews within that time unless the lock stays taken through all of it.
 */
export class SqliteRelayDriver<DB extends SqliteDatabase> implements RelayDriver {
  readonly backend = 'sqlite' as const;
  readonly defaultPollMs = 100;
  /** Rows of other relays whose lease this relay saw expired: the lease, and since when. */
  private expiredSeen = new Map<number, { until: number; since: number }>();

  constructor(private readonly store: SqliteInternals<DB>) {}

  async relayBatch(claim: ClaimOptions, publish: (rows: readonly OutboxRow[]) => Promise<RowOutcome[]>): Promise<RelayBatch | 'busy'> {
    const t = this.store.tables.outbox;
    const rows = await this.store.write((db) => {
      const now = Date.now();
      // Rows another relay holds: a live lease, or one expired for less than `leaseMs`
      // since this relay first saw it so.
      const leased = this.store
        .statement(db, `SELECT id, lease_until FROM ${t} WHERE sent_at IS NULL AND failed_at IS NULL AND lease_owner IS NOT NULL AND lease_owner <> ? AND lease_until IS NOT NULL`)
        .all(claim.relayId) as Array<{ id: number | bigint; lease_until: number | bigint }>;
      const held: number[] = [];
      const seen = new Map<number, { until: number; since: number }>();
      for (const r of leased) {
        const id = Number(r.id);
        const until = Number(r.lease_until);
        if (until > now) {
          held.push(id);
          continue;
        }
        const before = this.expiredSeen.get(id);
        const since = before !== undefined && before.until === until ? before.since : now;
        seen.set(id, { until, since });
        if (now - since < claim.leaseMs) held.push(id);
      }
      this.expiredSeen = seen;
      if (claim.strictOrder && held.length > 0) return 'busy' as const;
      const found = this.store
        .statement(
          db,
          `SELECT id, message_id, exchange, routing_key, content, properties, attempts, origin FROM ${t} WHERE sent_at IS NULL AND failed_at IS NULL AND (lease_until IS NULL OR lease_until <= ? OR lease_owner = ?) AND id NOT IN (SELECT value FROM json_each(?)) ORDER BY id LIMIT ?`,
        )
        .all(now, claim.relayId, JSON.stringify(held), claim.limit) as RowRecord[];
      const taken = found.filter((r) => seen.has(Number(r.id)));
      if (taken.length > 0) claim.logger.warn('outbox relay takes over rows whose lease expired and was not renewed for another leaseMs (their relay stopped); they go out again', { relayId: claim.relayId, rows: taken.length });
      if (found.length > 0) {
        this.store
          .statement(db, `UPDATE ${t} SET lease_owner = ?, lease_until = ? WHERE id IN (SELECT value FROM json_each(?))`)
          .run(claim.relayId, now + claim.leaseMs, JSON.stringify(found.map((r) => Number(r.id))));
      }
      return found.map(
        (r): OutboxRow => ({ id: String(r.id), messageId: r.message_id, exchange: r.exchange, routingKey: r.routing_key, content: r.content, properties: r.properties, attempts: Number(r.attempts), origin: rowOrigin(r.origin) }),
      );
    }, 'claim outbox rows');
    if (rows === 'busy') return 'busy';
    if (rows.length === 0) return { outcomes: [], heldBack: 0 };
    // The lease is renewed until the rows are marked, not only while they are sent.
    const outcomes = await this.leased(claim, rows, async () => {
      const outcomes = await publish(rows);
      await this.mark(outcomes);
      return outcomes;
    });
    return { outcomes, heldBack: 0 };
  }

  private mark(outcomes: readonly RowOutcome[]): Promise<void> {
    const t = this.store.tables.outbox;
    return this.store.write((db) => {
      const now = Date.now();
      const sent = this.store.statement(db, `UPDATE ${t} SET sent_at = ?, lease_owner = NULL, lease_until = NULL WHERE id = ?`);
      const flagged = this.store.statement(db, `UPDATE ${t} SET failed_at = ?, last_error = ?, attempts = attempts + 1, lease_owner = NULL, lease_until = NULL WHERE id = ?`);
      const failed = this.store.statement(db, `UPDATE ${t} SET last_error = ?, attempts = attempts + 1, lease_owner = NULL, lease_until = NULL WHERE id = ?`);
      for (const o of outcomes) {
        const id = Number(o.id);
        if (o.status === 'sent') sent.run(now, id);
        else if (o.status === 'flagged') flagged.run(now, o.error.slice(0, 2000), id);
        else failed.run(o.error.slice(0, 2000), id);
      }
    }, 'mark outbox rows');
  }

  /**
   * Runs `work` (publish, then mark) on claimed rows while renewing their lease every third of it, so the lease
   * outlives the publish however long that takes (a confirm can take the publisher's
   * whole `confirmTimeoutMs`, after a reconnect and a wait for a slot): another relay
   * never takes rows over while they are still being sent. Only a relay that stops
   * renewing (killed, or its event loop frozen past the lease) lets them go.
   */
  private async leased<R>(claim: ClaimOptions, rows: readonly OutboxRow[], work: () => Promise<R>): Promise<R> {
    const t = this.store.tables.outbox;
    const ids = JSON.stringify(rows.map((r) => Number(r.id)));
    let timer: NodeJS.Timeout | undefined;
    let done = false;
    const renew = async (): Promise<void> => {
      try {
        const changes = await this.store.write(
          (db) =>
            Number(
              this.store
                .statement(db, `UPDATE ${t} SET lease_until = ? WHERE lease_owner = ? AND sent_at IS NULL AND id IN (SELECT value FROM json_each(?))`)
                .run(Date.now() + claim.leaseMs, claim.relayId, ids).changes,
            ),
          'renew the outbox lease',
        );
        if (changes < rows.length && !done) claim.logger.warn('outbox relay lost the lease on rows it is publishing (its renewals came too late); another relay may send them too', { relayId: claim.relayId, rows: rows.length, renewed: changes });
      } catch (error) {
        claim.logger.warn('outbox relay could not renew its lease; trying again', { relayId: claim.relayId, error: error instanceof Error ? error.message : String(error) });
      }
      if (!done) schedule();
    };
    const schedule = () => {
      timer = setTimeout(() => void renew(), Math.max(1, Math.floor(claim.leaseMs / 3)));
    };
    schedule();
    try {
      return await work();
    } finally {
      done = true;
      clearTimeout(timer);
    }
  }

  lag(): Promise<OutboxLag> {
    return new SqliteOutboxImpl<DB>(this.store).lag();
  }

  async subscribe(wake: () => void, _logger: Logger): Promise<() => Promise<void>> {
    this.store.events.on('outbox', wake);
    return async () => {
      this.store.events.off('outbox', wake);
    };
  }
}
