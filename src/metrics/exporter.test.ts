/**
 * `warren metrics`, the standalone exporter, run as the built executable against a real
 * broker and database; and the promise that `warren` itself never loads prom-client.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL, onTeardown, waitFor } from '../../test/helpers.js';
import { assertBuilt, MAIN, ROOT, topologyModule, warren } from '../cli/testing/run.js';
import { harness } from '../store/testing/harness.js';
import { rawConnection } from '../../test/helpers.js';
import { parseScrape, valueOf } from './testing/scrape.js';

beforeAll(() => assertBuilt());

/** Starts `warren metrics …` and waits for the line that says where it serves. */
async function exporter(args: readonly string[], env: Record<string, string>): Promise<{ url: string; child: ChildProcess; stderr: () => string }> {
  const clean: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('WARREN_') && k !== 'NODE_OPTIONS') clean[k] = v;
  const child = spawn(process.execPath, [MAIN, 'metrics', ...args], { env: { ...clean, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, ...env }, cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  child.stdout.resume();
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  onTeardown(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await exited;
  });
  let url: string | undefined;
  await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`warren metrics exited ${child.exitCode}: ${stderr}`);
    url = /on (http:\/\/\S+\/metrics)/.exec(stderr)?.[1];
    return url !== undefined;
  }, 'the exporter to say where it serves', 30_000);
  return { url: url as string, child, stderr: () => stderr };
}

describe('warren metrics', () => {
  it('serves every queue of the topology, and the outbox and retry table with --db, until SIGTERM', async () => {
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, retry: { delays: ['20ms'], maxAttempts: 2 }, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    // The topology exists, nothing consumes, three messages wait.
    const conn = await rawConnection();
    const declared = await warren(['topology', 'apply'], { env: mod.env });
    expect(declared.code, declared.stderr).toBe(0);
    const ch = await conn.createConfirmChannel();
    for (let i = 0; i < 3; i++) ch.publish(mod.topology.exchange, 'order.created', Buffer.from('{}'));
    await ch.waitForConfirms();
    await ch.close();
    const h = await harness('postgres');
    const store = h.store();
    await store.transaction((tx) => store.outbox.add(tx, 'order.created', { orderId: 1 }));
    if (h.spec.backend !== 'postgres') throw new Error('expected postgres');
    const db = new URL(h.spec.connectionString);
    const { url, child, stderr } = await exporter(['--listen', '127.0.0.1:0', '--cache', '100ms', '--db', db.toString(), '--schema', h.spec.schema, '--table-prefix', h.spec.tablePrefix], mod.env);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    const billing = mod.topology.consumer('billing');
    let samples = parseScrape('');
    await waitFor(
      async () => {
        const res = await fetch(url);
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
        samples = parseScrape(await res.text());
        return valueOf(samples, 'warren_queue_messages_ready', { queue: billing.queue }) === 3;
      },
      'the exporter to show three messages in the work queue',
      20_000,
    );
    expect(valueOf(samples, 'warren_queue_consumers', { consumer: 'billing', role: 'work' })).toBe(0);
    expect(valueOf(samples, 'warren_queue_messages_ready', { consumer: 'billing', role: 'parked' })).toBe(0);
    expect(valueOf(samples, 'warren_queue_exists', { consumer: 'billing', role: 'retry' })).toBe(1);
    expect(valueOf(samples, 'warren_broker_up', { source: 'management' })).toBe(1);
    expect(valueOf(samples, 'warren_broker_up', { source: 'amqp' })).toBeUndefined();
    expect(valueOf(samples, 'warren_outbox_pending', { store: 'postgres' })).toBe(1);
    expect(valueOf(samples, 'warren_retry_table_waiting_untimed', { store: 'postgres' })).toBe(0);
    // Nothing of the application's own: the exporter has no consumers.
    expect(samples.some((s) => s.name.startsWith('warren_consumer_'))).toBe(false);
    expect((await fetch(url.replace('/metrics', '/other'))).status).toBe(404);
    // The database's password is never printed.
    expect(stderr()).not.toMatch(/password=/);
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 90_000);

  it('without the management API, serves depths over AMQP; bad flags are usage errors', async () => {
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    expect((await warren(['topology', 'apply'], { env: mod.env })).code).toBe(0);
    const { url } = await exporter(['--listen', ':0', '--management-url', 'http://guest:guest@127.0.0.1:1'], mod.env);
    const samples = parseScrape(await (await fetch(url)).text());
    expect(valueOf(samples, 'warren_broker_up', { source: 'amqp' })).toBe(1);
    expect(valueOf(samples, 'warren_queue_messages_ready', { consumer: 'billing', role: 'work' })).toBe(0);
    const bad = [
      [['--listen', 'nowhere'], /--listen: "nowhere" is not HOST:PORT/],
      [['--listen', '127.0.0.1:99999'], /--listen/],
      [['--cache', 'soon'], /--cache/],
      [['--db', 'mysql://x'], /--db/],
    ] as const;
    const runs = await Promise.all(bad.map(([args]) => warren(['metrics', ...args], { env: mod.env, timeoutMs: 60_000 })));
    runs.forEach((r, i) => {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(bad[i]?.[1] as RegExp);
    });
    const help = await warren(['metrics', '--help'], { timeoutMs: 60_000 });
    expect(help.stdout).toContain('--listen HOST:PORT');
    expect(help.stdout).toContain('--topology');
  }, 90_000);
});

describe('prom-client is optional', () => {
  // A loader hook that fails any import of prom-client: `warren` must load without it.
  const hook = `data:text/javascript,${encodeURIComponent(
    `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent('export async function resolve(s, c, next) { if (s === "prom-client" || s.startsWith("prom-client/")) throw new Error("prom-client was loaded"); return next(s, c); }'));`,
  )}`;
  // The control case below ends its child with an error on purpose: the guard that fails
  // a test on a child's uncaught error (test/child-guard.mjs) is left out of these children.
  const childEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'WARREN_CHILD_ERRORS'));
  // The hook catches an ESM import; a CommonJS require (how warren/metrics loads it) goes
  // round ESM hooks on Node 20, so the child also looks for it in require's cache.
  const CJS_CHECK = `const { createRequire } = await import('node:module'); if (Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/prom-client/'))) throw new Error('prom-client was loaded');`;
  const load = (entry: string, use = '') => spawnSync(process.execPath, ['--import', hook, '--input-type=module', '-e', `const m = await import(${JSON.stringify(join(ROOT, entry))}); ${use} ${CJS_CHECK} console.log('loaded');`], { encoding: 'utf8', cwd: ROOT, env: childEnv });

  it("importing 'warren' (and its SQLite and PostgreSQL entry points, and the CLI's table) never loads prom-client", () => {
    for (const entry of ['dist/index.js', 'dist/store/sqlite/index.js', 'dist/store/postgres/index.js', 'dist/cli/run.js']) {
      const r = load(entry);
      expect(r.stdout + r.stderr, entry).toContain('loaded');
      expect(r.status, entry).toBe(0);
    }
  }, 90_000);

  it("using 'warren/metrics' does (so the check above can fail)", () => {
    // warren/metrics loads prom-client on first use, so that its absence is named then.
    const r = load('dist/metrics/index.js', 'm.warrenMetrics({});');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('prom-client was loaded');
  });
});
