// The console against an attacker: patterns that would stall it, requests from other
// sites, secrets in URLs, a forged or failing action record, and the smaller leaks.
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { run } from '../cli/run.js';
import { redactUrl, redactUrls } from '../connection/url.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { CSP, memoryActionLog, nodeListener } from './index.js';
import type { ConsoleUser } from './auth.js';
import { csrfOf, get, OPERATOR, post, testConsole, VIEWER } from './testing/harness.js';

function billingTopology() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
  }));
}

describe('console security: error patterns', () => {
  it('a pattern that would backtrack for hours is matched in linear time, and every other request is answered meanwhile', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    // With a backtracking engine, 2^40 ways to split the a's: the process would never answer again.
    await publishParked(conn, topology, billing, [{ id: 'aaa', message: `${'a'.repeat(40)}!` }, { id: 'order', message: 'order 4242 has no customer' }]);
    const ops = testConsole(topology);
    const [stalled, other] = await Promise.all([
      get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(a+)+$/')}`, VIEWER),
      get(ops, '/api/history', VIEWER),
      get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(.+)+X$/')}`, VIEWER),
    ]);
    expect(stalled.status).toBe(200);
    expect(stalled.text).toMatch(/<b id="parked-total">2<\/b> parked, <b id="parked-matched">0<\/b> match/);
    expect(other.status).toBe(200);
    const found = await get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(a+)+!$/')}`, VIEWER);
    expect(found.text).toMatch(/<b id="parked-matched">1<\/b>/);
    expect(found.text).toContain('data-message-id="aaa"');
  });

  it('a pattern outside the subset is refused with 400, naming the field and what is not supported', async () => {
    const topology = billingTopology();
    await declared(topology);
    const ops = testConsole(topology);
    for (const [pattern, what] of [
      ['/(a)\\1/', /a back-reference \\1 at character 4, which is not supported/],
      ['/(?=a)b/', /a lookahead \(\?=…\)/],
      ['/a/g', /the flag g, which is not supported/],
      [`/${'a'.repeat(300)}/`, /300 characters long, more than 256/],
      ['/(?:a{100}){100}/', /larger than 4000 steps/],
    ] as const) {
      const res = await get(ops, `/parked/${topology.consumer('billing').name}?error=${encodeURIComponent(pattern)}`, VIEWER);
      expect(res.status, pattern).toBe(400);
      expect(res.text, pattern).toMatch(/Invalid option `error`/);
      expect(res.text.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&'), pattern).toMatch(what);
    }
  });
});

/** A request as a browser would send it, with the given fetch-metadata and origin headers. */
async function ask(ops: ReturnType<typeof testConsole>, method: 'GET' | 'HEAD', path: string, headers: Record<string, string> = {}, user: ConsoleUser = OPERATOR) {
  const res = await ops.fetch(new Request(`http://console.test${ops.basePath}${path}`, { method, headers: { 'x-test-user': user.user, ...headers } }));
  return { status: res.status, text: await res.text(), headers: res.headers };
}

describe('console security: requests from other sites', () => {
  it("another site's <img src=…/export> exports nothing and records nothing; HEAD does no work; the export is a POST of the console's own page", async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    await publishParked(conn, topology, billing, failures(2));
    const log = memoryActionLog();
    const ops = testConsole(topology, { actionLog: log });
    const exportPath = `/parked/${billing.name}/export`;
    // What Chromium sends for an <img> on another site.
    const img = await ask(ops, 'GET', exportPath, { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors', 'sec-fetch-dest': 'image' });
    expect(img.status).toBe(403);
    expect(img.text).toMatch(/another site/);
    // A browser without fetch metadata still sends Origin on a cross-origin fetch.
    expect((await ask(ops, 'GET', exportPath, { origin: 'http://evil.example' })).status).toBe(403);
    // A GET never exports, even a direct one: the export is a POST.
    const direct = await ask(ops, 'GET', exportPath);
    expect(direct.text).not.toContain('m-0000');
    // HEAD answers headers only, and does nothing: no export, no purge count, no reading of the queue.
    for (const path of [exportPath, `/parked/${billing.name}`, `/parked/${billing.name}/purge`, `/parked/${billing.name}/messages/m-00001`]) {
      const head = await ask(ops, 'HEAD', path);
      expect(head.status, path).toBe(200);
      expect(head.text, path).toBe('');
      expect(head.headers.get('content-security-policy'), path).toContain("default-src 'self'");
    }
    // A cross-site POST of the export is refused like any other.
    expect((await post(ops, exportPath, {}, { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(403);
    expect(await log.list({ limit: 10 })).toEqual([]);
    // Nothing above read the parked queue: its first message was never delivered to anyone.
    const ch = await conn.createChannel();
    const first = await ch.get(billing.parkedQueue, { noAck: false });
    expect(first && first.fields.redelivered).toBe(false);
    if (first) ch.nack(first, false, true);
    await ch.close();

    // From the console's own page: the export, recorded; a viewer may export too.
    const own = await post(ops, exportPath, {}, { headers: { 'sec-fetch-site': 'same-origin', origin: 'http://console.test' } });
    expect(own.status).toBe(200);
    expect(own.text.trim().split('\n').length).toBe(2);
    const viewer = await post(ops, exportPath, {}, { user: VIEWER, csrf: await csrfOf(ops, VIEWER) });
    expect(viewer.status).toBe(200);
    expect((await log.list({ limit: 10 })).map((r) => [r.action, r.actor, r.outcome, r.count])).toEqual([
      ['parked.export', VIEWER.user, 'ok', 2],
      ['parked.export', VIEWER.user, 'started', 0],
      ['parked.export', OPERATOR.user, 'ok', 2],
      ['parked.export', OPERATOR.user, 'started', 0],
    ]);
    // The page offers the export and the purge as forms that POST, never as links.
    const page = await get(ops, `/parked/${billing.name}`);
    expect(page.text).not.toMatch(/<a [^>]*href="[^"]*\/(export|purge)/);
    expect(page.text).toMatch(/<form [^>]*method="post" action="[^"]*\/export"/);
    expect(page.text).toMatch(/<form [^>]*method="post" action="[^"]*\/purge\/filter"/);
    expect((await get(ops, `/parked/${billing.name}`, VIEWER)).text).toMatch(/<form [^>]*method="post" action="[^"]*\/export"/);
  });

  it('pages answer only to their own origin or to a direct request, with a 403 that says why', async () => {
    const topology = billingTopology();
    await declared(topology);
    const ops = testConsole(topology);
    for (const [headers, status] of [
      [{}, 200],
      [{ 'sec-fetch-site': 'none' }, 200],
      [{ 'sec-fetch-site': 'same-origin', origin: 'http://console.test' }, 200],
      [{ 'sec-fetch-site': 'same-site' }, 403],
      [{ 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' }, 403],
      [{ origin: 'http://evil.example' }, 403],
      [{ origin: 'https://console.test' }, 403],
      [{ origin: 'null' }, 403],
      // Behind a proxy: the browser's origin is the proxy's, which it names in X-Forwarded-*.
      [{ origin: 'https://ops.example', 'x-forwarded-host': 'ops.example', 'x-forwarded-proto': 'https' }, 200],
    ] as const) {
      const res = await ask(ops, 'GET', '/', headers);
      expect(res.status, JSON.stringify(headers)).toBe(status);
      if (status === 403) expect(res.text, JSON.stringify(headers)).toMatch(/^Refused: .*(another site|another origin).*open the console/);
    }
    // The same rule for a POST.
    expect((await post(ops, `/parked/${topology.consumer('billing').name}/replay`, { scope: 'filter' }, { headers: { 'sec-fetch-site': 'same-site' } })).status).toBe(403);
  });
});

/** A password with every character that breaks URL parsing raw in it. */
const RAW = 'pw/S3C@R:T#Z9';
const PIECES = ['S3C', 'R:T', 'T#Z9', 'pw/'];

function leaks(text: string): string[] {
  return PIECES.filter((p) => text.includes(p));
}

function cliIo() {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    io: { stdout: stdout as unknown as NodeJS.WriteStream, stderr: stderr as unknown as NodeJS.WriteStream, stdin: new PassThrough() as unknown as NodeJS.ReadStream, env: {}, cwd: process.cwd() },
    text: () => ({ out, err }),
  };
}

describe('console security: passwords in URLs', () => {
  it('masks everything between :// and the last @, whatever the password holds', () => {
    for (const [url, shown] of [
      [`amqp://sec:${RAW}@127.0.0.1:5672/prod`, 'amqp://sec:***@127.0.0.1:5672/prod'],
      [`postgres://app:${RAW}@db.internal/shop?sslmode=require`, 'postgres://app:***@db.internal/shop?sslmode=require'],
      [`http://ops:${RAW}@rabbit-1:15672`, 'http://ops:***@rabbit-1:15672'],
      ['amqp://u:p%40ss@h/v', 'amqp://u:***@h/v'],
      ['postgres://app@db/shop?password=s3cret&x=1', 'postgres://app@db/shop?password=***&x=1'],
      ['amqp://127.0.0.1:5672', 'amqp://127.0.0.1:5672'],
      // A user part that is no plain user name is masked with the rest.
      [`amqp://a/b@${RAW}@h:5672`, 'amqp://***@h:5672'],
    ] as const) {
      expect(redactUrl(url), url).toBe(shown);
    }
    const text = `connect to amqp://sec:${RAW}@127.0.0.1:1/prod failed ("postgres://app:${RAW}@db/x"), also amqp://u:p@h`;
    expect(redactUrls(text)).toBe('connect to amqp://sec:***@127.0.0.1:1/prod failed ("postgres://app:***@db/x"), also amqp://u:***@h');
  });

  it('never shows such a password on a page, in the JSON or on an error page', async () => {
    const topology = billingTopology();
    // A broker that does not answer, so the pages also show the connection errors.
    const ops = testConsole(topology, { url: `amqp://sec:${RAW}@127.0.0.1:1/prod`, management: false, databaseName: `postgres://app:${RAW}@db.internal/shop` });
    const page = await get(ops, '/');
    expect(page.status).toBe(200);
    expect(page.text).toContain('broker amqp://sec:***@127.0.0.1:1/prod');
    expect(page.text).toContain('database postgres://app:***@db.internal/shop');
    const billing = topology.consumer('billing').name;
    for (const path of ['/', '/api/overview', '/parked', `/parked/${billing}`, `/parked/${billing}/messages/m-1`]) {
      const res = await get(ops, path);
      expect(leaks(res.text), path).toEqual([]);
    }
    const parked = await get(ops, `/parked/${billing}`);
    expect(parked.status).toBeGreaterThanOrEqual(400);
    expect(parked.text).toContain('id="error"');
  });

  it('warren console prints such a password of --management-url, --db or --url masked when it refuses to start', async () => {
    for (const [flags, shown] of [
      [['--management-url', `http://ops:${RAW}@127.0.0.1:15672`], 'http://ops:***@127.0.0.1:15672'],
      [['--db', `postgres://app:${RAW}@127.0.0.1:5432/test`], 'postgres://app:***@127.0.0.1:5432/test'],
      [['--url', `amqp://guest:${RAW}@127.0.0.1:5672`], 'amqp://guest:***@127.0.0.1:5672'],
    ] as const) {
      const t = cliIo();
      const code = await run(['console', '-t', 'examples/topology.ts', '--listen', '127.0.0.1:0', ...flags], t.io);
      expect(code, flags[0]).toBe(2);
      expect(t.text().err, flags[0]).toContain(shown);
      expect(leaks(t.text().err + t.text().out), flags[0]).toEqual([]);
    }
  });
});

/** A console behind node:http under /ops, on a port of its own. */
async function served(options: Parameters<typeof testConsole>[1] = {}) {
  const topology = billingTopology();
  await declared(topology);
  const ops = testConsole(topology, { basePath: '/ops', ...options });
  const server = createServer(nodeListener(ops.fetch));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  onTeardown(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return { ops, topology, port: (server.address() as AddressInfo).port };
}

/**
 * Sends `head` (and `body`, if any) on a socket of its own and returns what comes back
 * once the server answers, closing the socket without sending the rest.
 */
function raw(port: number, head: string, body: Buffer = Buffer.alloc(0)): Promise<{ status: number; headers: string; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    const done = () => {
      const [headers = '', ...rest] = got.split('\r\n\r\n');
      socket.destroy();
      resolve({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(headers)?.[1]), headers: headers.toLowerCase(), text: rest.join('\r\n\r\n') });
    };
    socket.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      const end = got.indexOf('\r\n\r\n');
      if (end < 0) return;
      const length = /content-length: (\d+)/i.exec(got.slice(0, end))?.[1];
      if (length === undefined || got.length >= end + 4 + Number(length) || /transfer-encoding: chunked/i.test(got.slice(0, end)) && got.endsWith('0\r\n\r\n')) done();
    });
    socket.on('end', done);
    socket.on('error', (e) => (got ? done() : reject(e)));
    socket.write(head);
    if (body.length > 0) socket.write(body);
  });
}

describe('console security: the smaller leaks', () => {
  it('a form POST over the body limit is refused with 413 before the CSRF check, without reading the rest of it', async () => {
    const { ops, topology, port } = await served();
    const path = `/ops/parked/${topology.consumer('billing').name}/replay`;
    // 64 MiB announced, 256 KiB sent: the answer comes without the rest.
    const big = await raw(port, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-test-user: alice\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${64 * 1024 * 1024}\r\n\r\n`, Buffer.alloc(256 * 1024, 'a'));
    expect(big.status).toBe(413);
    expect(big.text).toMatch(/larger than 65536 bytes/);
    expect(big.headers).toContain(`content-security-policy: ${CSP.toLowerCase()}`);
    // Chunked, with no length announced: cut off once past the limit too.
    const chunk = Buffer.alloc(32 * 1024, 'a');
    const chunks = Buffer.concat([0, 1, 2, 3].flatMap(() => [Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')]));
    const chunked = await raw(port, `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-test-user: alice\r\ncontent-type: application/x-www-form-urlencoded\r\ntransfer-encoding: chunked\r\n\r\n`, chunks);
    expect(chunked.status).toBe(413);
    // Under the limit, the same POST without a token is the CSRF check's.
    const small = await post(ops, path.replace('/ops', ''), { scope: 'filter', pad: 'a'.repeat(60_000) }, { csrf: false });
    expect(small.status).toBe(403);
    // The limit is an option.
    const { topology: t2, port: p2 } = await served({ maxBodyBytes: 1024 });
    const over = await raw(p2, `POST /ops/parked/${t2.consumer('billing').name}/replay HTTP/1.1\r\nHost: 127.0.0.1:${p2}\r\nx-test-user: alice\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 2048\r\n\r\n`, Buffer.alloc(2048, 'a'));
    expect(over.status).toBe(413);
  });

  it("the adapter's own answers (TRACE, an absolute-form URL) and a 404 outside the base path carry the security headers and never echo the URL", async () => {
    const { port } = await served();
    for (const [head, status] of [
      [`TRACE /ops/ HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-test-user: alice\r\n\r\n`, 405],
      [`GET http://evil.example/<script>alert(1)</script> HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-test-user: alice\r\n\r\n`, 400],
      [`GET /elsewhere/<b>x</b> HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nx-test-user: alice\r\n\r\n`, 404],
      [`GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`, 404],
    ] as const) {
      const res = await raw(port, head);
      const line = head.split('\r\n')[0] as string;
      expect(res.status, line).toBe(status);
      expect(res.headers, line).toContain(`content-security-policy: ${CSP.toLowerCase()}`);
      expect(res.headers, line).toContain('x-content-type-options: nosniff');
      expect(res.headers, line).toContain('x-frame-options: deny');
      expect(res.headers, line).toContain('cache-control: no-store');
      expect(res.text, line).not.toMatch(/evil\.example|<script>|<b>|elsewhere/);
    }
  });
});

describe('console security: a trusted header beyond loopback', () => {
  it('warren console --listen 0.0.0.0 --trusted-header refuses to start, saying why, unless --trust-proxy-only is given', async () => {
    const t = cliIo();
    expect(await run(['console', '-t', 'examples/topology.ts', '--listen', '0.0.0.0:0', '--trusted-header', 'x-forwarded-user', '--trusted-role-header', 'x-forwarded-role'], t.io)).toBe(2);
    expect(t.text().err).toMatch(/anyone who can reach that address can send the header x-forwarded-user \(and x-forwarded-role: operator\)/);
    expect(t.text().err).toMatch(/Give --trust-proxy-only once nothing but the authenticating proxy can reach it/);
    const alone = cliIo();
    expect(await run(['console', '-t', 'examples/topology.ts', '--trust-proxy-only'], alone.io)).toBe(2);
    expect(alone.text().err).toMatch(/--trust-proxy-only goes with --trusted-header/);

    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'console', '-t', 'examples/topology.ts', '--listen', '0.0.0.0:0', '--trusted-header', 'x-forwarded-user', '--trust-proxy-only'], {
      env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    onTeardown(async () => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    await waitFor(() => /http:\/\/0\.0\.0\.0:\d+\//.test(out) || child.exitCode !== null, 'the console to print its URL', 30_000);
    const port = /http:\/\/0\.0\.0\.0:(\d+)\//.exec(out)?.[1];
    expect(port, out).toBeDefined();
    const page = await fetch(`http://127.0.0.1:${port}/actions`, { headers: { 'x-forwarded-user': 'bob' } });
    expect(await page.text()).toContain('bob (viewer)');
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 60_000);
});
