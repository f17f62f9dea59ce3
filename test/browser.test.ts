// The launcher itself: Debian's Chromium runs headless, a page error fails the test, and
// screenshots land in .warren/test-results/screenshots (git-ignored).
import { existsSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it, vi } from 'vitest';
import { allowErrors, launchBrowser, screenshot, watchErrors } from './browser.js';
import { onTeardown } from './helpers.js';

// Chromium takes tens of seconds to start on a loaded two-core machine.
vi.setConfig({ testTimeout: 120_000 });

async function serve(html: string): Promise<string> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end(html);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTeardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

describe('test browser', () => {
  it('runs Debian Chromium headless and saves a screenshot', async () => {
    const { page, browser } = await launchBrowser();
    expect(browser.version()).toMatch(/^\d+\./);
    const p = await page();
    await p.goto(await serve('<!doctype html><title>t</title><h1>warren</h1>'));
    expect(await p.textContent('h1')).toBe('warren');
    const path = await screenshot(p, 'launcher-self-test');
    expect(existsSync(path) && statSync(path).size > 0).toBe(true);
    expect(path).toContain('.warren/test-results/screenshots/launcher-self-test.png');
  });

  it('collects console errors and page errors, which fail the test unless allowed', async () => {
    const { page } = await launchBrowser();
    // An icon of its own, so Chromium asks the server for no /favicon.ico that could fail after the test.
    const html = '<!doctype html><link rel="icon" href="data:,"><script>console.error("broken on purpose"); setTimeout(() => { throw new Error("boom on purpose"); }, 0);</script>';
    const url = await serve(html);
    const r = await page();
    const errors = watchErrors(r);
    await r.goto(url);
    await expect.poll(() => errors.messages.length).toBe(2);
    expect(errors.messages.join('\n')).toMatch(/console error: broken on purpose[\s\S]*page error: boom on purpose/);
    expect(() => errors.check()).toThrow(/2 error/);
    // Emptied, so the after-test check passes: this test provoked them.
    errors.messages.length = 0;

    const allowed = await page();
    allowErrors(allowed, /on purpose/);
    const seen: string[] = [];
    allowed.on('pageerror', (e) => void seen.push(e.message));
    await allowed.goto(url);
    await expect.poll(() => seen.length).toBe(1);
    expect(watchErrors(allowed).messages).toEqual([]);
  });
});
