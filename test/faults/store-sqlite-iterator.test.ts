/**
 * A guarded SQLite handler that times out while it walks a statement's rows with
 * `iterate()` (awaiting between rows, a common pattern) must not wedge the store's
 * connection: an open iterator keeps better-sqlite3's connection "busy executing a
 * query", so the ROLLBACK at the timeout failed (silently), the connection stayed inside
 * the timed-out message's transaction, and every later transaction failed ("busy
 * executing a query", then "cannot start a transaction within a transaction").
 */
import { describe, expect, it } from 'vitest';
import type { TopologyOptions } from '../../src/index.js';
import type { SqliteDatabase } from '../../src/store/sqlite/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { bumpEffect, createEffects, readEffects } from '../../src/store/testing/spec.js';
import { connectWarren, testTopology, waitFor } from '../helpers.js';

describe('SQLite guard: a timed-out handler with an open iterator', () => {
  it('rolls its transaction back and the next messages run and commit', async () => {
    const h = await harness('sqlite');
    const store = h.store({ busyTimeoutMs: 500 });
    await createEffects(h.spec, store);
    await store.transaction((tx) => {
      const db = tx as SqliteDatabase;
      db.exec('CREATE TABLE items (n INTEGER)');
      db.exec('INSERT INTO items VALUES (1), (2), (3)');
    });
    let consumer!: string;
    const topology = testTopology(({ exchange, name }): TopologyOptions => {
      consumer = name('billing');
      return { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 1 } } } };
    });
    const warren = await connectWarren(topology);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let lateError: unknown;
    let iterating = false;
    const c = await warren.consume(
      consumer,
      async (payload: { stuck?: boolean }, ctx) => {
        const tx = ctx.tx as unknown as { prepare(sql: string): { iterate(): Iterable<unknown> } };
        await bumpEffect(h.spec, tx, ctx.messageId as string);
        if (!payload.stuck) return;
        try {
          for (const row of tx.prepare('SELECT n FROM items').iterate()) {
            iterating = true;
            await gate; // ignores its signal, with the iterator open
            void row;
          }
        } catch (error) {
          lateError = error;
        }
      },
      // Long enough for the next message's statement and commit on a busy machine (maxAttempts 1: one timeout parks it).
      { idempotency: store.idempotency(), timeoutMs: 1000 },
    );
    const { messageId: stuckId } = await warren.publish('order.created', { stuck: true });
    await waitFor(() => iterating, 'the stuck handler to open its iterator');
    await waitFor(() => c.stats.parked === 1, 'the stuck message to time out and be parked');
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => c.stats.acked === 1, 'the next message to be handled', 5000);
    release();
    await waitFor(() => lateError !== undefined, 'the stuck handler to resume');
    expect(String((lateError as Error).message)).toMatch(/rolled back/);
    const effects = await readEffects(h.spec, store);
    expect(effects.get(messageId)).toBe(1);
    expect(effects.has(stuckId)).toBe(false);
  });

  it('a handler that returns with an iterator still open commits', async () => {
    const h = await harness('sqlite');
    const store = h.store({ busyTimeoutMs: 500 });
    await createEffects(h.spec, store);
    const guard = store.idempotency();
    await guard.run('m1', 'c', async (tx) => {
      await bumpEffect(h.spec, tx, 'm1');
      const it = (tx as { prepare(sql: string): { iterate(): Iterator<unknown> } }).prepare(`SELECT 1 UNION ALL SELECT 2`).iterate();
      it.next(); // left open
    });
    expect(await guard.run('m2', 'c', async (tx) => void (await bumpEffect(h.spec, tx, 'm2')))).toBe('done');
    const effects = await readEffects(h.spec, store);
    expect([effects.get('m1'), effects.get('m2')]).toEqual([1, 1]);
  });
});
