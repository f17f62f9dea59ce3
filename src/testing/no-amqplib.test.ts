/**
 * Importing warren/testing loads no AMQP client: a unit test of a handler needs no
 * broker library at all. Checked in a fresh process, where amqplib (a CommonJS package)
 * would show in the module cache; the package's main entry is the control that does load it.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const PROBE = `
const { createRequire } = await import('node:module');
const mod = await import(process.env.TARGET);
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((p) => /[\\\\/]node_modules[\\\\/]amqplib[\\\\/]/.test(p));
console.log(JSON.stringify({ exports: Object.keys(mod).sort(), amqplib: loaded.length }));
`;

function probe(path: string): { exports: string[]; amqplib: number } {
  const target = new URL(path, import.meta.url).href;
  const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', PROBE], { env: { ...process.env, TARGET: target }, encoding: 'utf8', cwd: fileURLToPath(new URL('../..', import.meta.url)), timeout: 120_000 });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout.trim().split('\n').at(-1) as string) as { exports: string[]; amqplib: number };
}

describe('warren/testing', () => {
  it('loads no amqplib; the main entry, which does, is the control', () => {
    const testing = probe('./index.ts');
    expect(testing.exports).toEqual(expect.arrayContaining(['runDelivery', 'messageContext']));
    expect(testing.amqplib, 'amqplib modules loaded by importing warren/testing').toBe(0);
    expect(probe('../index.ts').amqplib, 'the control: the main entry loads amqplib').toBeGreaterThan(0);
  }, 240_000);
});
