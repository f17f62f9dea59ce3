/**
 * The archive benchmark (`npm run bench -- archive`) at a small size, so it keeps working:
 * 2,000 rows per backend through the ingester's path, every read checked for what it
 * returns, a group replayed to the broker, one line per backend. The full million is run
 * by hand (docs/performance.md has its figures); timings are not checked here.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, PG_URL } from './helpers.js';

describe('npm run bench -- archive, CI-sized', () => {
  it('seeds 2,000 rows on SQLite and PostgreSQL, reads and replays them, and prints one line per backend', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'bench/archive.ts', '--rows', '2000'], {
      timeout: 110_000,
      maxBuffer: 1 << 20,
      env: { ...process.env, WARREN_BENCH_AMQP_URL: AMQP_URL, WARREN_BENCH_PG_URL: PG_URL },
    });
    const line = /^archive (sqlite|postgres): rows 2000, ingest \d+\/s, group [\d.]+ ms, filter [\d.]+ ms, page [\d.]+ ms, show [\d.]+ ms, replay \d+\/s$/gm;
    expect([...stdout.matchAll(line)].map((m) => m[1])).toEqual(['sqlite', 'postgres', 'sqlite', 'postgres']);
    expect(stdout).toMatch(/targets: ingest >= 5000\/s/);
    expect(stdout).toMatch(/RSS at start of ingest \d+ MB, at end \d+ MB/);
  }, 120_000);
});
