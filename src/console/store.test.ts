import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { connectWarren, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { retryRowFixture } from '../retry-table/testing/rows.js';
import { sqliteStore } from '../store/sqlite/index.js';
import type { Overview } from './index.js';
import { get, post, testConsole, VIEWER } from './testing/harness.js';

async function tempStore() {
  const dir = await mkdtemp(join(tmpdir(), 'warren-console-'));
  const store = sqliteStore({ filename: join(dir, 'app.db') });
  onTeardown(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });
  return store;
}

describe('console: retry table and outbox', () => {
  it("pauses and resumes a dependency's rows, reschedules and parks, each recorded in the store's action record", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const store = await tempStore();
    const t = store.retryTable;
    await t.insert(retryRowFixture({ dependency: 'carrier', lastError: '<b>carrier</b> answered 503' }));
    await t.insert(retryRowFixture({ dependency: 'carrier', tenant: 'acme' }));
    await t.insert(retryRowFixture({ dependency: 'tax', errorClass: 'TaxApiError' }));
    const ops = testConsole(topology, { store, databaseName: 'sqlite:app.db' });

    const page = await get(ops, '/retry');
    expect(page.status).toBe(200);
    expect(page.text).toMatch(/<tr data-dependency="carrier">/);
    expect(page.text).toContain('&lt;b&gt;carrier&lt;/b&gt; answered 503');
    expect(page.text).not.toContain('<b>carrier</b>');

    expect((await post(ops, '/retry/pause', { by: 'dependency', value: 'carrier' }, { user: VIEWER })).status).toBe(403);
    expect((await post(ops, '/retry/pause', { by: 'dependency', value: 'carrier' })).status).toBe(303);
    expect(await t.count({ dependency: 'carrier', paused: true })).toBe(2);
    expect(await t.count({ dependency: 'tax', paused: true })).toBe(0);
    // Resuming one tenant lifts no row the dependency's pause still holds.
    expect((await post(ops, '/retry/resume', { by: 'tenant', value: 'acme', due_now: '1' })).status).toBe(303);
    expect(await t.count({ dependency: 'carrier', paused: true })).toBe(2);
    expect((await post(ops, '/retry/resume', { by: 'dependency', value: 'carrier', due_now: '1' })).status).toBe(303);
    expect(await t.count({ dependency: 'carrier', paused: true })).toBe(0);
    expect((await post(ops, '/retry/schedule', { by: 'errorClass', value: 'TaxApiError', at: 'none' })).status).toBe(303);
    expect((await t.list({ dependency: 'tax' }))[0]?.nextAttemptAt).toBeNull();
    const bad = await post(ops, '/retry/schedule', { by: 'errorClass', value: 'TaxApiError', at: 'tomorrowish' });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain('is not now, none or a time');
    // An unknown dependency is refused (a typo), as on the command line.
    expect((await post(ops, '/retry/pause', { by: 'dependency', value: 'carier' })).status).toBe(400);
    expect((await post(ops, '/retry/park', { by: 'errorClass', value: 'TaxApiError' })).status).toBe(303);
    expect(await t.count({ dependency: 'tax' })).toBe(0);

    // Each change is recorded as started before it is made, then as it ended; the typo's pause as failed.
    const all = await store.actions.list({ limit: 20 });
    expect(all.map((r) => r.outcome)).toEqual(['ok', 'started', 'failed', 'started', 'ok', 'started', 'ok', 'started', 'ok', 'started', 'ok', 'started']);
    expect(all.filter((r) => r.outcome !== 'started').every((r) => all.some((s) => s.id === r.detail?.['started'] && s.outcome === 'started' && s.action === r.action))).toBe(true);
    const records = all.filter((r) => r.outcome !== 'started');
    expect(records.map((r) => [r.action, r.actor, r.count])).toEqual([
      ['retry.park', 'alice', 1],
      ['retry.pause', 'alice', 0],
      ['retry.schedule', 'alice', 1],
      ['retry.resume', 'alice', 2],
      ['retry.resume', 'alice', 0],
      ['retry.pause', 'alice', 2],
    ]);
    expect(records[5]?.filter).toEqual({ dependency: 'carrier' });
    const actions = await get(ops, '/actions', VIEWER);
    expect(actions.text).toMatch(/<td data-field="action">retry\.pause<\/td>/);
    // The retry table's own history keeps who, too.
    expect((await t.history(5)).map((e) => e.actor)).toContain('alice');
  });

  it('lists an outbox row the relay flagged, as text, and releases it', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const store = await tempStore();
    const app = await connectWarren(topology);
    await store.transaction((tx) => store.outbox.add(tx, 'order.paid', { note: '<script>alert(1)</script>' }, { exchange: `${topology.exchange}.missing` }));
    const relay = store.relay({ publisher: app.publisher, exchange: topology.exchange, pollMs: 20, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    await relay.start();
    onTeardown(() => relay.stop());
    await waitFor(async () => (await store.outbox.lag()).failed === 1, 'the row to be flagged');
    const ops = testConsole(topology, { store });
    const overview = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    expect(overview.outbox?.failed).toBe(1);
    expect(overview.problems.map((p) => p.kind)).toContain('outbox-flagged');
    const page = await get(ops, '/outbox');
    expect(page.text).toMatch(/<b id="outbox-flagged">1<\/b>/);
    expect(page.text).not.toContain('<script>alert');
    const id = /<tr data-row-id="([^"]+)">/.exec(page.text)?.[1] as string;
    expect((await post(ops, '/outbox/release', { id })).status).toBe(303);
    expect((await store.actions.list({ limit: 1 }))[0]).toMatchObject({ action: 'outbox.release', actor: 'alice', count: 1 });
  });
});

describe('console: hand pauses', () => {
  it('pauses a running consumer through the database and resumes it; seen on the overview; each recorded', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { shipping: { queue: name('shipping'), bindings: ['order.paid'] } } }));
    const store = await tempStore();
    const app = await connectWarren(topology);
    let runs = 0;
    const consumer = await app.consume('shipping', () => void runs++, { control: { source: store.control, intervalMs: 100 } });
    const ops = testConsole(topology, { store, databaseName: 'sqlite:app.db' });

    const before = await get(ops, '/');
    expect(before.text).toMatch(/<tr data-pause="shipping"><th scope="row">shipping<\/th><td data-field="state">taking messages<\/td>/);
    expect(before.text).toContain('data-action="pause"');
    expect((await get(ops, '/', VIEWER)).text).not.toContain('data-action="pause"');

    expect((await post(ops, '/consumers/shipping/pause', { reason: 'carrier maintenance' }, { user: VIEWER })).status).toBe(403);
    const noReason = await post(ops, '/consumers/shipping/pause', { reason: '  ' });
    expect(noReason.status).toBe(400);
    expect(noReason.text).toContain('Give a reason of 1 to 500 characters');
    expect((await post(ops, '/consumers/shipping/pause', { reason: 'x'.repeat(501) })).status).toBe(400);
    expect((await post(ops, '/consumers/no-such/pause', { reason: 'typo' })).status).toBe(404);
    expect((await post(ops, '/consumers/shipping/stop', {})).status).toBe(404);
    expect(await store.control.read()).toEqual([]);

    expect((await post(ops, '/consumers/shipping/pause', { reason: 'carrier <maintenance>' })).status).toBe(303);
    await waitFor(() => !consumer.intake.consuming, 'the consumer to follow the pause made in the console');
    expect(consumer.intake.hand).toMatchObject({ reason: 'carrier <maintenance>', from: 'store' });
    for (let i = 0; i < 5; i++) await app.publish('order.paid', { i });
    const overview = await waitForOverview(ops, (o) => o.consumers[0]?.work.depth === 5);
    expect(overview.consumers[0]?.pause).toMatchObject({ reason: 'carrier <maintenance>', actor: expect.any(String) as unknown as string });
    expect(overview.problems).toContainEqual(expect.objectContaining({ consumer: 'shipping', kind: 'paused', message: expect.stringMatching(/^paused by hand by .*: carrier <maintenance>; 5 messages wait in /) as unknown as string }));
    const page = await get(ops, '/');
    expect(page.text).toContain('data-field="pause"');
    expect(page.text).toContain('carrier &lt;maintenance&gt;');
    expect(page.text).not.toContain('carrier <maintenance>');
    expect(page.text).toContain('data-action="resume"');
    expect(runs).toBe(0);

    expect((await post(ops, '/consumers/shipping/resume', {})).status).toBe(303);
    await waitFor(() => runs === 5, () => `the 5 waiting messages handled after the resume (${runs})`);

    const records = (await store.actions.list({ consumer: 'shipping' })).reverse();
    expect(records.map((r) => [r.action, r.outcome, r.count])).toEqual([
      ['consumer.pause', 'started', 0],
      ['consumer.pause', 'ok', 1],
      ['consumer.resume', 'started', 0],
      ['consumer.resume', 'ok', 1],
    ]);
  });
});

async function waitForOverview(ops: ReturnType<typeof testConsole>, ok: (o: Overview) => boolean): Promise<Overview> {
  let last: Overview | undefined;
  await waitFor(async () => {
    last = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    return ok(last);
  }, () => `the overview to show it: ${JSON.stringify(last?.consumers)}`);
  return last as Overview;
}
