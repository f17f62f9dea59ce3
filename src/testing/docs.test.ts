/**
 * The examples of docs/testing.md, run for real: the vitest one with vitest, the node:test
 * one with node's test runner, each from the document's own text ('warren' and its
 * subpaths pointed at this checkout's sources).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { onTeardown, uniqueName } from '../../test/helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DOC = readFileSync(join(ROOT, 'docs/testing.md'), 'utf8');

/** The ts code block that follows `heading`. */
function example(heading: string): string {
  const section = DOC.split(`## ${heading}`)[1];
  const block = section === undefined ? undefined : /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  if (block === undefined) throw new Error(`docs/testing.md has no ts example under "## ${heading}"`);
  const source = (p: string) => join(ROOT, 'src', p);
  return block
    .replaceAll("from 'warren/testing'", `from '${source('testing/index.ts')}'`)
    .replaceAll("from 'warren/sqlite'", `from '${source('store/sqlite/index.ts')}'`)
    .replaceAll("from 'warren'", `from '${source('index.ts')}'`);
}

/** A folder in the checkout (so the examples resolve its node_modules), removed after the test. */
function scratch(): string {
  const dir = join(ROOT, '.warren', uniqueName('docs'));
  mkdirSync(dir, { recursive: true });
  onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function run(args: string[], cwd: string): { status: number | null; out: string } {
  // A fresh runner: none of this run's vitest variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('VITEST') && k !== 'NODE_OPTIONS' && k !== 'TEST'));
  const r = spawnSync(process.execPath, args, { cwd, encoding: 'utf8', timeout: 180_000, env: { ...env, NO_COLOR: '1' } });
  // eslint-disable-next-line no-control-regex -- colour codes, should a runner print them anyway
  return { status: r.status, out: `${r.stdout}\n${r.stderr}`.replace(/\u001b\[[0-9;]*m/g, '') };
}

describe('docs/testing.md examples', () => {
  it('the vitest example passes under vitest', () => {
    const dir = scratch();
    writeFileSync(join(dir, 'billing.test.ts'), example('With vitest'));
    writeFileSync(join(dir, 'vitest.config.mjs'), "export default { test: { include: ['*.test.ts'] } };\n");
    const { status, out } = run([join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--root', dir, '--config', join(dir, 'vitest.config.mjs')], dir);
    expect(out).toMatch(/Tests\s+5 passed/);
    expect(status, out).toBe(0);
  }, 240_000);

  it('the node:test example passes under node --test', () => {
    const dir = scratch();
    writeFileSync(join(dir, 'shipping.test.ts'), example('With node:test, and a real SQLite transaction'));
    const { status, out } = run(['--import', 'tsx', '--test', join(dir, 'shipping.test.ts')], dir);
    expect(out).toMatch(/# pass 3/);
    expect(out).toMatch(/# fail 0/);
    expect(status, out).toBe(0);
  }, 240_000);
});
