/**
 * The archive's tables, one suite over both backends against the real databases: what
 * goes in comes out byte for byte, counts and groups are exact through every change,
 * filters and pages agree, and claims keep two replays apart.
 */
import { describe, expect, it } from 'vitest';
import type { ArchiveRowInput, ArchiveStore } from '../store/archive.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { decodeFields } from './encoding.js';
import { archiveFilter } from './filter.js';
import { archiveRow } from './row.js';
import { fingerprintOf, parkedRaw, type ParkedSpec } from './testing/messages.js';

const DAY = 86_400_000;
const now = new Date('2026-05-10T12:00:00Z');

function rows(specs: ParkedSpec[]): ArchiveRowInput[] {
  return specs.map((s) => archiveRow(s.consumer ?? 'billing', parkedRaw({ at: now, ...s }), now));
}

/** 60 rows over 6 days: three groups, tenants t0..t3 in a header and in the error text. */
function sample(): ParkedSpec[] {
  return Array.from({ length: 60 }, (_, i) => ({
    id: `m-${i}`,
    errorClass: ['HttpError', 'TimeoutError', 'ValidationError'][i % 3] as string,
    error: [`carrier ${500 + (i % 3)} for tenant t${i % 4}`, `timeout after ${i} ms for tenant t${i % 4}`, `field ${i} is bad`][i % 3] as string,
    at: new Date(now.getTime() - Math.floor(i / 10) * DAY - i * 1000),
    headers: { tenant: `t${i % 4}` },
    body: JSON.stringify({ order: i, note: i % 7 === 0 ? 'fragile parcel' : 'plain' }),
    routingKey: i % 2 === 0 ? 'order.created' : 'order.eu.paid',
  }));
}

async function all(archive: ArchiveStore, filter: Parameters<ArchiveStore['page']>[0]['filter'], order: 'newest' | 'oldest' = 'newest', limit = 7): Promise<string[]> {
  const ids: string[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await archive.page({ filter, order, limit, ...(after !== undefined ? { after } : {}) });
    ids.push(...page.rows.map((r) => r.messageId ?? ''));
    if (page.next === undefined) return ids;
    after = page.next;
  }
}

describe.each(BACKENDS)('archive tables: %s', (backend) => {
  it('keeps each parking once, bytes and headers exactly, and counts it', async () => {
    const h = await harness(backend);
    const { archive } = h.store();
    const binary = Buffer.from([0, 1, 2, 255, 254, 0xc3, 0x28]);
    const odd = { id: 'odd', body: binary, error: 'nul \u0000 here', headers: { big: 2n ** 64n, when: { '!': 'timestamp', value: 1_700_000_000 }, raw: Buffer.from([0xff]), nested: { list: [1, 'a'] } } };
    const first = await archive.insert(rows([{ id: 'a' }, odd, { id: 'gz', body: 'text but gzip', contentEncoding: 'gzip' }]));
    expect(first.inserted).toBe(3);
    expect(first.ids.every((id) => id !== undefined)).toBe(true);
    // The same parkings again (a crash between insert and ack), with one new: only the new one goes in.
    const again = await archive.insert(rows([{ id: 'a' }, { id: 'b' }, odd, { id: 'b' }]));
    expect(again.inserted).toBe(1);
    expect(again.duplicates).toBe(3);
    expect(again.ids.filter((id) => id !== undefined)).toHaveLength(1);
    expect(again.ids[1]).toBeDefined();

    const got = await archive.get(first.ids[1] as string);
    expect(got?.body.equals(binary)).toBe(true);
    expect(got?.errorMessage).toBe('nul \ufffd here');
    expect(got?.notIndexed).toMatch(/NUL/);
    const headers = decodeFields(got?.headers ?? '');
    expect(headers['big']).toBe(2n ** 64n);
    expect(headers['when']).toEqual({ '!': 'timestamp', value: 1_700_000_000 });
    expect(headers['raw']).toEqual(Buffer.from([0xff]));
    expect(headers['warren-error-message']).toBe('nul \u0000 here');
    expect((await archive.get(first.ids[2] as string))?.body.toString()).toBe('text but gzip');
    expect(await archive.get('999999999')).toBeUndefined();

    expect(await archive.count({ consumer: 'billing' })).toBe(4);
    const [counts] = await archive.counts('billing');
    expect(counts).toMatchObject({ consumer: 'billing', open: 4, replayed: 0, resolved: 0 });
    expect(counts?.bytes).toBe(binary.length + Buffer.byteLength('text but gzip') + 2 * Buffer.byteLength(JSON.stringify({ orderId: 'a' })));
    expect(await archive.counts('nobody')).toEqual([{ consumer: 'nobody', open: 0, replayed: 0, resolved: 0, bytes: 0, oldestOpenAt: null, oldestAt: null }]);
  });

  it('keeps one row when two stores insert the same parking at once', async () => {
    const h = await harness(backend);
    const a = h.store();
    const b = h.store();
    await a.migrate();
    const batch = rows(Array.from({ length: 50 }, (_, i) => ({ id: `same-${i}` })));
    const results = await Promise.all([a.archive.insert(batch), b.archive.insert(batch), a.archive.insert(batch.slice(10, 30))]);
    expect(results.reduce((n, r) => n + r.inserted, 0)).toBe(50);
    expect(await a.archive.count({ consumer: 'billing' })).toBe(50);
    expect((await a.archive.groups({ consumer: 'billing' }, 10))[0]?.count).toBe(50);
  });

  it('filters and pages: every row once, in order, whatever the page size', async () => {
    const h = await harness(backend);
    const { archive } = h.store();
    const specs = sample();
    await archive.insert(rows(specs));
    const newest = await all(archive, { consumer: 'billing' });
    expect(newest).toEqual(specs.map((s) => s.id));
    expect(await all(archive, { consumer: 'billing' }, 'oldest', 13)).toEqual(specs.map((s) => s.id).reverse());

    const expectMatch = async (input: Omit<Parameters<typeof archiveFilter>[0], 'consumer'>, pick: (s: ParkedSpec, i: number) => boolean) => {
      const filter = archiveFilter({ consumer: 'billing', ...input }, now);
      const want = specs.filter(pick).map((s) => s.id);
      expect(await all(archive, filter), JSON.stringify(input)).toEqual(want);
      expect(await archive.count(filter), JSON.stringify(input)).toBe(want.length);
    };
    await expectMatch({ error: 'TENANT t2' }, (s) => /tenant t2$/.test(s.error ?? ''));
    await expectMatch({ error: '/carrier 50[12]/' }, (s) => /carrier 50[12]/.test(s.error ?? ''));
    await expectMatch({ error: '/^TIMEOUT/i' }, (s) => /^timeout/.test(s.error ?? ''));
    await expectMatch({ errorClass: 'httperror' }, (s) => s.errorClass === 'HttpError');
    await expectMatch({ since: '2d' }, (s) => (s.at as Date).getTime() >= now.getTime() - 2 * DAY);
    await expectMatch({ until: '3d', since: '5d' }, (s) => (s.at as Date).getTime() < now.getTime() - 3 * DAY && (s.at as Date).getTime() >= now.getTime() - 5 * DAY);
    await expectMatch({ routingKey: 'order.#' }, () => true);
    await expectMatch({ routingKey: 'order.*' }, (s) => s.routingKey === 'order.created');
    await expectMatch({ routingKey: '#.paid' }, (s) => s.routingKey === 'order.eu.paid');
    await expectMatch({ routingKey: 'order.created' }, (s) => s.routingKey === 'order.created');
    await expectMatch({ messageIds: ['m-3', 'm-40', 'nope'] }, (s) => s.id === 'm-3' || s.id === 'm-40');
    await expectMatch({ fingerprint: fingerprintOf(specs[1] as ParkedSpec) }, (s) => s.errorClass === 'TimeoutError');
    await expectMatch({ reason: 'max-attempts' }, () => true);
    await expectMatch({ headers: ['tenant=t3'] }, (s) => s.headers?.['tenant'] === 't3');
    await expectMatch({ headers: ['tenant=t3'], since: '2d', error: 'tenant' }, (s) => s.headers?.['tenant'] === 't3' && (s.at as Date).getTime() >= now.getTime() - 2 * DAY && /tenant/.test(s.error ?? ''));
    await expectMatch({ body: 'fragile parcel' }, (s) => (s.body as string).includes('fragile parcel'));
    await expectMatch({ body: 'parcel fragile' }, () => false);
    await expectMatch({ states: ['replayed'] }, () => false);

    const groups = await archive.groups({ consumer: 'billing' }, 10);
    expect(groups.map((g) => [g.errorClass, g.count]).sort()).toEqual([['HttpError', 20], ['TimeoutError', 20], ['ValidationError', 20]]);
    const http = groups.find((g) => g.errorClass === 'HttpError');
    expect(http?.lastSeen).toEqual(specs[0]?.at);
    expect(http?.firstSeen).toEqual(specs[57]?.at);
    expect(http?.sampleMessage).toBe(specs[0]?.error);
    const filtered = await archive.groups(archiveFilter({ consumer: 'billing', error: 'tenant t1' }, now), 10);
    expect(filtered.map((g) => [g.errorClass, g.count]).sort()).toEqual([['HttpError', 5], ['TimeoutError', 5]]);
    await expect(archive.page({ filter: { consumer: 'billing' }, after: 'nonsense' })).rejects.toThrow(/page position/);
  });

  it('claims, marks and releases: counts and groups follow every change, and a held row is nobody else’s', async () => {
    const h = await harness(backend);
    const { archive } = h.store();
    const specs = sample();
    await archive.insert(rows(specs));
    const http = { consumer: 'billing', fingerprint: fingerprintOf(specs[0] as ParkedSpec) };
    const a = await archive.claim(http, { owner: 'replay-a', leaseMs: 60_000, limit: 8 });
    expect(a.rows).toHaveLength(8);
    expect(a.next).toBeDefined();
    // Another replay skips what replay-a holds.
    const b = await archive.claim(http, { owner: 'replay-b', leaseMs: 60_000, limit: 30 });
    expect(b.rows).toHaveLength(12);
    expect(new Set([...a.rows, ...b.rows].map((r) => r.id)).size).toBe(20);
    // Purge and resolve leave held rows alone.
    expect(await archive.purge(http, 100)).toBe(0);
    expect(await archive.markReplayed(a.rows.map((r) => r.id), { owner: 'replay-b', actor: 'x', at: now })).toBe(0);
    expect(await archive.markReplayed(a.rows.map((r) => r.id), { owner: 'replay-a', actor: 'alice', at: now })).toBe(8);
    expect(await archive.release(b.rows.map((r) => r.id), 'replay-b')).toBe(12);
    expect(await archive.count(http)).toBe(12);
    expect(await archive.count({ ...http, states: ['replayed'] })).toBe(8);
    const replayed = await archive.get(a.rows[0]?.id as string);
    expect(replayed).toMatchObject({ state: 'replayed', replayCount: 1, replayedBy: 'alice' });

    expect(await archive.resolve(http, { actor: 'bob', reason: 'carrier fixed', at: now }, 5)).toBe(5);
    expect(await archive.purge({ ...http, states: ['open'] }, 3)).toBe(3);
    const [c] = await archive.counts('billing');
    expect(c).toMatchObject({ open: 40 + 4, replayed: 8, resolved: 5 });
    const groups = await archive.groups({ consumer: 'billing', states: ['open'] }, 10);
    expect(groups.find((g) => g.errorClass === 'HttpError')?.count).toBe(4);
    // First and last seen are those of the rows left in the group, not of rows gone.
    const left = (await archive.page({ filter: { ...http, states: ['open'] }, limit: 100 })).rows;
    expect(groups.find((g) => g.errorClass === 'HttpError')?.lastSeen).toEqual(left[0]?.failedAt);
    expect(groups.find((g) => g.errorClass === 'HttpError')?.firstSeen).toEqual(left[left.length - 1]?.failedAt);
    expect(await archive.count({ consumer: 'billing', states: ['open', 'replayed', 'resolved'] })).toBe(57);
  });

  it('prunes by age and by count, saying how many nobody looked at', async () => {
    const h = await harness(backend);
    const { archive } = h.store();
    await archive.insert(rows(sample()));
    const old = { consumer: 'billing', before: new Date(now.getTime() - 4 * DAY + 1) };
    expect(await archive.prunable(old)).toEqual({ deleted: 20, unviewed: 20 });
    const oldest = (await archive.page({ filter: { consumer: 'billing' }, order: 'oldest', limit: 3 })).rows;
    await archive.markViewed(oldest.map((r) => r.id), now);
    expect(await archive.prunable(old)).toEqual({ deleted: 20, unviewed: 17 });
    let deleted = 0;
    for (;;) {
      const r = await archive.prune(old, 6);
      deleted += r.deleted;
      if (r.deleted < 6) break;
    }
    expect(deleted).toBe(20);
    expect(await archive.count({ consumer: 'billing' })).toBe(40);
    expect(await archive.prunable({ consumer: 'billing', keep: 25 })).toEqual({ deleted: 15, unviewed: 15 });
    expect((await archive.prune({ consumer: 'billing', keep: 25 }, 100)).deleted).toBe(15);
    expect(await all(archive, { consumer: 'billing' })).toEqual(sample().slice(0, 25).map((s) => s.id));
    expect((await archive.counts('billing'))[0]?.open).toBe(25);
  });

  it('gives one message id’s parkings, oldest first', async () => {
    const h = await harness(backend);
    const { archive } = h.store();
    await archive.insert(rows([{ id: 'x', at: new Date(now.getTime() - 2000) }, { id: 'y' }, { id: 'x', at: new Date(now.getTime() - 1000), replays: 1, error: 'again' }]));
    const hist = await archive.history('billing', 'x', 10);
    expect(hist.map((r) => [r.replays, r.errorMessage])).toEqual([[0, 'carrier 503'], [1, 'again']]);
    expect(await archive.lastId()).toBe(String(Math.max(...(await archive.page({ filter: { consumer: 'billing' } })).rows.map((r) => Number(r.id)))));
  });
});
