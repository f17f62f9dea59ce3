// The console with an archive in Chromium, against the real broker and SQLite: an operator
// finds one message among many by filter (a header value and the error text), opens it,
// replays it after the fix, and sees its history; the consumer handles it once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { Archive } from '../../src/archive/archive.js';
import type { MessageContext } from '../../src/consume/types.js';
import { PermanentError } from '../../src/errors.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import { launchBrowser, screenshot, watchErrors } from '../browser.js';
import { connectWarren, onTeardown, testTopology, waitFor } from '../helpers.js';
import { operator, serveConsole } from './harness.js';

// Chromium's start and a page's first paint take seconds on a loaded two-core machine.
vi.setConfig({ testTimeout: 180_000 });

describe('console with an archive, in a browser', () => {
  it('finds a message by filter among 60 archived, replays it from its page, and shows its history', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-console-archive-'));
    const store = sqliteStore({ filename: join(dir, 'app.db') });
    onTeardown(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    await store.migrate();
    const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 1 }, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const warren = await connectWarren(topology, { archive: { store, batchSize: 20, maxBatchDelayMs: 5 } });
    const state = { broken: true };
    const handled: string[] = [];
    await warren.consume('billing', async (p: { n: number }, ctx: MessageContext) => {
      if (state.broken) throw new PermanentError(`carrier rejected order ${p.n} for tenant t${p.n % 6}`);
      handled.push(ctx.messageId ?? '');
    });
    const ids: string[] = [];
    for (let n = 0; n < 60; n++) ids.push((await warren.publish('order.created', { n }, { headers: { tenant: `t${n % 6}` } })).messageId);
    const archive = new Archive(store);
    await waitFor(async () => (await archive.count({ consumer: 'billing' })) === 60, 'the 60 failures archived', 30_000);
    state.broken = false;

    const { url } = await serveConsole(topology, { store, archive, warren });
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    watchErrors(page);
    await page.goto(`${url}parked/billing`);
    await expect.poll(() => page.locator('#archive-count').textContent()).toBe('60');

    // Order 41 of tenant t5: the header narrows to 10, the error text to one.
    const form = page.locator('#filter');
    await form.locator('input[name="header"]').first().fill('tenant=t5');
    await form.locator('input[name="error"]').fill('order 41');
    await form.locator('button[data-action="filter"]').click();
    await page.waitForURL(/header=tenant%3Dt5/);
    await expect.poll(() => page.locator('#parked-matched').textContent()).toBe('1');
    const row = page.locator('#messages tbody tr');
    expect(await row.count()).toBe(1);
    expect(await row.getAttribute('data-message-id')).toBe(ids[41]);
    await screenshot(page, 'console-archive-filtered');

    await row.locator('td a').first().click();
    await page.waitForURL(/\/rows\/\d+$/);
    expect(await page.locator('[data-field="messageId"]').textContent()).toBe(ids[41]);
    await page.locator('button[data-action="replay-one"]').click();
    await page.waitForURL(/\/jobs\//);
    await expect.poll(() => page.locator('[data-field="state"]').textContent(), { timeout: 60_000 }).toBe('done');
    expect(await page.locator('[data-field="replayed"]').textContent()).toBe('1');
    await expect.poll(() => handled, { timeout: 30_000 }).toEqual([ids[41]]);

    // Back on the message: replayed, by whom (a token holder is recorded as its role), in its history.
    await page.goBack();
    await page.reload();
    await expect.poll(() => page.locator('#timeline tr[data-event]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-event')))).toEqual(['parked', 'replayed']);
    expect(await page.locator('#timeline tr[data-event="replayed"] [data-field="actor"]').textContent()).toBe('token:operator');
    await screenshot(page, 'console-archive-history');
    expect(await archive.count({ consumer: 'billing' })).toBe(59);
    // No other message was sent again.
    await new Promise((r) => setTimeout(r, 300));
    expect(handled).toEqual([ids[41]]);
  });
});
