/**
 * A health check's pause and an operator's, interleaved: every row is released once
 * nothing holds it. A person's resume of a row (by id, or of everything) that another
 * hold still covers must leave the row to that hold alone, so the hold's own resume
 * (a health check's, which never lifts a pause made by hand) releases it.
 */
import { describe, expect, it } from 'vitest';
import { onTeardown, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { actorOf } from './health.js';
import { retryRowFixture } from './testing/rows.js';

const HOUR = 3_600_000;

describe.each(BACKENDS)('pauses by a health check and by a person: %s', (backend) => {
  it("a row resumed by hand while a health check holds its dependency is released by the check's resume", async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    const { id } = await table.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + HOUR) }));
    await table.pause({ ids: [id] }, { actor: 'alice' });
    const check = { actor: actorOf('carrier'), allowUnknown: true };
    await table.pause({ dependency: 'carrier' }, check);
    // Alice lets her row go while the carrier is still down: the check's pause keeps it.
    expect(await table.resume({ ids: [id] }, { actor: 'alice' })).toBe(0);
    expect(await table.resume({}, { actor: 'alice' })).toBe(0);
    expect(await table.count({ paused: true })).toBe(1);
    // The carrier is back: nothing holds the row any more.
    expect(await table.resume({ dependency: 'carrier' }, { ...check, dueNow: true, ownPausesOnly: true })).toBe(1);
    expect(await table.count({ paused: true })).toBe(0);
    expect(await table.count({ due: true })).toBe(1);
  });

  it('a check that pauses a row held by hand leaves it held by hand after its resume', async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    const { id } = await table.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + HOUR) }));
    await table.insert(retryRowFixture({ nextAttemptAt: new Date(Date.now() + HOUR) }));
    await table.pause({ ids: [id] }, { actor: 'alice' });
    const check = { actor: actorOf('carrier'), allowUnknown: true };
    await table.pause({ dependency: 'carrier' }, check);
    expect(await table.resume({ dependency: 'carrier' }, { ...check, dueNow: true, ownPausesOnly: true })).toBe(1);
    expect((await table.list({ paused: true })).map((r) => r.id)).toEqual([id]);
    expect(await table.resume({ ids: [id] }, { actor: 'alice' })).toBe(1);
    expect(await table.count({ paused: true })).toBe(0);
  });

  it('with a check flapping every 30 ms, every row is delivered once the operator resumes the tenant, the row and everything', { timeout: 120_000 }, async () => {
    for (let round = 0; round < 15; round++) {
      const h = await harness(backend);
      const store = h.store();
      const table = store.retryTable;
      const ids: string[] = [];
      for (let i = 0; i < 40; i++) {
        const row = retryRowFixture({ messageId: `r${round}-${i}`, tenant: `t${i % 4}`, nextAttemptAt: new Date(Date.now() + HOUR) });
        ids.push((await table.insert(row)).id);
      }
      const sent = new Set<string>();
      let flap = false;
      let healed = false;
      const scheduler = table.scheduler({
        publisher: { send: async (m) => void sent.add(String(m.properties.messageId)) },
        exchange: 'events',
        ratePerSecond: Infinity,
        pollMs: 10,
        checks: { carrier: () => healed || (flap = !flap) },
        health: { intervalMs: 30, failuresToPause: 1 },
      });
      await scheduler.start();
      onTeardown(() => scheduler.stop());
      await table.pause({ tenant: 't1' }, { actor: 'alice' });
      await table.pause({ ids: [ids[2] as string] }, { actor: 'alice' });
      const monitor = scheduler.health;
      if (monitor === undefined) throw new Error('the scheduler runs no health checks');
      await waitFor(() => monitor.stats.paused >= 2 && monitor.stats.resumed >= 2, 'the check to flap');
      await table.resume({ tenant: 't1' }, { actor: 'alice' });
      await new Promise((r) => setTimeout(r, 15 + round * 7));
      await table.resume({ ids: [ids[2] as string] }, { actor: 'alice' });
      await new Promise((r) => setTimeout(r, 15 + round * 5));
      await table.resume({}, { actor: 'alice' });
      await new Promise((r) => setTimeout(r, 50));
      // The carrier is up for good: the check's next pass resumes what it still holds.
      healed = true;
      const checks = monitor.stats.checks;
      await waitFor(() => monitor.stats.checks > checks + 1 && monitor.states()[0]?.paused === false, 'the check to pass');
      await waitFor(async () => (await table.count()) === 0, `every row delivered in round ${round}`, 15_000).catch(async (error: unknown) => {
        const left = await table.list({});
        throw new Error(`${String(error)}; left: ${JSON.stringify(left.map((r) => ({ id: r.id, tenant: r.tenant, paused: r.paused, next: r.nextAttemptAt })))}; holds: ${JSON.stringify(await table.holds())}`);
      });
      await waitFor(() => sent.size === 40, () => `the relay to publish all 40 rows (${sent.size})`);
      await scheduler.stop();
    }
  });
});
