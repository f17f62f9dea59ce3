/**
 * The tours `npm start` runs, run for real so they stay true: their output is what the
 * README and docs/retry-table.md describe.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, MGMT_URL } from './helpers.js';

function run(file: string): Promise<{ code: number | null; out: string }> {
  const path = fileURLToPath(new URL(`../examples/${file}`, import.meta.url));
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path], { env: { ...process.env, WARREN_AMQP_URL: AMQP_URL }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('exit', (code) => resolve({ code, out }));
  });
}

describe('examples', () => {
  it('the console stop of npm start: serves the demo topology on loopback, prints its URL, and ends cleanly on Ctrl-C', async () => {
    const path = fileURLToPath(new URL('../examples/console.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', path], { env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, WARREN_CONSOLE_PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 30_000;
      while (!/http:\/\/127\.0\.0\.1:\d+\//.test(out) && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 50));
      const url = /http:\/\/127\.0\.0\.1:\d+\//.exec(out)?.[0];
      expect(url, out).toBeDefined();
      const page = await fetch(url as string);
      expect(page.status).toBe(200);
      const html = await page.text();
      expect(html).toContain('data-consumer="warren.demo.billing"');
      expect(html).toContain('sqlite:');
    } finally {
      child.kill('SIGINT');
    }
    expect(await exited).toBe(0);
  }, 60_000);

  it('the retry-table tour: rows paused while the carrier is down, none of its calls while paused, all 30 labels in the end', async () => {
    const { code, out } = await run('retry-table.ts');
    expect(out).toMatch(/30 rows in the table, all paused/);
    expect(out).toMatch(/a second later the carrier was called 0 more times/);
    expect(out).toMatch(/acme's 10 rows still held/);
    expect(out).toMatch(/all 30 labels printed/);
    expect(out).toMatch(/alice\s+pause\s+\{"tenant":"acme"\} → 10 rows/);
    expect(code).toBe(0);
  }, 60_000);

  it('the exchanges tour: a missing passive exchange refused, five messages over four exchanges, a legacy producer deduplicated, parked and replayed to its consumer only', async () => {
    const { code, out } = await run('exchanges.ts');
    expect(out).toMatch(/connect refused: Exchange 'payments' does not exist\. The topology declares it passive/);
    for (const line of ['archive <- documents', 'audit <- broadcast', 'billing <- broadcast', 'billing <- commands', 'billing <- events']) expect(out).toContain(line);
    expect(out).toMatch(/refunds: 1 handled, 1 duplicate, 1 retried, 1 parked/);
    expect(out).toMatch(/replayed 1; refunds handled 2; runs: req-1: refund order=42 café \| req-2: refund order=43 \| req-2: refund order=43 \| req-2: refund order=43/);
    expect(out).toMatch(/the other consumers saw 5 messages, as before the replay/);
    expect(code).toBe(0);
  }, 60_000);
});
