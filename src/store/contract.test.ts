/**
 * The store contract, run over every backend against a real database: migrations, the
 * idempotency guard, the outbox table and pruning. Tests with a broker are in
 * consumer.test.ts and relay.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { StoreSchemaError, StoreUnavailableError } from '../errors.js';
import { BACKENDS, harness } from './testing/harness.js';
import { bumpEffect, createEffects, exec, readEffects } from './testing/spec.js';
import { spawnChild } from './testing/spawn.js';
import { sleep } from './options.js';
import { StoreBusyError } from './transaction.js';

describe.each(BACKENDS)('store contract: %s', (backend) => {
  describe('consumer control', () => {
    it('keeps one hand pause per consumer: the first reason stays, a resume says who', async () => {
      const h = await harness(backend);
      const store = h.store();
      expect(await store.control.pause('shipping', 'carrier maintenance', 'alice')).toBe(true);
      expect(await store.control.pause('shipping', 'another reason', 'bob')).toBe(false);
      const [row] = await store.control.read('shipping');
      expect(row).toMatchObject({ consumer: 'shipping', paused: true, reason: 'carrier maintenance', actor: 'alice', resumedBy: undefined });
      expect(await h.store().control.read('billing')).toEqual([]);
      expect(await store.control.resume('shipping', 'bob')).toBe(true);
      expect(await store.control.resume('shipping', 'bob')).toBe(false);
      expect((await h.store().control.read())[0]).toMatchObject({ paused: false, resumedBy: 'bob' });
      expect(await store.control.pause('shipping', 'again', 'carol')).toBe(true);
      expect((await store.control.read('shipping'))[0]).toMatchObject({ paused: true, reason: 'again', actor: 'carol', resumedBy: undefined });
      await expect(store.control.pause('shipping', '', 'alice')).rejects.toThrow(/reason/);
    });
  });

  describe('shared breakers', () => {
    it('keeps the first opening until a close; an opening older than the last close is stale', async () => {
      const h = await harness(backend);
      const store = h.store();
      const t0 = new Date(Date.now() - 10_000);
      expect(await store.breakers.read('shipping')).toEqual([]);
      expect(await store.breakers.open('shipping', '5 transient failures in a row', 'a:1', t0)).toBe(true);
      expect(await h.store().breakers.open('shipping', 'another cause', 'b:2', new Date())).toBe(false);
      expect((await h.store().breakers.read('shipping'))[0]).toMatchObject({ consumer: 'shipping', open: true, reason: '5 transient failures in a row', openedBy: 'a:1', since: t0, closedAt: undefined });
      expect(await store.breakers.close('shipping', 'b:2')).toBe(true);
      expect(await store.breakers.close('shipping', 'b:2')).toBe(false);
      const [closed] = await store.breakers.read();
      expect(closed).toMatchObject({ open: false, closedBy: 'b:2' });
      // An opening from before that close (a process that failed while another's probe succeeded) is stale.
      expect(await store.breakers.open('shipping', 'late', 'a:1', new Date(closed!.closedAt!.getTime() - 1))).toBe(false);
      expect(await store.breakers.open('shipping', 'down again', 'c:3', new Date(closed!.closedAt!.getTime() + 1))).toBe(true);
      expect((await store.breakers.read('shipping'))[0]).toMatchObject({ open: true, reason: 'down again', openedBy: 'c:3', closedAt: undefined, closedBy: undefined });
      expect((await store.breakers.open('x'.repeat(201), 'r', 'a:1', new Date()).catch((e: Error) => e.message))).toMatch(/consumer name/);
      expect(await store.breakers.open('billing', 'y'.repeat(800), 'a:1', new Date())).toBe(true);
      expect((await store.breakers.read('billing'))[0]?.reason).toHaveLength(500);
    });
  });

  describe('migrations', () => {
    it('applies the schema once; running again changes nothing', async () => {
      const h = await harness(backend);
      const store = h.store();
      expect(await store.migrate()).toEqual({ applied: [1, 2, 3, 4, 5, 6, 7], version: 7 });
      expect(await store.migrate()).toEqual({ applied: [], version: 7 });
      expect(await h.store().migrate()).toEqual({ applied: [], version: 7 });
    });

    it('is safe when two stores migrate at the same moment: one applies, the other finds it done', async () => {
      const h = await harness(backend);
      const reports = await Promise.all([h.store().migrate(), h.store().migrate(), h.store().migrate()]);
      expect(reports.flatMap((r) => r.applied)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(reports.every((r) => r.version === 7)).toBe(true);
    });

    it('is safe when two processes start at the same moment', async () => {
      const h = await harness(backend);
      const env = { WARREN_STORE: JSON.stringify({ spec: h.spec }), WARREN_CHILD_ROLE: 'migrate', WARREN_START_AT: String(Date.now() + 2500) };
      const children = [spawnChild(env), spawnChild(env)];
      const lines = await Promise.all(children.map((c) => c.line('migrated ')));
      const reports = lines.map((l) => JSON.parse(l.slice('migrated '.length)) as { applied: number[]; version: number });
      expect(reports.flatMap((r) => r.applied)).toEqual([1, 2, 3, 4, 5, 6, 7]);
      expect(reports.map((r) => r.version)).toEqual([7, 7]);
      expect(await Promise.all(children.map((c) => c.exited))).toEqual([0, 0]);
    });

    it('names its tables with the prefix', async () => {
      const h = await harness(backend);
      const store = h.store();
      await store.migrate();
      const p = h.spec.tablePrefix;
      expect(store.tables.processed).toContain(`${p}processed`);
      expect(store.tables.outbox).toContain(`${p}outbox`);
      expect(store.tables.retry).toContain(`${p}retry`);
      expect(store.tables.archive).toContain(`${p}archive`);
      const count = await store.transaction((tx) => exec(h.spec, tx, `SELECT count(*) AS n FROM ${store.tables.migrations}`));
      expect(Number((count[0] as { n: number }).n)).toBe(7);
      // Every archive table is there, under the prefix.
      for (const t of [store.tables.archive, store.tables.archivePayload, store.tables.archiveHeaders, store.tables.archiveGroups, store.tables.control, store.tables.breakers]) {
        expect(await store.transaction((tx) => exec(h.spec, tx, `SELECT count(*) AS n FROM ${t}`))).toEqual([{ n: backend === 'sqlite' ? 0 : '0' }]);
      }
    });

    it('upgrades a database made with the first schema, keeping its outbox rows', async () => {
      const h = await harness(backend);
      const old = h.store();
      await old.migrate();
      await old.transaction((tx) => old.outbox.add(tx, 'order.created', { n: 1 }));
      // Back to schema 1, as an older version of warren left it.
      const t = old.tables;
      await old.transaction(async (tx) => {
        for (const sql of [`DROP TABLE ${t.retry}`, `DROP TABLE ${t.retryHolds}`, `DROP TABLE ${t.retryAudit}`, `ALTER TABLE ${t.outbox} DROP COLUMN origin`, `DROP TABLE ${t.actions}`, `DROP TABLE ${t.archive}`, `DROP TABLE ${t.archivePayload}`, `DROP TABLE ${t.archiveHeaders}`, `DROP TABLE ${t.archiveGroups}`, ...(backend === 'sqlite' ? [`DROP TABLE ${t.archiveSearch}`] : []), `DROP TABLE ${t.control}`, `DROP TABLE ${t.breakers}`, `DELETE FROM ${t.migrations} WHERE version >= 2`]) {
          await exec(h.spec, tx, sql);
        }
      });
      await old.close();
      const store = h.store();
      expect(await store.migrate()).toEqual({ applied: [2, 3, 4, 5, 6, 7], version: 7 });
      expect((await store.outbox.lag()).pending).toBe(1);
      expect(await store.retryTable.count()).toBe(0);
    });

    it('migrates on first use by default', async () => {
      const h = await harness(backend);
      const store = h.store();
      expect(await store.idempotency().run('m-1', 'c', async () => undefined)).toBe('done');
    });

    it('with migrate: false, refuses to run on a schema that is behind, and says how to fix it', async () => {
      const h = await harness(backend);
      const store = h.store({ migrate: false });
      const error = await store.idempotency().run('m-1', 'c', async () => undefined).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreSchemaError);
      expect((error as StoreSchemaError).message).toMatch(/store\.migrate\(\)/);
      await store.migrate();
      expect(await store.idempotency().run('m-1', 'c', async () => undefined)).toBe('done');
    });
  });

  describe('idempotency guard', () => {
    it('runs the work with the transaction, commits it with the marker, and skips a duplicate', async () => {
      const h = await harness(backend);
      const store = h.store();
      await createEffects(h.spec, store);
      const guard = store.idempotency();
      let runs = 0;
      const work = async (tx: unknown) => {
        runs++;
        await bumpEffect(h.spec, tx, 'k');
      };
      expect(await guard.run('m-1', 'billing', work)).toBe('done');
      expect(await guard.run('m-1', 'billing', work)).toBe('duplicate');
      expect(runs).toBe(1);
      expect((await readEffects(h.spec, store)).get('k')).toBe(1);
      expect(guard.stats).toEqual({ done: 1, duplicate: 1, failed: 0, unavailable: 0, busy: 0 });
      const markers = await store.transaction((tx) => exec(h.spec, tx, `SELECT message_id, consumer, processed_at FROM ${store.tables.processed}`));
      expect(markers).toHaveLength(1);
      expect(markers[0]).toMatchObject({ message_id: 'm-1', consumer: 'billing' });
    });

    it('takes any message id and consumer name as data, quotes and backslashes included', async () => {
      const h = await harness(backend);
      const store = h.store();
      const guard = store.idempotency();
      const id = "it's a \\' test'); DROP TABLE x; --";
      expect(await guard.run(id, "o'neil\\", async () => undefined)).toBe('done');
      expect(await guard.run(id, "o'neil\\", async () => undefined)).toBe('duplicate');
      expect(await guard.run(`${id} `, "o'neil\\", async () => undefined)).toBe('done');
      // Stored exactly as given.
      const rows = await store.transaction((tx) => exec(h.spec, tx, `SELECT consumer FROM ${store.tables.processed} WHERE message_id = ?`, [id]));
      expect(rows).toEqual([{ consumer: "o'neil\\" }]);
    });

    it('keys on (message id, consumer): another consumer runs the same message', async () => {
      const h = await harness(backend);
      const guard = h.store().idempotency();
      expect(await guard.run('m-1', 'billing', async () => undefined)).toBe('done');
      expect(await guard.run('m-1', 'email', async () => undefined)).toBe('done');
      expect(await guard.run('m-2', 'billing', async () => undefined)).toBe('done');
    });

    it('rolls the marker back with the work when the work fails, so the retry runs it again and the effect happens once', async () => {
      const h = await harness(backend);
      const store = h.store();
      await createEffects(h.spec, store);
      const guard = store.idempotency();
      const boom = new Error('payment provider said no');
      const failing = async (tx: unknown) => {
        await bumpEffect(h.spec, tx, 'k');
        throw boom;
      };
      await expect(guard.run('m-1', 'billing', failing)).rejects.toBe(boom);
      expect((await readEffects(h.spec, store)).get('k')).toBeUndefined();
      expect(await guard.run('m-1', 'billing', (tx) => bumpEffect(h.spec, tx, 'k').then(() => undefined))).toBe('done');
      expect((await readEffects(h.spec, store)).get('k')).toBe(1);
      expect(guard.stats).toMatchObject({ done: 1, failed: 1 });
    });

    it('passes a handler error through unchanged (it is the handler failure, not an outage)', async () => {
      const h = await harness(backend);
      const store = h.store();
      const guard = store.idempotency();
      const sqlError = await guard.run('m-1', 'c', (tx) => exec(h.spec, tx, 'SELECT * FROM no_such_table').then(() => undefined)).catch((e: unknown) => e);
      expect(sqlError).not.toBeInstanceOf(StoreUnavailableError);
      expect(String(sqlError)).toMatch(/no_such_table/);
      expect(await guard.run('m-1', 'c', async () => undefined)).toBe('done');
    });

    it('runs the work once when the same message arrives on two connections at the same moment', async () => {
      const h = await harness(backend);
      const a = h.store();
      const b = h.store();
      await createEffects(h.spec, a);
      let runs = 0;
      const work = async (tx: unknown) => {
        runs++;
        await bumpEffect(h.spec, tx, 'k');
        await sleep(50);
      };
      // A copy that overlaps the other is refused as busy (the consumer holds it and tries
      // again): tried again here the same way, once the other has ended.
      const run = async (guard: ReturnType<typeof a.idempotency>): Promise<'done' | 'duplicate'> => {
        for (;;) {
          try {
            return await guard.run('m-1', 'c', work);
          } catch (error) {
            if (!(error instanceof StoreBusyError)) throw error;
            await sleep(20);
          }
        }
      };
      const results = await Promise.all([run(a.idempotency()), run(b.idempotency())]);
      expect(results.sort()).toEqual(['done', 'duplicate']);
      expect(runs).toBe(1);
      expect((await readEffects(h.spec, a)).get('k')).toBe(1);
    });

    it('reports StoreUnavailableError while the database is down, and works again once it is back', async () => {
      const h = await harness(backend);
      const { store, down, up } = await h.outage();
      await createEffects(h.spec, store);
      const guard = store.idempotency();
      expect(await guard.run('m-0', 'c', async () => undefined)).toBe('done');
      await down();
      let ran = false;
      const error = await guard.run('m-1', 'c', async () => void (ran = true)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as StoreUnavailableError).code).toBe('STORE_UNAVAILABLE');
      expect(ran).toBe(false);
      expect(guard.stats.unavailable).toBe(1);
      await up();
      expect(await guard.run('m-1', 'c', (tx) => bumpEffect(h.spec, tx, 'k').then(() => undefined))).toBe('done');
      expect((await readEffects(h.spec, store)).get('k')).toBe(1);
    });

    it('runs transactions one after another and commits each', async () => {
      const h = await harness(backend);
      const store = h.store();
      await createEffects(h.spec, store);
      const guard = store.idempotency();
      const ids = Array.from({ length: 40 }, (_, i) => `m-${i}`);
      const results = await Promise.all(ids.map((id) => guard.run(id, 'c', async (tx) => {
        await sleep(1);
        await bumpEffect(h.spec, tx, id);
      })));
      expect(results.every((r) => r === 'done')).toBe(true);
      expect((await readEffects(h.spec, store)).size).toBe(40);
    });
  });

  describe('transaction', () => {
    it('commits on return and rolls back on throw', async () => {
      const h = await harness(backend);
      const store = h.store();
      await createEffects(h.spec, store);
      expect(await store.transaction(async (tx) => (await bumpEffect(h.spec, tx, 'a'), 42))).toBe(42);
      await expect(store.transaction(async (tx) => {
        await bumpEffect(h.spec, tx, 'b');
        throw new Error('no');
      })).rejects.toThrow('no');
      expect([...(await readEffects(h.spec, store)).keys()]).toEqual(['a']);
    });
  });

  describe('outbox table', () => {
    it('adds a row inside the transaction: it exists if the transaction commits, not if it rolls back', async () => {
      const h = await harness(backend);
      const store = h.store();
      const receipt = await store.transaction((tx) => store.outbox.add(tx, 'order.paid', { orderId: 1 }));
      expect(receipt.messageId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7/);
      await store.transaction(async (tx) => {
        await store.outbox.add(tx, 'order.paid', { orderId: 2 });
        return Promise.reject(new Error('rolled back'));
      }).catch(() => undefined);
      const lag = await store.outbox.lag();
      expect(lag.pending).toBe(1);
      expect(lag.failed).toBe(0);
      const rows = await store.transaction((tx) => exec(h.spec, tx, `SELECT message_id, routing_key, content FROM ${store.tables.outbox}`));
      expect(rows).toEqual([{ message_id: receipt.messageId, routing_key: 'order.paid', content: '{"orderId":1}' }]);
    });

    it('rolls back with a handler that fails after adding, so nothing is published for failed work', async () => {
      const h = await harness(backend);
      const store = h.store();
      const guard = store.idempotency();
      await guard.run('m-1', 'c', async (tx) => {
        await store.outbox.add(tx, 'x.y', {});
        throw new Error('handler failed');
      }).catch(() => undefined);
      expect((await store.outbox.lag()).pending).toBe(0);
      await guard.run('m-1', 'c', async (tx) => void (await store.outbox.add(tx, 'x.y', {})));
      expect((await store.outbox.lag()).pending).toBe(1);
    });

    it('reports the lag: pending rows and the age of the oldest', async () => {
      const h = await harness(backend);
      const store = h.store();
      expect(await store.outbox.lag()).toEqual({ pending: 0, oldestPendingAgeMs: 0, failed: 0 });
      await store.transaction((tx) => store.outbox.add(tx, 'a.b', 1));
      await sleep(60);
      await store.transaction((tx) => store.outbox.add(tx, 'a.b', 2));
      const lag = await store.outbox.lag();
      expect(lag.pending).toBe(2);
      expect(lag.oldestPendingAgeMs).toBeGreaterThanOrEqual(40);
      expect(lag.oldestPendingAgeMs).toBeLessThan(10_000);
    });

    it('refuses what the publisher refuses: an empty routing key, a payload that is not JSON', async () => {
      const h = await harness(backend);
      const store = h.store();
      await expect(store.transaction((tx) => store.outbox.add(tx, '', {}))).rejects.toMatchObject({ code: 'INVALID_OPTION', option: 'routingKey' });
      await expect(store.transaction((tx) => store.outbox.add(tx, 'a.b', 10n))).rejects.toMatchObject({ code: 'INVALID_OPTION', option: 'payload' });
      expect((await store.outbox.lag()).pending).toBe(0);
    });
  });

  describe('pruning', () => {
    it('deletes markers older than the retention in batches, and keeps newer ones', async () => {
      const h = await harness(backend);
      const store = h.store();
      await store.migrate();
      const old = h.backend === 'sqlite' ? Date.now() - 8 * 86_400_000 : new Date(Date.now() - 8 * 86_400_000);
      await store.transaction(async (tx) => {
        for (let i = 0; i < 25; i++) await exec(h.spec, tx, `INSERT INTO ${store.tables.processed} (message_id, consumer, processed_at) VALUES (?, 'c', ?)`, [`old-${i}`, old]);
      });
      const guard = store.idempotency();
      await guard.run('new-1', 'c', async () => undefined);
      const result = await store.prune({ batchSize: 10 });
      expect(result.markers).toBe(25);
      // 25 markers in batches of 10: 10, 10, 5; then one empty outbox batch and one empty history batch.
      expect(result.batches).toBe(5);
      expect(await guard.run('new-1', 'c', async () => undefined)).toBe('duplicate');
      expect(await guard.run('old-1', 'c', async () => undefined)).toBe('done');
    });

    it('deletes retry-table history past its own retention (90 days unless set)', async () => {
      const h = await harness(backend);
      const store = h.store();
      await store.retryTable.pause({ tenant: '42' }, { actor: 'alice' });
      const old = h.backend === 'sqlite' ? Date.now() - 91 * 86_400_000 : new Date(Date.now() - 91 * 86_400_000);
      await store.transaction((tx) => exec(h.spec, tx, `UPDATE ${store.tables.retryAudit} SET at = ?`, [old]));
      await store.retryTable.resume({ tenant: '42' }, { actor: 'alice' });
      expect((await store.prune()).audit).toBe(1);
      expect((await store.retryTable.history()).map((e) => e.action)).toEqual(['resume']);
      expect((await store.prune({ auditOlderThanMs: 0 })).audit).toBe(1);
    });

    it('deletes sent outbox rows past the retention, never pending or flagged ones', async () => {
      const h = await harness(backend);
      const store = h.store();
      for (let i = 0; i < 3; i++) await store.transaction((tx) => store.outbox.add(tx, 'a.b', i));
      const now = h.backend === 'sqlite' ? Date.now() - 10_000 : new Date(Date.now() - 10_000);
      await store.transaction((tx) => exec(h.spec, tx, `UPDATE ${store.tables.outbox} SET sent_at = ? WHERE id = (SELECT min(id) FROM ${store.tables.outbox})`, [now]));
      await store.transaction((tx) => exec(h.spec, tx, `UPDATE ${store.tables.outbox} SET failed_at = ?, last_error = 'x' WHERE id = (SELECT max(id) FROM ${store.tables.outbox})`, [now]));
      expect((await store.prune({ olderThanMs: 60_000 })).outbox).toBe(0);
      expect((await store.prune({ olderThanMs: 1000 })).outbox).toBe(1);
      expect(await store.outbox.lag()).toMatchObject({ pending: 1, failed: 1 });
    });

    it('prunes on a schedule', async () => {
      const h = await harness(backend);
      const store = h.store({ pruneIntervalMs: 30, retentionMs: 1 });
      const guard = store.idempotency();
      await guard.run('m-1', 'c', async () => undefined);
      const count = async () => Number(((await store.transaction((tx) => exec(h.spec, tx, `SELECT count(*) AS n FROM ${store.tables.processed}`)))[0] as { n: number }).n);
      const deadline = Date.now() + 5000;
      while ((await count()) > 0 && Date.now() < deadline) await sleep(20);
      expect(await count()).toBe(0);
    });
  });
});
