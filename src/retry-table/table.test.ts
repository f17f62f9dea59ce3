/**
 * The retry table's operations over every backend, without a broker: rows in, filters,
 * pauses that hold later rows, resumes, schedules, parking into the outbox, the drain
 * into the outbox, signals and the audit.
 */
import { describe, expect, it } from 'vitest';
import { BACKENDS, harness } from '../store/testing/harness.js';
import type { AnyStore } from '../store/testing/spec.js';
import { InvalidOptionError } from '../errors.js';
import { UnknownDependencyError } from './index.js';
import { retryRowFixture } from './testing/rows.js';


async function pendingOutbox(store: AnyStore): Promise<number> {
  return (await store.outbox.lag()).pending;
}

describe.each(BACKENDS)('retry table: %s', (backend) => {
  it('stores rows, lists and counts them by filter, and makes no second row for the same message', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture({ tenant: '42' }));
    await t.insert(retryRowFixture({ tenant: '7', dependency: 'tax' }));
    const later = retryRowFixture({ nextAttemptAt: new Date(Date.now() + 60_000) });
    await t.insert(later);
    await t.insert(retryRowFixture({ nextAttemptAt: null }));
    // The same message again (a redelivered duplicate): updated, not doubled.
    const again = await t.insert({ ...later, attempt: 2, lastError: 'still 503' });
    expect(await t.count()).toBe(4);
    expect(await t.count({ dependency: 'carrier' })).toBe(3);
    expect(await t.count({ tenant: '42' })).toBe(1);
    expect(await t.count({ due: true })).toBe(2);
    expect(await t.count({ due: false })).toBe(2);
    const [updated] = await t.list({ ids: [again.id] });
    expect(updated).toMatchObject({ messageId: later.messageId, attempt: 2, lastError: 'still 503', paused: false, headers: { 'warren-waits': 1 } });
    const listed = await t.list({ dependency: 'carrier' });
    // Next attempt first, rows with none last.
    expect(listed.map((r) => r.nextAttemptAt === null)).toEqual([false, false, true]);
    expect(await t.dependencies()).toEqual(['carrier', 'tax']);
  });

  it('a pause by tenant holds later rows of that tenant too, until resumed; other rows stay free', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture({ tenant: '42' }));
    await t.insert(retryRowFixture({ tenant: '7' }));
    expect(await t.pause({ tenant: '42' }, { actor: 'alice' })).toBe(1);
    const late = await t.insert(retryRowFixture({ tenant: '42' }));
    expect(late.paused).toBe(true);
    expect((await t.insert(retryRowFixture({ tenant: '8' }))).paused).toBe(false);
    expect(await t.count({ paused: true })).toBe(2);
    expect(await t.holds()).toMatchObject([{ tenant: '42', dependency: null, actor: 'alice' }]);
    expect(await t.resume({ tenant: '42' }, { actor: 'alice' })).toBe(2);
    expect(await t.count({ paused: true })).toBe(0);
    expect(await t.holds()).toEqual([]);
    expect((await t.insert(retryRowFixture({ tenant: '42' }))).paused).toBe(false);
  });

  it('a pause of every row holds rows added later too, until a resume of every row', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture());
    expect(await t.pause({}, { actor: 'alice' })).toBe(1);
    expect((await t.insert(retryRowFixture({ dependency: 'tax' }))).paused).toBe(true);
    expect(await t.resume({}, { actor: 'alice' })).toBe(2);
    expect(await t.holds()).toEqual([]);
    expect((await t.insert(retryRowFixture())).paused).toBe(false);
  });

  it('a resume leaves rows that another pause still covers paused, and a health check lifts only its own pause', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture({ tenant: '42' }));
    await t.insert(retryRowFixture({ tenant: '7' }));
    await t.pause({ tenant: '42' }, { actor: 'alice' });
    await t.pause({ dependency: 'carrier' }, { actor: 'health-check:carrier' });
    expect(await t.count({ paused: true })).toBe(2);
    // The health check's resume: only its own pause goes; tenant 42 stays held.
    expect(await t.resume({ dependency: 'carrier' }, { actor: 'health-check:carrier', ownPausesOnly: true, dueNow: true })).toBe(1);
    expect((await t.list({ paused: true })).map((r) => r.tenant)).toEqual(['42']);
    expect(await t.holds()).toMatchObject([{ tenant: '42', actor: 'alice' }]);
  });

  it("a resume lifts only the pause with the same filter, and a health check's resume leaves rows paused by hand", async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    const byHand = await t.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + 86_400_000) }));
    await t.insert(retryRowFixture({ tenant: '42' }));
    await t.insert(retryRowFixture());
    await t.pause({ ids: [byHand.id] }, { actor: 'alice' });
    await t.pause({ dependency: 'carrier', tenant: '42' }, { actor: 'alice' });
    await t.pause({ dependency: 'carrier' }, { actor: 'health-check:carrier' });
    expect(await t.count({ paused: true })).toBe(3);
    expect(await t.resume({ dependency: 'carrier' }, { actor: 'health-check:carrier', ownPausesOnly: true, dueNow: true })).toBe(1);
    // Alice's pause of tenant 42 (narrower) and her pause of one row by id both stand.
    expect((await t.holds()).map((x) => `${x.actor} ${x.dependency} ${x.tenant}`)).toEqual(['alice carrier 42']);
    const [kept] = await t.list({ ids: [byHand.id] });
    expect(kept).toMatchObject({ paused: true });
    expect(kept?.nextAttemptAt?.getTime()).toBeGreaterThan(Date.now() + 3_600_000);
    // A person's resume by dependency unpauses the row paused by hand; the tenant's pause still holds.
    expect(await t.resume({ dependency: 'carrier' }, { actor: 'alice' })).toBe(2);
    expect((await t.list({ paused: true })).map((r) => r.tenant)).toEqual(['42']);
  });

  it('pauses and resumes racing with inserts leave no row paused without a pause, and none free under one', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    const other = h.store().retryTable;
    await t.insert(retryRowFixture());
    let stop = false;
    // Each writer yields between inserts, as consumers do between deliveries (a SQLite
    // store's writes never wait on I/O, so a tight loop would starve the timers).
    const writers = Array.from({ length: 6 }, async () => {
      while (!stop) {
        await other.insert(retryRowFixture({ nextAttemptAt: null }));
        await new Promise((r) => setImmediate(r));
      }
    });
    try {
      for (let i = 0; i < 15; i++) {
        await t.pause({ dependency: 'carrier' }, { actor: 'op' });
        expect(await t.count({ dependency: 'carrier', paused: false })).toBe(0);
        await t.resume({ dependency: 'carrier' }, { actor: 'op' });
      }
    } finally {
      stop = true;
      await Promise.all(writers);
    }
    expect(await t.holds()).toEqual([]);
    expect(await t.count({ paused: true })).toBe(0);
    // The writers took part.
    expect(await t.count()).toBeGreaterThan(1);
  });

  it('a redelivered duplicate keeps the schedule an operator set', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    const first = retryRowFixture();
    const { id } = await t.insert(first);
    await t.schedule({ ids: [id] }, null, { actor: 'alice' });
    await t.insert({ ...first, attempt: 1 });
    expect((await t.list({ ids: [id] }))[0]?.nextAttemptAt).toBeNull();
  });

  it('sets the next attempt: a time, none, now; a time in the past is now', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    const { id } = await t.insert(retryRowFixture({ nextAttemptAt: null }));
    expect(await t.count({ due: true })).toBe(0);
    const at = new Date(Date.now() + 3_600_000);
    expect(await t.schedule({ ids: [id] }, at)).toBe(1);
    expect((await t.list({ ids: [id] }))[0]?.nextAttemptAt?.getTime()).toBe(at.getTime());
    const before = Date.now();
    expect(await t.schedule({ ids: [id] }, new Date('2001-01-01T00:00:00Z'))).toBe(1);
    const past = (await t.list({ ids: [id] }))[0]?.nextAttemptAt?.getTime() ?? 0;
    expect(past).toBeGreaterThanOrEqual(before - 5);
    expect(await t.count({ due: true })).toBe(1);
    expect(await t.schedule({ ids: [id] }, null)).toBe(1);
    expect((await t.list({ ids: [id] }))[0]?.nextAttemptAt).toBeNull();
    expect(await t.schedule({ ids: [id] }, 'now')).toBe(1);
    expect(await t.count({ due: true })).toBe(1);
  });

  it('drains due, unpaused rows into the outbox, oldest next attempt first, no more than asked and no more than the outbox bound', async () => {
    const h = await harness(backend);
    const store = h.store();
    const t = store.retryTable;
    const base = Date.now() - 10_000;
    for (let i = 0; i < 6; i++) await t.insert(retryRowFixture({ nextAttemptAt: new Date(base + (5 - i) * 100), messageId: `d-${i}` }));
    await t.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + 60_000) }));
    await t.insert(retryRowFixture({ tenant: 'held' }));
    await t.pause({ tenant: 'held' });
    const s = t.scheduler({ publisher: { send: async () => undefined }, exchange: 'events', relay: false, maxPending: 4 });
    expect(await s.drainOnce(3)).toBe(3);
    expect(await s.drainOnce(3)).toBe(1); // the outbox holds 4 unsent rows from the table: the bound
    expect(await pendingOutbox(store)).toBe(4);
    expect(await t.count()).toBe(4);
    const left = await t.list();
    expect(left.map((r) => r.messageId).slice(0, 2)).toEqual(['d-1', 'd-0']);
  });

  it('parks rows into the outbox, addressed to the parked queue with the reason, and records every change', async () => {
    const h = await harness(backend);
    const store = h.store();
    const t = store.retryTable;
    await t.insert(retryRowFixture({ errorClass: 'TaxApiError', dependency: 'tax' }));
    await t.insert(retryRowFixture());
    expect(await t.park({ errorClass: 'TaxApiError' }, { actor: 'bob' })).toBe(1);
    expect(await t.count()).toBe(1);
    expect(await pendingOutbox(store)).toBe(1);
    const history = await t.history();
    expect(history[0]).toMatchObject({ actor: 'bob', action: 'park', rows: 1, filter: { errorClass: 'TaxApiError' } });
    await t.schedule({ dependency: 'carrier' }, null, { actor: 'carol' });
    expect((await t.history(1))[0]).toMatchObject({ actor: 'carol', action: 'schedule', rows: 1, detail: { nextAttemptAt: null } });
  });

  it('reports signals: due, paused, waiting, the oldest due row, by dependency', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() - 5000) }));
    await t.insert(retryRowFixture({ nextAttemptAt: null }));
    await t.insert(retryRowFixture({ dependency: 'tax' }));
    await t.pause({ dependency: 'tax' });
    const s = await t.signals();
    expect(s).toMatchObject({ rows: 3, due: 1, paused: 1, waiting: 1, byDependency: { carrier: { rows: 2, due: 1, paused: 0 }, tax: { rows: 1, paused: 1, due: 0 } } });
    expect(s.oldestDueAgeMs).toBeGreaterThanOrEqual(4000);
  });

  it('refuses bad input with errors that say what to do', async () => {
    const h = await harness(backend);
    const t = h.store().retryTable;
    await t.insert(retryRowFixture());
    await t.insert(retryRowFixture({ dependency: 'tax' }));
    const unknown = await t.pause({ dependency: 'carrer' }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(UnknownDependencyError);
    expect((unknown as UnknownDependencyError).known).toEqual(['carrier', 'tax']);
    expect(String(unknown)).toMatch(/Known: carrier, tax/);
    expect(await t.pause({ dependency: 'ledger' }, { allowUnknown: true })).toBe(0);
    await expect(t.list({ ids: ['x'] })).rejects.toThrow(InvalidOptionError);
    await expect(t.list({ ids: ['9999999999999999999'] })).rejects.toThrow(/not a row id/);
    expect(await t.count({ ids: ['9223372036854775807'] })).toBe(0);
    await expect(t.count({ colour: 'red' } as never)).rejects.toThrow(/colour/);
    expect(() => t.scheduler({ publisher: { send: async () => undefined }, exchange: 'e', ratePerSecond: -5 })).toThrow(/ratePerSecond.*-5/);
    await expect(t.schedule({}, 'tomorrow' as never)).rejects.toThrow(/'now', a valid Date or null/);
    expect(await t.count()).toBe(2);
  });
});
