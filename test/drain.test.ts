/**
 * The drain script (`npm run drain`) at a small size, so it keeps working: 20,000
 * messages through a warren consumer and through bare amqplib, each in a process of its
 * own on the compiled package, every message acked the first time, memory bounded.
 * The full million is a benchmark, run by hand (docs/scaling.md has its figures).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { DrainReport } from '../bench/drain.js';
import { AMQP_URL } from './helpers.js';

describe('npm run drain, CI-sized', () => {
  it('drains 20,000 messages with warren and with bare amqplib, each acked once, the heap flat', async () => {
    // --max-rss-mb is loose here: the goal (100 MB) is for the full run, by hand.
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'bench/drain.ts', '--messages', '20000', '--json', '--max-rss-mb', '400', '--semi-space', 'off', '--url', AMQP_URL], { timeout: 280_000, maxBuffer: 1 << 20 });
    const report = JSON.parse(stdout.trim().split('\n').at(-1) as string) as DrainReport;
    expect(report.runs.map((r) => [r.kind, r.from, r.ok, r.acked])).toEqual([
      ['warren', 'dist', true, 20_000],
      ['bare', 'dist', true, 20_000],
    ]);
    const warren = report.runs[0];
    if (!warren) throw new Error('no warren run');
    // Measured without the TypeScript loader.
    expect(warren.loader).not.toContain('tsx');
    expect(warren.byTenth).toHaveLength(10);
    // Nothing kept per message: garbage comes and goes, the heap does not climb with the count.
    expect(Math.max(...warren.byTenth.map((t) => t.heapUsed))).toBeLessThan(64);
    expect(warren.peak.rss - warren.base.rss).toBeLessThan(100);
  }, 300_000);
});
