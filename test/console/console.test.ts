// The console in Chromium against the real broker: the overview agrees with the management
// API, a parked group is canary-replayed and then replayed whole to its own consumer only,
// hostile text stays text, and the console refuses what it must refuse.
import { spawn } from 'node:child_process';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it, vi } from 'vitest';
import { PermanentError } from '../../src/errors.js';
import type { MessageContext } from '../../src/consume/types.js';
import { groupParked } from '../../src/park/message.js';
import { listParked } from '../../src/park/operations.js';
import { declared, fastConnection, peekIds, publishParked } from '../../src/park/testing/fixtures.js';
import { allowErrors, launchBrowser, screenshot, watchErrors } from '../browser.js';
import { AMQP_URL, connectWarren, MGMT_URL, onTeardown, testTopology, waitFor } from '../helpers.js';
import type { Topology } from '../../src/topology/declaration.js';
import { memoryActionLog } from '../../src/console/index.js';
import { managementConsumers, managementDepth, operator, OPERATOR_TOKEN, serveConsole, viewer } from './harness.js';

// Chromium's start and a page's first paint take seconds on a loaded two-core machine.
vi.setConfig({ testTimeout: 180_000 });

function watched(page: Parameters<typeof watchErrors>[0]): void {
  watchErrors(page);
}

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOC_IMAGES = join(ROOT, 'docs/images');
/** The README's two console images are taken anew only when asked: `WARREN_UPDATE_DOC_IMAGES=1`. */
const UPDATE_DOC_IMAGES = process.env['WARREN_UPDATE_DOC_IMAGES'] === '1';

describe('console in a browser', () => {
  it('the overview shows the depths, parked counts and consumers the broker reports', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [1000, 60_000], maxAttempts: 3 },
      consumers: {
        billing: { queue: name('billing'), bindings: ['order.created'] },
        email: { queue: name('email'), bindings: ['order.created'] },
        shipping: { queue: name('shipping'), bindings: ['order.paid'] },
      },
    }));
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const email = topology.consumer('email');
    const shipping = topology.consumer('shipping');
    await publishParked(conn, topology, billing, Array.from({ length: 4 }, (_, i) => ({ errorClass: 'HttpError', message: `carrier ${500 + i} down` })));
    await publishParked(conn, topology, email, [{ errorClass: 'TypeError', message: 'template is undefined' }]);
    const warren = await connectWarren(topology);
    for (let i = 0; i < 7; i++) await warren.publish('order.paid', { orderId: i });
    // email has a consumer; billing's and shipping's queues have none.
    await warren.consume('email', async () => undefined);
    const expected = { [billing.name]: { parked: 4 }, [email.name]: { parked: 1 }, [shipping.name]: { parked: 0 } };
    // The management API's statistics lag: wait until it reports what was published.
    // Every figure compared below, as each queue's statistics arrive on a tick of their own.
    const reported = async () => {
      for (const c of [billing, email, shipping]) {
        if ((await managementDepth(c.queue)) === undefined || (await managementConsumers(c.queue)) === undefined) return false;
        if ((await managementDepth(c.parkedQueue)) !== expected[c.name]?.parked) return false;
      }
      return (await managementDepth(shipping.queue)) === 7 && (await managementConsumers(email.queue)) === 1;
    };
    await waitFor(reported, 'the management API to report the queues', 30_000);

    const { url } = await serveConsole(topology);
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    watched(page);
    await page.goto(url);
    await page.waitForSelector('#consumers');
    for (const c of [billing, email, shipping]) {
      const row = page.locator(`#consumers tr[data-consumer="${c.name}"]`);
      const shown = {
        work: Number(await row.locator('[data-field="work"]').textContent()),
        parked: Number(await row.locator('[data-field="parked"]').textContent()),
        consumers: Number(await row.locator('[data-field="consumers"]').textContent()),
      };
      expect(shown).toEqual({ work: await managementDepth(c.queue), parked: await managementDepth(c.parkedQueue), consumers: await managementConsumers(c.queue) });
      expect(shown.parked).toBe(expected[c.name]?.parked);
    }
    expect(await page.locator('#problems li').count()).toBeGreaterThan(0);
    await expect.poll(() => page.locator('#problems li[data-consumer="' + billing.name + '"]').count()).toBeGreaterThan(0);
    const shot = await screenshot(page, 'console-overview');
    if (UPDATE_DOC_IMAGES) copyFileSync(shot, join(DOC_IMAGES, 'console-overview.png'));
  });

  it("a chart's time axis spans its samples: one sample shows a few minutes around it, not years", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    await declared(topology);
    // One sample (taken at start), and no second one while the test runs.
    const { url } = await serveConsole(topology, { sampleIntervalMs: 3_600_000 });
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    watched(page);
    await page.goto(url);
    const chart = page.locator(`[data-chart="${topology.consumer('billing').name}"]`);
    await waitFor(async () => (await chart.getAttribute('data-x-max')) !== null, 'the chart to be drawn');
    const min = Number(await chart.getAttribute('data-x-min'));
    const max = Number(await chart.getAttribute('data-x-max'));
    const now = Date.now() / 1000;
    expect(max - min, `${min}..${max}`).toBeGreaterThanOrEqual(60);
    expect(max - min, `${min}..${max}`).toBeLessThanOrEqual(3600);
    expect(min).toBeLessThan(now);
    expect(max).toBeGreaterThan(now - 3600);
  });

  it('a parked group is canary-replayed, then replayed whole: each message reaches only the consumer that failed, and the parked count drops to zero', async () => {
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: [20], maxAttempts: 2 },
      consumers: {
        billing: { queue: name('billing'), bindings: ['order.created'] },
        email: { queue: name('email'), bindings: ['order.created'] },
      },
    }));
    const warren = await connectWarren(topology);
    const state = { broken: true };
    const billingDone: string[] = [];
    const emailSeen: string[] = [];
    await warren.consume('billing', async (_p: unknown, ctx: MessageContext) => {
      if (state.broken) throw new PermanentError(`carrier rejected order ${ctx.messageId ?? ''}`);
      billingDone.push(ctx.messageId ?? '');
    });
    await warren.consume('email', async (_p: unknown, ctx: MessageContext) => void emailSeen.push(ctx.messageId ?? ''));
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push((await warren.publish('order.created', { orderId: i })).messageId);
    const conn = await fastConnection();
    const billing = topology.consumer('billing');
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 10, 'ten parked');
    await waitFor(() => emailSeen.length === 10, 'email took each once');
    const [group] = groupParked((await listParked(conn, billing)).messages);
    expect(group?.count).toBe(10);
    state.broken = false;

    const { url } = await serveConsole(topology);
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    watched(page);
    await page.goto(`${url}parked/billing`);
    const row = page.locator(`#groups tr[data-fingerprint="${group?.fingerprint ?? ''}"]`);
    await row.waitFor();
    const groupShot = await screenshot(page, 'console-parked-group');
    if (UPDATE_DOC_IMAGES) copyFileSync(groupShot, join(DOC_IMAGES, 'console-parked-group.png'));
    const canary = row.locator('form[action$="/canary"]');
    await canary.locator('input[name="n"]').fill('3');
    await canary.locator('input[name="window"]').fill('2');
    await canary.locator('button[data-action="canary"]').click();
    await page.waitForURL(/\/jobs\//);
    await expect.poll(() => page.locator('[data-field="state"]').textContent(), { timeout: 60_000 }).toBe('awaiting-decision');
    // The window's end is the verdict, handled or not: give the handlers time of their own.
    await expect.poll(() => billingDone.length, { timeout: 30_000 }).toBe(3);
    expect(billingDone.sort()).toEqual(ids.slice(0, 3).sort());
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(3));
    await screenshot(page, 'console-canary-decision');

    await page.locator('#canary-decision button[data-action="continue"]').click();
    await expect.poll(() => page.locator('[data-field="state"]').textContent(), { timeout: 60_000 }).toBe('done');
    await waitFor(() => billingDone.length === 10, 'billing handled all ten');
    expect([...billingDone].sort()).toEqual([...ids].sort());
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([]);
    await screenshot(page, 'console-canary-done');
    await page.goto(`${url}parked/billing`);
    await expect.poll(async () => (await peekIds(conn, billing.parkedQueue)).length).toBe(0);
    await screenshot(page, 'console-parked-empty');
    // email never got a replayed copy.
    await new Promise((r) => setTimeout(r, 300));
    expect(emailSeen.sort()).toEqual([...ids].sort());
  });

  it('a hostile body and error render as text: no script runs', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const img = '<img src=x onerror=window.__pwned=1>';
    const script = '</script><script>window.__pwned=2</script>';
    await publishParked(conn, topology, billing, [{ id: 'hostile-1', errorClass: 'HttpError', message: `${img} ${script}`, body: { note: `${img} ${script}` } }]);
    const { url } = await serveConsole(topology);
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    watched(page);
    // The page's CSP reports a blocked inline handler as a console error; none must run either way.
    allowErrors(page, /Content Security Policy/i);
    for (const path of ['parked/billing', 'parked/billing/messages/hostile-1']) {
      await page.goto(`${url}${path}`);
      await page.waitForLoadState('load');
      await expect(page.evaluate(() => (globalThis as unknown as { __pwned?: unknown }).__pwned)).resolves.toBeUndefined();
      expect(await page.locator('body').innerText()).toContain(img);
      expect(await page.locator('body').innerText()).toContain('</script><script>window.__pwned=2</script>');
      expect(await page.locator('img[src="x"]').count()).toBe(0);
      await screenshot(page, path === 'parked/billing' ? 'console-hostile-list' : 'console-hostile-message');
    }
  });

  it("another site's page (on 127.0.0.2) gets nothing from a console open to anyone on loopback: its <img>s and no-cors fetches are refused before any work", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    await publishParked(conn, topology, billing, [{ errorClass: 'HttpError' }, { errorClass: 'HttpError' }]);
    const log = memoryActionLog();
    // As warren console on loopback without an auth method: anyone who reaches it is an operator.
    const { url } = await serveConsole(topology, { authorize: () => ({ user: 'local', role: 'operator' }), actionLog: log });
    const target = `${url}parked/${encodeURIComponent(billing.name)}`;
    const attacker = createHttpServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<!doctype html><title>cute cats</title>
<img src="${target}"><img src="${target}/export"><img src="${target}?error=%2F%5E(a%2B)%2B%24%2F">
<script>fetch(${JSON.stringify(`${target}/export`)}, { method: 'POST', mode: 'no-cors', credentials: 'include', body: new URLSearchParams({ scope: 'filter' }) }).catch(() => {}).then(() => { document.title = 'done'; });</script>`);
    });
    await new Promise<void>((r) => attacker.listen(0, '127.0.0.2', () => r()));
    onTeardown(() => new Promise<void>((r) => {
      attacker.closeAllConnections();
      attacker.close(() => r());
    }));
    const { context } = await launchBrowser();
    const page = await context.newPage();
    watched(page);
    allowErrors(page, /Failed to load resource|403/);
    // Chromium blocks an image's text answer before the page sees it (ORB): what was asked is counted apart.
    const asked: string[] = [];
    page.on('request', (r) => {
      if (r.url().startsWith(url)) asked.push(r.url());
    });
    const answers: { url: string; status: number }[] = [];
    page.on('response', (r) => {
      if (r.url().startsWith(url)) answers.push({ url: r.url(), status: r.status() });
    });
    await page.goto(`http://127.0.0.2:${(attacker.address() as AddressInfo).port}/`);
    await page.waitForFunction(() => (globalThis as unknown as { document: { title: string } }).document.title === 'done');
    await page.waitForLoadState('load');
    expect(asked.length, JSON.stringify(asked)).toBe(4);
    expect(answers.filter((a) => a.status !== 403), JSON.stringify(answers)).toEqual([]);
    expect(await log.list({ limit: 10 })).toEqual([]);
    // Nothing read the parked queue: its first message was never delivered.
    const ch = await conn.createChannel();
    const first = await ch.get(billing.parkedQueue, { noAck: false });
    expect(first && first.fields.redelivered).toBe(false);
    if (first) ch.nack(first, false, true);
    await ch.close();
  });

  it('refuses a POST without the CSRF token, and a viewer cannot replay', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ids = await publishParked(conn, topology, billing, [{ errorClass: 'HttpError' }, { errorClass: 'HttpError' }]);
    const { url } = await serveConsole(topology);
    const { browser } = await launchBrowser();

    const op = await browser.newContext({ httpCredentials: operator() });
    onTeardown(() => op.close());
    const noToken = await op.request.post(`${url}parked/billing/replay`, { form: { scope: 'filter' }, maxRedirects: 0 });
    expect(noToken.status()).toBe(403);
    expect(await noToken.text()).toMatch(/CSRF/);

    const view = await browser.newContext({ httpCredentials: viewer() });
    onTeardown(() => view.close());
    const page = await view.newPage();
    watched(page);
    await page.goto(`${url}parked/billing`);
    await page.locator('#groups').waitFor();
    expect(await page.locator('[data-action="replay-group"], [data-action="canary"], [data-action="replay-filter"]').count()).toBe(0);
    await screenshot(page, 'console-parked-viewer');
    const csrf = await page.locator('meta[name="warren-csrf"]').getAttribute('content');
    const refused = await view.request.post(`${url}parked/billing/replay`, { form: { scope: 'filter', _csrf: csrf ?? '' }, maxRedirects: 0 });
    expect(refused.status()).toBe(403);
    expect(await refused.text()).toMatch(/viewer/);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });

  it('a page load logs no error, the icon request included', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    await declared(topology);
    const { url } = await serveConsole(topology);
    const { context } = await launchBrowser();
    await context.setHTTPCredentials(operator());
    const page = await context.newPage();
    const errors = watchErrors(page);
    await page.goto(url);
    await page.locator('#consumers').waitFor();
    await page.waitForLoadState('networkidle');
    const seen = [...errors.messages];
    errors.messages.length = 0;
    expect(seen).toEqual([]);
  });

  it('warren console on a non-loopback address refuses a request without the token', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    await declared(topology);
    // 0.0.0.0 is not loopback; requests still go to 127.0.0.1 only.
    const url = await cliConsole(topology, ['--listen', '0.0.0.0:0'], { WARREN_CONSOLE_TOKEN: OPERATOR_TOKEN });
    const bare = await fetch(url);
    expect(bare.status).toBe(401);
    expect(bare.headers.get('www-authenticate')).toMatch(/^Basic/);
    const wrong = await fetch(url, { headers: { authorization: `Bearer ${'x'.repeat(32)}` } });
    expect(wrong.status).toBe(401);

    const { context } = await launchBrowser();
    await context.setHTTPCredentials({ username: 'alice', password: OPERATOR_TOKEN });
    const page = await context.newPage();
    watched(page);
    const res = await page.goto(url);
    expect(res?.status()).toBe(200);
    await page.locator('#consumers').waitFor();
  });

  it('warren console names the broker it connected to: host and port of the node of --url that answered, never a password', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } } }));
    await declared(topology);
    const broker = new URL(AMQP_URL);
    // The first node refuses the connection; the second is the broker under test.
    const dead = await deadPort();
    const url = await cliConsole(topology, ['--listen', '127.0.0.1:0', '--url', `amqp://${broker.username}:${broker.password}@127.0.0.1:${dead}${broker.pathname},${broker.host}`]);
    const footerOf = async (): Promise<{ html: string; footer: string | undefined }> => {
      const res = await fetch(url);
      expect(res.status).toBe(200);
      const html = await res.text();
      return { html, footer: /<span id="broker">([^<]*)<\/span>/.exec(html)?.[1] };
    };
    let { html, footer } = await footerOf();
    // The console connects before it gives its address. Should that first attempt fail (a
    // busy machine past --connect-timeout), it says so on stderr and the pages try again;
    // a page that says "not connected" without that note is a fault.
    if (footer?.startsWith('broker not connected')) {
      expect(consoleErr.get(url)?.() ?? '', 'the console said nothing of a failed connection, yet its page says it is not connected').toContain('note: not connected to RabbitMQ yet');
      await waitFor(async () => {
        ({ html, footer } = await footerOf());
        return footer !== undefined && !footer.startsWith('broker not connected');
      }, 'the console to connect on a later page');
    }
    expect(footer).toMatch(new RegExp(`^broker ${broker.host.replace(/\./g, '\\.')} \\(RabbitMQ [\\d.]+, node 2 of 2 in --url\\)$`));
    expect(html).not.toContain("application's connection");
    expect(html).not.toContain(`:${broker.password}@`);

    const { context } = await launchBrowser();
    const page = await context.newPage();
    watched(page);
    await page.goto(url);
    await page.locator('#consumers').waitFor();
    expect(await page.locator('#broker').textContent()).toBe(footer);

    // No node answers: the console still serves, and says it is not connected, to which nodes.
    const down = await cliConsole(topology, ['--listen', '127.0.0.1:0', '--url', `amqp://ops:S3cret-pw@127.0.0.1:${dead}/shop,127.0.0.1:${dead + 1}`, '--management-url', `http://127.0.0.1:${dead}`]);
    const unreachable = await (await fetch(down)).text();
    expect(/<span id="broker">([^<]*)<\/span>/.exec(unreachable)?.[1]).toBe(`broker not connected (--url 127.0.0.1:${dead}, 127.0.0.1:${dead + 1})`);
    expect(unreachable).not.toContain('S3cret-pw');
  });
});

/** A port on this machine where nothing listens. */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Starts the built `warren console` on the topology with these flags (stopped after the test); resolves to its URL on 127.0.0.1. */
async function cliConsole(topology: Topology, args: readonly string[], env: Record<string, string> = {}): Promise<string> {
  const dir = join(ROOT, '.warren/test-results');
  mkdirSync(dir, { recursive: true });
  const modPath = join(dir, `topology-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.mjs`);
  const consumers = Object.fromEntries([...topology.consumers.values()].map((c) => [c.name, { queue: c.queue, bindings: [...c.bindings] }]));
  writeFileSync(modPath, `export default ${JSON.stringify({ exchange: topology.exchange, consumers })};\n`);
  onTeardown(async () => rmSync(modPath, { force: true }));
  const child = spawn(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'console', '-t', modPath, ...args], {
    env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  onTeardown(async () => {
    child.kill('SIGTERM');
    await exited;
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`warren console did not start: ${stderr}`)), 90_000);
    createInterface({ input: child.stdout }).on('line', (l) => {
      if (l.startsWith('warren console:')) {
        clearTimeout(timer);
        resolve(l);
      }
    });
    child.once('exit', () => reject(new Error(`warren console exited: ${stderr}`)));
  });
  const port = /:(\d+)\//.exec(line)?.[1];
  const url = `http://127.0.0.1:${port}/`;
  consoleErr.set(url, () => stderr);
  return url;
}

/** What each console started by {@link cliConsole} has written to stderr so far, by its address. */
const consoleErr = new Map<string, () => string>();
