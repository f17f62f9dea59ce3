/**
 * The drain script (`npm run drain`) at a small size, so it keeps working: 20,000
 * messages through a warren consumer, every one acked the first time, memory bounded.
 * The full million is a benchmark, run by hand (docs/scaling.md has its figures).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { DrainReport } from '../bench/drain.js';
import { AMQP_URL } from './helpers.js';

describe('npm run drain, CI-sized', () => {
  it('drains 20,000 messages, each acked once, with the heap flat and RSS growth bounded', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/drain.ts', '--messages', '20000', '--json', '--url', AMQP_URL], { timeout: 280_000, maxBuffer: 1 << 20 });
    const report = JSON.parse(stdout.trim().split('\n').at(-1) as string) as DrainReport;
    expect(report.ok, JSON.stringify(report)).toBe(true);
    expect(report.acked).toBe(20_000);
    expect(report.heapByTenthMb).toHaveLength(10);
    // Nothing kept per message: the heap at the end is not above its first tenth by much.
    expect(Math.max(...report.heapByTenthMb)).toBeLessThan(64);
    expect(report.peakRssMb - report.baseRssMb).toBeLessThan(50);
  }, 300_000);
});
