/**
 * The console with an archive, against the real broker and both databases: the parked
 * pages read the store (exact groups over every row, each filter, both orders, keyset
 * pages), beside the queue's depth and "archive behind"; a message's history; replay
 * (one, selected, a group, the filter; paced and stopped), canary, resolve and purge on
 * rows by id, each recorded and refused without the operator role or the CSRF token; and
 * the overview's parked signal as the archive's open failures plus the queue's.
 */
import { describe, expect, it, vi } from 'vitest';
import { connectWarren, testTopology, waitFor } from '../../test/helpers.js';
import { Archive } from '../archive/archive.js';
import { ArchiveIngester } from '../archive/ingest.js';
import { archiveRow } from '../archive/row.js';
import { parkedRaw, type ParkedSpec } from '../archive/testing/messages.js';
import type { MessageContext } from '../consume/types.js';
import { PermanentError } from '../errors.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import type { ArchiveRowInput } from '../store/archive.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import type { AnyStore } from '../store/testing/spec.js';
import type { Overview } from './index.js';
import { csrfOf, get, jobUntil, post, testConsole, VIEWER } from './testing/harness.js';

vi.setConfig({ testTimeout: 120_000 });

const DAY = 86_400_000;

function topologyOf() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 1 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.*'] }, email: { queue: name('email'), bindings: ['order.created'] } },
  }));
}

/** 1,200 rows over 7 days: three groups, tenants t0..t3 in a header and the error text, words in the body. */
function sample(now: number): ParkedSpec[] {
  return Array.from({ length: 1200 }, (_, i) => ({
    id: `m-${i}`,
    errorClass: ['HttpError', 'TimeoutError', 'ValidationError'][i % 3] as string,
    error: [`carrier ${500 + (i % 5)} for tenant t${i % 4}`, `timeout for tenant t${i % 4}`, 'field is bad'][i % 3] as string,
    at: new Date(now - Math.floor((i * 7 * DAY) / 1200) - 1000),
    headers: { tenant: `t${i % 4}` },
    body: JSON.stringify({ order: i, note: i % 10 === 0 ? 'fragile parcel' : 'plain' }),
    routingKey: i % 2 === 0 ? 'order.created' : 'order.eu.paid',
    reason: i % 5 === 0 ? 'permanent' : 'max-attempts',
  }));
}

async function seed(store: AnyStore, specs: ParkedSpec[]): Promise<void> {
  const rows: ArchiveRowInput[] = specs.map((s) => archiveRow('billing', parkedRaw(s), new Date()));
  for (let i = 0; i < rows.length; i += 500) await store.archive.insert(rows.slice(i, i + 500));
}

/** The attribute values of a page's elements, e.g. every message row's id. */
function attrs(html: string, name: string): string[] {
  return [...html.matchAll(new RegExp(`<tr ${name}="([^"]*)"`, 'g'))].map((m) => m[1] as string);
}

/** Text as the page escaped it, as it was. */
function unescape(text: string): string {
  return text.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&');
}

function field(html: string, id: string): string | undefined {
  return new RegExp(`id="${id}"[^>]*>([^<]*)<`).exec(html)?.[1];
}

async function all(ops: ReturnType<typeof testConsole>, query: string): Promise<{ ids: string[]; matched: number; pages: number }> {
  const ids: string[] = [];
  let path: string | undefined = `/parked/billing${query}`;
  let matched = -1;
  let pages = 0;
  while (path !== undefined) {
    const page = await get(ops, path);
    expect(page.status, page.text.slice(0, 500)).toBe(200);
    if (matched < 0) matched = Number(field(page.text, 'parked-matched'));
    ids.push(...[...page.text.matchAll(/<tr data-row-id="(\d+)" data-message-id="([^"]*)"/g)].map((m) => m[2] as string));
    pages++;
    const next = /<a href="([^"]+)" data-page="next"/.exec(page.text)?.[1];
    path = next === undefined ? undefined : next.replace(/&amp;/g, '&');
  }
  return { ids, matched, pages };
}

describe.each(BACKENDS)('console with an archive: %s', (backend) => {
  it('reads the parked pages from the archive: exact groups, every filter, both orders, keyset pages, beside the queue depth', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const now = Date.now();
    const specs = sample(now);
    await seed(store, specs);
    const topology = topologyOf();
    const conn = await declared(topology);
    // Two parked messages not ingested yet: the page shows them beside the archive's count.
    await publishParked(conn, topology, topology.consumer('billing'), failures(2));
    const ops = testConsole(topology, { store, archive: new Archive(store), management: false });

    const page = await get(ops, '/parked/billing');
    expect(page.status).toBe(200);
    expect(field(page.text, 'archive-count')).toBe('1200');
    expect(field(page.text, 'queue-depth')).toBe('2');
    expect(page.text).not.toContain('archive behind');
    // Exact groups over every row, not the oldest 10,000 or any sample.
    const counts = [...page.text.matchAll(/<td class="n" data-field="count">(\d+)<\/td>/g)].map((m) => Number(m[1]));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(1200);
    expect(counts).toEqual((await new Archive(store).groups({ consumer: 'billing' })).map((g) => g.count));

    // Newest first by default, 50 a page, every row once across the pages.
    const newest = await all(ops, '?size=200');
    expect(newest.matched).toBe(1200);
    expect(newest.pages).toBe(6);
    expect(newest.ids).toEqual([...specs].sort((a, b) => (b.at as Date).getTime() - (a.at as Date).getTime() || Number((b.id as string).slice(2)) - Number((a.id as string).slice(2))).map((s) => s.id));
    const oldest = await all(ops, '?order=oldest&size=500');
    expect(oldest.ids).toEqual([...newest.ids].reverse());

    // The on-call question: tenant t3, in the last two days.
    const expected = (pred: (s: ParkedSpec, i: number) => boolean) => specs.filter(pred).map((s) => s.id).sort();
    const recent = (s: ParkedSpec) => (s.at as Date).getTime() >= now - 2 * DAY;
    const cases: Array<[string, (s: ParkedSpec, i: number) => boolean]> = [
      ['?error=tenant+t3&since=2d', (s, i) => recent(s) && i % 3 !== 2 && i % 4 === 3],
      [`?error=${encodeURIComponent('/carrier 50[12]/')}`, (_s, i) => i % 3 === 0 && [1, 2].includes(i % 5)],
      ['?class=TimeoutError', (_s, i) => i % 3 === 1],
      ['?header=tenant%3Dt1&state=open', (_s, i) => i % 4 === 1],
      ['?body=fragile+parcel', (_s, i) => i % 10 === 0],
      ['?key=order.eu.*', (_s, i) => i % 2 === 1],
      ['?mid=m-7', (_s, i) => i === 7],
      ['?reason=permanent&until=3d', (s, i) => i % 5 === 0 && (s.at as Date).getTime() < now - 3 * DAY],
    ];
    for (const [query, pred] of cases) {
      const r = await all(ops, `${query}&size=1000`);
      expect(r.ids.sort(), query).toEqual(expected(pred));
      expect(r.matched, query).toBe(r.ids.length);
    }

    // Bad input: a clear 400 naming the field.
    const bad = await get(ops, `/parked/billing?error=${encodeURIComponent('/(a)\\1/')}`);
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/error/);
    expect((await get(ops, '/parked/billing?size=5000')).text).toMatch(/per page: &quot;5000&quot; is not a number from 1 to 1000/);
    expect((await get(ops, `/parked/billing?${Array.from({ length: 9 }, (_, i) => `header=h${i}%3D1`).join('&')}`)).status).toBe(400);
    expect((await get(ops, `/parked/billing?error=${'x'.repeat(1001)}`)).text).toMatch(/more than 1000/);
    expect((await get(ops, '/parked/billing?since=yesterdayish')).status).toBe(400);
    expect((await get(ops, '/parked/billing?after=nonsense')).status).toBeGreaterThanOrEqual(400);

    // The index: the archive's open failures beside each queue's depth.
    const index = await get(ops, '/parked');
    expect(index.text).toMatch(/<tr data-consumer="billing">[\s\S]*?data-field="archived">1200<[\s\S]*?data-field="parked">2</);

    // A viewer reads, and is offered no action.
    const viewer = await get(ops, '/parked/billing', VIEWER);
    expect(viewer.status).toBe(200);
    expect(viewer.text).not.toMatch(/data-action="(replay|resolve|purge|canary)/);
    // ... and may export what a filter matches, from the archive, as JSON lines.
    const exported = await post(ops, '/parked/billing/export', { header: 'tenant=t2', body: 'fragile' }, { user: VIEWER, csrf: await csrfOf(ops, VIEWER) });
    expect(exported.status).toBe(200);
    expect(exported.text).not.toBe('');
    const lines = exported.text.trim().split('\n').map((l) => JSON.parse(l) as { messageId: string; rowId: string; state: string });
    expect(lines.map((l) => l.messageId).sort()).toEqual(expected((_s, i) => i % 4 === 2 && i % 10 === 0));
    expect(lines.every((l) => l.state === 'open' && /^\d+$/.test(l.rowId))).toBe(true);
  });

  it('replays one row, a selection, a group and a filter, paced and stopped; canaries, resolves and purges by id; each recorded; the message page shows the history', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const topology = topologyOf();
    const warren = await connectWarren(topology, { archive: { store, batchSize: 20, maxBatchDelayMs: 5 } });
    const failing = { fn: (_n: number) => true };
    const handled = new Map<string, number>();
    await warren.consume(
      'billing',
      async (payload: { n: number }, ctx: MessageContext<unknown>) => {
        if (failing.fn(payload.n)) throw new PermanentError(payload.n % 2 === 0 ? `carrier down for tenant t${payload.n % 4}` : `card ${payload.n} declined`);
        handled.set(ctx.messageId as string, (handled.get(ctx.messageId as string) ?? 0) + 1);
      },
      { idempotency: store.idempotency(), concurrency: 5 },
    );
    const ids: string[] = [];
    for (let n = 0; n < 40; n++) ids.push((await warren.publish('order.created', { n })).messageId);
    const archive = new Archive(store);
    await waitFor(async () => (await archive.count({ consumer: 'billing' })) === 40, 'the 40 failures archived', 20_000);
    const ops = testConsole(topology, { store, archive, warren });
    const idOf = async (messageId: string) => (await archive.page({ filter: { consumer: 'billing', messageIds: [messageId], states: ['open', 'replayed', 'resolved'] }, limit: 10 })).rows.map((r) => r.id);

    // Refused: a viewer, a missing or wrong CSRF token.
    const [row0] = await idOf(ids[0] as string);
    expect((await post(ops, '/parked/billing/replay', { scope: 'selected', id: row0 as string }, { user: VIEWER, csrf: await csrfOf(ops, VIEWER) })).status).toBe(403);
    expect((await post(ops, '/parked/billing/replay', { scope: 'selected', id: row0 as string }, { csrf: false })).status).toBe(403);
    expect((await post(ops, '/parked/billing/replay', { scope: 'selected', id: row0 as string }, { csrf: 'forged' })).status).toBe(403);
    expect(await archive.count({ consumer: 'billing' })).toBe(40);

    // One row, fixed: replayed, handled once, and its history says who replayed it.
    // The carrier fixed for all but tenant t2; cards still declined.
    failing.fn = (n) => n % 2 !== 0 || n % 4 === 2;
    const one = await post(ops, '/parked/billing/replay', { scope: 'selected', id: row0 as string });
    expect(one.status).toBe(303);
    expect((await jobUntil(ops, one.location, ['done'])).progress.replayed).toBe(1);
    await waitFor(() => handled.get(ids[0] as string) === 1, 'message 0 handled', 20_000);
    const shown = await get(ops, `/parked/billing/rows/${row0 as string}`);
    expect(shown.status).toBe(200);
    expect(attrs(shown.text, 'data-event')).toEqual(['parked', 'replayed']);
    expect(shown.text).toMatch(/<tr data-event="replayed"[^>]*>[\s\S]*?data-field="actor">alice</);
    expect(shown.text).toMatch(/data-field="state">replayed/);
    // An old link by message id goes to its latest row.
    expect((await get(ops, `/parked/billing/messages/${ids[0] as string}`)).status).toBe(303);

    // A selection (two rows): one is fixed, one fails again and is parked (and archived) again; its history shows both parkings.
    const [row4] = await idOf(ids[4] as string);
    const [row2] = await idOf(ids[2] as string);
    const sel = await post(ops, '/parked/billing/replay', { scope: 'selected', id: [row4 as string, row2 as string] });
    expect((await jobUntil(ops, sel.location, ['done'])).progress.replayed).toBe(2);
    await waitFor(async () => (await idOf(ids[2] as string)).length === 2, 'message 2 archived again', 20_000);
    const again = await get(ops, `/parked/billing/rows/${row2 as string}`);
    expect(attrs(again.text, 'data-event')).toEqual(['parked', 'replayed', 'parked']);
    expect(again.text).toMatch(/after 1 replay/);

    // A group, through the page's filter: the "card … declined" failures (odd n), a canary of three first, failing again: stop.
    const page = await get(ops, '/parked/billing');
    const groups = [...page.text.matchAll(/<tr data-fingerprint="([^"]+)">\s*<td class="n" data-field="count">(\d+)<\/td>\s*<td data-field="errorClass">[^<]*<\/td>\s*<td class="cell-text" data-field="errorMessage">([^<]*)</g)].map((m) => ({ fingerprint: unescape(m[1] as string), count: Number(m[2]), message: m[3] as string }));
    const card = groups.find((g) => g.message.startsWith('card'));
    expect(card?.count).toBe(20);
    const canary = await post(ops, '/parked/billing/canary', { fingerprint: card?.fingerprint as string, n: '3', window: '3' });
    const watched = await jobUntil(ops, canary.location, ['awaiting-decision', 'done', 'failed'], 60_000);
    expect(watched.state).toBe('awaiting-decision');
    expect(watched.canary).toMatchObject({ sent: 3, returned: 3, verdict: 'failed', rest: 17 });
    expect((await post(ops, `/jobs/${watched.id}/stop`, {})).status).toBe(303);
    await jobUntil(ops, canary.location, ['stopped']);
    expect(await archive.count({ consumer: 'billing', fingerprint: card?.fingerprint as string })).toBe(20);

    // The card group fixed: paced at 5/s and stopped part-way; the rest stays open, then replayed whole.
    failing.fn = () => false;
    const paced = await post(ops, '/parked/billing/replay', { scope: 'group', fingerprint: card?.fingerprint as string, rate: '5' });
    const cards = ids.filter((_id, n) => n % 2 === 1);
    await waitFor(() => cards.some((id) => handled.has(id)), 'a first paced copy handled', 20_000);
    expect((await post(ops, `/jobs/${(paced.location as string).split('/').pop() as string}/stop`, {})).status).toBe(303);
    const stopped = await jobUntil(ops, paced.location, ['stopped']);
    expect(stopped.progress.replayed).toBeGreaterThan(0);
    expect(stopped.progress.replayed).toBeLessThan(20);
    const left = await archive.count({ consumer: 'billing', fingerprint: card?.fingerprint as string });
    expect(left).toBe(20 - stopped.progress.replayed);
    const rest = await post(ops, '/parked/billing/replay', { scope: 'group', fingerprint: card?.fingerprint as string });
    expect((await jobUntil(ops, rest.location, ['done'])).progress.replayed).toBe(left);
    expect(await archive.count({ consumer: 'billing', fingerprint: card?.fingerprint as string })).toBe(0);

    // Resolve what a filter matches (tenant t2) with a reason; without one, a 400.
    expect((await post(ops, '/parked/billing/resolve', { scope: 'filter', error: 'tenant t2' })).status).toBe(400);
    const t2 = await archive.count({ consumer: 'billing', error: { contains: 'tenant t2' } });
    expect(t2).toBeGreaterThan(0);
    const resolved = await post(ops, '/parked/billing/resolve', { scope: 'filter', error: 'tenant t2', resolution: 'refunded by hand' });
    expect(resolved.status).toBe(200);
    expect(resolved.text).toMatch(new RegExp(`id="resolved" data-count="${t2}"`));
    expect(await archive.count({ consumer: 'billing', states: ['resolved'], error: { contains: 'tenant t2' } })).toBe(t2);

    // Purge what is left open: counted, refused when mistyped, then exactly those deleted.
    const open = await archive.count({ consumer: 'billing' });
    expect(open).toBeGreaterThan(0);
    const confirm = await post(ops, '/parked/billing/purge/filter', {});
    expect(confirm.status).toBe(200);
    expect(confirm.text).toContain(`data-count="${open}"`);
    const token = /name="purge" value="([^"]+)"/.exec(confirm.text)?.[1] as string;
    expect((await post(ops, '/parked/billing/purge', { purge: token, confirm: String(open + 1) })).status).toBe(400);
    const purged = await post(ops, '/parked/billing/purge', { purge: token, confirm: String(open) });
    expect(purged.text).toContain(`id="purged" data-count="${open}"`);
    expect(await archive.count({ consumer: 'billing' })).toBe(0);
    expect((await post(ops, '/parked/billing/purge', { purge: token, confirm: String(open) })).status).toBe(409);

    // Each message the consumer handled once, though replayed through several routes.
    expect([...handled.values()].every((n) => n === 1)).toBe(true);
    const all = await store.actions.list({ limit: 40 });
    // Each action is recorded as started before it is done, and its end names that record.
    const started = all.filter((r) => r.outcome === 'started');
    const records = all.filter((r) => r.outcome !== 'started');
    expect(records.map((r) => started.find((s) => s.id === r.detail?.['started'])?.action)).toEqual(records.map((r) => r.action));
    // A stop is recorded when asked, its job when it ends: in either order.
    expect(records.map((r) => [r.action, r.actor, r.outcome].join(' ')).sort()).toEqual([
      'job.stop alice ok',
      'job.stop alice ok',
      'parked.canary alice partial',
      'parked.purge alice ok',
      'parked.replay alice ok',
      'parked.replay alice ok',
      'parked.replay alice ok',
      'parked.replay alice partial',
      'parked.resolve alice ok',
    ]);
    expect(records.find((r) => r.action === 'parked.resolve')?.detail).toMatchObject({ source: 'archive', reason: 'refunded by hand' });
  });

  it("the overview's parked signal is the archive's open failures plus the queue's, and says when the archive is behind", async () => {
    const h = await harness(backend);
    const outage = await h.outage();
    const store = outage.store;
    await store.migrate();
    await seed(store, sample(Date.now()).slice(0, 30));
    const topology = topologyOf();
    const conn = await declared(topology);
    const ingester = new ArchiveIngester({ store, topology, connection: async () => conn }, { holdMs: 500, consumers: ['email'] });
    const ops = testConsole(topology, { store, archive: new Archive(store), ingester, management: false });
    await publishParked(conn, topology, topology.consumer('billing'), failures(3));
    let o = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    const billing = () => o.consumers.find((c) => c.name === 'billing');
    expect(billing()).toMatchObject({ openFailures: 33, archive: { open: 30 }, parked: { depth: 3 } });
    expect(o.problems.filter((p) => p.kind === 'parked').map((p) => p.message)).toEqual(['33 open failures (30 in the archive, 3 still in ' + topology.consumer('billing').parkedQueue + "); see the console's parked page"]);
    // The chart's parked line is the same signal.
    await waitFor(async () => (JSON.parse((await get(ops, '/api/history')).text) as Record<string, { parked: (number | null)[] }>)['billing']?.parked.at(-1) === 33, 'a sample of the parked signal');
    const html = await get(ops, '/');
    expect(html.text).toMatch(/<tr data-consumer="billing">[\s\S]*?data-field="parked" title="30 open in the archive, 3 in [^"]*">33</);

    // The database stops taking batches: the ingester is behind, and the pages say so.
    ingester.start();
    await outage.down();
    await publishParked(conn, topology, topology.consumer('email'), failures(2));
    await waitFor(() => ingester.behind, 'the ingester is behind', 20_000);
    o = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    expect(o.archive?.behind).toBe(true);
    expect(o.problems.some((p) => p.kind === 'archive-behind' && p.consumer === 'email')).toBe(true);
    expect(o.consumers.find((c) => c.name === 'email')?.ingest).toBe('behind');
    await outage.up();
    await waitFor(async () => (await store.archive.count({ consumer: 'email' })) === 2, 'ingested once the database answers', 30_000);
    await waitFor(() => !ingester.behind, 'caught up');
    const emailPage = await get(ops, '/parked/email');
    expect(emailPage.text).not.toContain('archive behind');
    await ingester.stop();
  });
});
