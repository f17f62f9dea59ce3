/**
 * `@opentelemetry/api` is optional: warren loads, publishes and consumes without it.
 * A child process runs with the package made unresolvable.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { AMQP_URL } from '../../test/helpers.js';

const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));

const SCRIPT = `
import { createRequire } from 'node:module';
let found = true;
try { createRequire(import.meta.url).resolve('@opentelemetry/api'); } catch { found = false; }
const { Warren, defineTopology } = await import('./src/index.ts');
const name = 'trace-optional-' + Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
const topology = defineTopology({ exchange: name + '.events', consumers: { [name]: { bindings: ['order.*'] } } });
const warren = await Warren.connect({ url: process.env.AMQP_URL, topology });
const seen = [];
const done = new Promise((resolve) => warren.consume(name, async (_p, ctx) => { seen.push(Object.keys(ctx.headers)); resolve(); }));
await warren.publish('order.created', { id: 1 });
await done;
await warren.close();
const amqp = await import('amqplib');
const conn = await amqp.connect(process.env.AMQP_URL);
const ch = await conn.createChannel();
for (const c of topology.consumers.values()) for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await ch.deleteQueue(q);
await ch.deleteExchange(topology.exchange);
await conn.close();
console.log(JSON.stringify({ found, seen }));
// Under the test runner's environment something keeps the loader alive: leave now.
process.exit(0);
`;

describe('without @opentelemetry/api installed', () => {
  it('warren loads, publishes and consumes, and writes no trace header', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--import', './src/trace/testing/without-api.mjs', '--input-type=module', '-e', SCRIPT], {
      cwd: root,
      env: { ...process.env, AMQP_URL },
      timeout: 20_000,
    }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`the child failed: ${error.message}\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
    });
    const result = JSON.parse(stdout.trim().split('\n').pop() as string) as { found: boolean; seen: string[][] };
    expect(result.found).toBe(false);
    expect(result.seen).toEqual([['warren-occurred-at']]);
  }, 40_000);
});
