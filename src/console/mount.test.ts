import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { run } from '../cli/run.js';
import { declared, publishParked } from '../park/testing/fixtures.js';
import { nodeListener, type WarrenConsole } from './index.js';
import { testConsole } from './testing/harness.js';

function listen(server: Server): Promise<string> {
  return new Promise((done) => {
    server.listen(0, '127.0.0.1', () => done(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
    onTeardown(() => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }));
  });
}

/** Reads a page, takes its CSRF token, and posts a form with it and without it, all through the real server. */
async function exercise(base: string, ops: WarrenConsole, consumer: string): Promise<void> {
  const headers = { 'x-test-user': 'alice' };
  const page = await fetch(`${base}/ops/`, { headers });
  expect(page.status).toBe(200);
  const html = await page.text();
  expect(html).toContain('src="/ops/assets/console.js"');
  expect(html).toContain(`href="/ops/parked/${consumer}"`);
  const js = await fetch(`${base}/ops/assets/console.js`, { headers });
  expect(js.status).toBe(200);
  expect(js.headers.get('content-type')).toContain('javascript');
  const parked = await fetch(`${base}/ops/parked/${consumer}`, { headers });
  expect(await parked.text()).toContain('id="parked-total">1<');
  const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(html)?.[1] as string;
  const url = `${base}/ops/parked/${consumer}/replay`;
  const without = await fetch(url, { method: 'POST', headers, body: new URLSearchParams({ scope: 'selected', id: 'x-1' }), redirect: 'manual' });
  expect(without.status).toBe(403);
  const withToken = await fetch(url, { method: 'POST', headers, body: new URLSearchParams({ scope: 'selected', id: 'x-1', _csrf: csrf }), redirect: 'manual' });
  expect(withToken.status).toBe(303);
  expect(withToken.headers.get('location')).toMatch(/^\/ops\/jobs\/[0-9a-f-]+$/);
  expect(ops.basePath).toBe('/ops');
}

async function setup() {
  const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
  const conn = await declared(topology);
  await publishParked(conn, topology, topology.consumer('billing'), [{ id: 'x-1' }]);
  return { ops: testConsole(topology, { basePath: '/ops' }), consumer: topology.consumer('billing').name };
}

describe('console: mounted in a server under a path prefix', () => {
  it('node:http', async () => {
    const { ops, consumer } = await setup();
    const base = await listen(createServer(nodeListener(ops.fetch)));
    await exercise(base, ops, consumer);
  });

  it('Express (app.use strips the prefix from req.url; the listener reads originalUrl)', async () => {
    const { ops, consumer } = await setup();
    const app = express();
    app.use('/ops', nodeListener(ops.fetch));
    const base = await listen(createServer(app));
    await exercise(base, ops, consumer);
  });

  it('Express with a body parser in front (as NestJS has by default): the listener rebuilds the form it parsed', async () => {
    const { ops, consumer } = await setup();
    const app = express();
    app.use(express.urlencoded({ extended: false }));
    app.use('/ops', nodeListener(ops.fetch));
    const base = await listen(createServer(app));
    await exercise(base, ops, consumer);
  });

  it('Fastify', async () => {
    const { ops, consumer } = await setup();
    const app = Fastify();
    const listener = nodeListener(ops.fetch);
    await app.register(async (f) => {
      // The console reads its own bodies: Fastify's parsers must leave them alone.
      f.removeAllContentTypeParsers();
      f.addContentTypeParser('*', (_req, _payload, done) => done(null));
      f.all('/ops/*', (req, reply) => {
        reply.hijack();
        listener(req.raw, reply.raw);
      });
    });
    const base = await app.listen({ port: 0, host: '127.0.0.1' });
    onTeardown(() => app.close());
    await exercise(base, ops, consumer);
  });

  it('Hono', async () => {
    const { ops, consumer } = await setup();
    const app = new Hono();
    app.all('/ops/*', (c) => ops.fetch(c.req.raw));
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
    await new Promise<void>((r) => (server.listening ? r() : server.once('listening', () => r())));
    onTeardown(() => new Promise<void>((r) => server.close(() => r())));
    await exercise(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ops, consumer);
  });
});

function io(env: Record<string, string> = {}) {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    io: { stdout: stdout as unknown as NodeJS.WriteStream, stderr: stderr as unknown as NodeJS.WriteStream, stdin: new PassThrough() as unknown as NodeJS.ReadStream, env, cwd: process.cwd() },
    text: () => ({ out, err }),
  };
}

describe('warren console on the command line', () => {
  it('refuses to listen beyond loopback without an auth method, and says how to give one', async () => {
    for (const listen of ['0.0.0.0:0', '[::]:0', '10.1.2.3:8780']) {
      const t = io();
      expect(await run(['console', '--listen', listen], t.io)).toBe(2);
      expect(t.text().err).toMatch(/reachable from other machines/);
      expect(t.text().err).toMatch(/--token/);
      expect(t.text().err).toMatch(/--users FILE/);
      expect(t.text().err).toMatch(/--trusted-header/);
    }
    const t = io();
    expect(await run(['console', '--listen', 'nonsense'], t.io)).toBe(2);
    expect(t.text().err).toMatch(/--listen: "nonsense" is not host:port/);
  });

  it('with a token it listens beyond loopback: 401 without it, the page with it, a viewer token cannot replay; Ctrl-C stops it', async () => {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'console', '-t', 'examples/topology.ts', '--listen', '0.0.0.0:0'], {
      cwd: root,
      env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, WARREN_CONSOLE_TOKEN: 'op-token-0123456789abcdef', WARREN_CONSOLE_VIEWER_TOKEN: 'viewer-token-0123456789abc' },
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
    expect(out).toContain('sign in required');
    const base = `http://127.0.0.1:${port}`;
    const none = await fetch(`${base}/`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Basic realm=/);
    const op = await fetch(`${base}/`, { headers: { authorization: 'Bearer op-token-0123456789abcdef' } });
    expect(op.status).toBe(200);
    const viewerAuth = { authorization: `Basic ${Buffer.from('vera:viewer-token-0123456789abc').toString('base64')}` };
    const viewerPage = await fetch(`${base}/actions`, { headers: viewerAuth });
    // A token holder is the token's role, whatever name is typed beside it.
    expect(await viewerPage.text()).toContain('token:viewer (viewer)');
    const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(await (await fetch(`${base}/actions`, { headers: viewerAuth })).text())?.[1] as string;
    const replay = await fetch(`${base}/parked/warren.demo.billing/replay`, { method: 'POST', headers: viewerAuth, body: new URLSearchParams({ scope: 'filter', _csrf: csrf }), redirect: 'manual' });
    expect(replay.status).toBe(403);
    child.kill('SIGINT');
    expect(await exited).toBe(0);
  }, 60_000);

  it('hash-password prints a hash the users file accepts', async () => {
    const t = io();
    const stdin = new PassThrough();
    stdin.end('correct horse\n');
    expect(await run(['console', 'hash-password'], { ...t.io, stdin: stdin as unknown as NodeJS.ReadStream })).toBe(0);
    const hash = t.text().out.trim();
    const { verifyPassword, parseUsers, basicAuth } = await import('./auth.js');
    expect(await verifyPassword('correct horse', hash)).toBe(true);
    expect(await verifyPassword('wrong horse', hash)).toBe(false);
    const auth = basicAuth(parseUsers(`alice:operator:${hash}\n`));
    const basic = (p: string) => new Request('http://x/', { headers: { authorization: `Basic ${Buffer.from(`alice:${p}`).toString('base64')}` } });
    expect(await auth(basic('correct horse'))).toEqual({ user: 'alice', role: 'operator' });
    expect(await auth(basic('wrong horse'))).toBeNull();
  });
});

describe('loading', () => {
  it('importing warren never loads Hono, uPlot or the console', () => {
    const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(file, 'utf8');
      // Static imports and re-exports only: a dynamic import() loads on use.
      for (const m of text.matchAll(/^(?:import|export)\s[^;]*?from\s+'([^']+)'/gms)) {
        const spec = m[1] as string;
        if (/^import\s+type\s/.test(m[0]) || /^export\s+type\s/.test(m[0])) continue;
        if (spec.startsWith('.')) visit(join(dirname(file), spec.replace(/\.js$/, '.ts')));
        else bare.add(spec);
      }
    };
    visit(join(root, 'index.ts'));
    expect([...seen].filter((f) => f.includes(`${join(root, 'console')}`))).toEqual([]);
    expect([...bare].filter((s) => s.startsWith('hono') || s.startsWith('uplot') || s.startsWith('@hono'))).toEqual([]);
    expect(seen.size).toBeGreaterThan(10);
  });
});
