/**
 * Runs in every test worker before its test files (vitest.config.ts `setupFiles`).
 *
 * vitest reports an unhandled error or rejection and fails the run's exit code, yet
 * counts every test as passed (its JSON report says so too). Here such an error fails
 * the test during which it happened, or the file if it came after the file's last test.
 * An error that ends a child process a test spawned (a Node process: NODE_OPTIONS loads
 * test/child-guard.mjs into it) fails the test that spawned it.
 */
import { mkdirSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeEach } from 'vitest';

const unhandled: string[] = [];
const note = (kind: string) => (error: unknown) => {
  unhandled.push(`${kind}: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
};
process.on('uncaughtException', note('uncaught exception'));
process.on('unhandledRejection', note('unhandled rejection'));

const dir = join(tmpdir(), 'warren-test-child-errors');
mkdirSync(dir, { recursive: true });
const childErrors = join(dir, `worker-${process.pid}.jsonl`);
process.env['WARREN_CHILD_ERRORS'] = childErrors;
const guard = fileURLToPath(new URL('./child-guard.mjs', import.meta.url));
if (!process.env['NODE_OPTIONS']?.includes(guard)) process.env['NODE_OPTIONS'] = `${process.env['NODE_OPTIONS'] ?? ''} --import ${guard}`.trim();

let childLinesSeen = 0;
function childLines(): string[] {
  return existsSync(childErrors) ? readFileSync(childErrors, 'utf8').split('\n').filter(Boolean) : [];
}

beforeEach(() => {
  unhandled.length = 0;
  childLinesSeen = childLines().length;
});

/** Runs after test/helpers.ts's teardown (hooks run in reverse), so spawned children have ended. */
function check(where: string): void {
  const fromChildren = childLines().slice(childLinesSeen);
  childLinesSeen += fromChildren.length;
  const problems = [...unhandled.splice(0), ...fromChildren.map((l) => `a child process ended with an uncaught error: ${l}`)];
  if (problems.length > 0) throw new Error(`${problems.length} unhandled error(s) ${where}:\n${problems.join('\n')}`);
}

afterEach(() => check('during this test'));
afterAll(() => check('after the last test of this file'));
