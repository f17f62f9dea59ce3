/**
 * An unhandled error fails the run, and the test it happened in: vitest's own handling
 * fails only the exit code and counts the test as passed. Runs the fixtures in
 * test/fixtures/unhandled/ with a vitest of their own, in a subprocess.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Report {
  numPassedTests: number;
  numFailedTests: number;
  testResults: Array<{ name: string; assertionResults: Array<{ title: string; status: string; failureMessages: string[] }> }>;
}

it('a run fails on an unhandled rejection in a test, and on a spawned child that dies of one; each test that saw one fails', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'warren-unhandled-'));
  try {
    const json = join(dir, 'report.json');
    const child = spawn(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', '--config', 'test/fixtures/unhandled/vitest.config.ts', '--reporter=json', `--outputFile.json=${json}`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code, output.slice(-3000)).not.toBe(0);
    const report = JSON.parse(readFileSync(json, 'utf8')) as Report;
    expect(report.numPassedTests).toBe(0);
    expect(report.numFailedTests).toBe(2);
    const failures = report.testResults.flatMap((f) => f.assertionResults.map((a) => a.failureMessages.join('\n')));
    expect(failures.some((m) => /unhandled rejection: Error: a rejection nobody handles/.test(m))).toBe(true);
    expect(failures.some((m) => /a child process ended with an uncaught error: .*a child rejection nobody handles/.test(m))).toBe(true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
