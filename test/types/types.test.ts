/**
 * Compile tests: the snippets of test/types/*.types.ts type-check under TypeScript 5.9 and
 * 7, and each `@ts-expect-error` in them marks a mistake that fails on its own line (with
 * the directives taken out, every error is on a line one of them marked, and every marked
 * line has one). A directive that matched an unrelated error would fail here.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HERE = join(ROOT, 'test/types');
const COMPILERS = { '5.9': 'node_modules/typescript/bin/tsc', '7': 'node_modules/typescript-7/bin/tsc' } as const;
const FILES = readdirSync(HERE).filter((f) => f.endsWith('.types.ts'));

/** Compiles `files` (in `dir`, with the project's options) and returns its errors as `file:line TScode`. */
async function errors(compiler: string, dir: string, files: readonly string[]): Promise<Array<{ file: string; line: number; text: string }>> {
  const config = join(dir, 'tsconfig.json');
  writeFileSync(config, JSON.stringify({ extends: join(ROOT, 'tsconfig.json'), compilerOptions: { noEmit: true, rootDir: ROOT }, include: [], files }));
  const out = await run(process.execPath, [join(ROOT, compiler), '-p', config, '--pretty', 'false'], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 }).then(
    (r) => r.stdout,
    (e: { stdout?: string }) => e.stdout ?? '',
  );
  return [...out.matchAll(/^(.+?)\((\d+),\d+\): error (TS\d+: .*)$/gm)].map((m) => ({ file: resolve(ROOT, m[1] ?? ''), line: Number(m[2]), text: m[3] ?? '' }));
}

describe.each(Object.entries(COMPILERS))('compile tests, TypeScript %s', (version, compiler) => {
  it('the snippets compile, every @ts-expect-error used', async () => {
    const dir = join(ROOT, '.warren/types', version, 'as-is');
    mkdirSync(dir, { recursive: true });
    expect(await errors(compiler, dir, FILES.map((f) => join(HERE, f)))).toEqual([]);
  }, 300_000);

  it('without the directives, each marked line fails and no other does', async () => {
    const dir = join(ROOT, '.warren/types', version, 'stripped');
    mkdirSync(dir, { recursive: true });
    const marked = new Map<string, number[]>();
    for (const f of FILES) {
      const lines = readFileSync(join(HERE, f), 'utf8').split('\n');
      const expected: number[] = [];
      // Same line numbers: the directive becomes a plain comment, the imports point back here.
      const stripped = lines.map((line, i) => {
        if (/^\s*\/\/ @ts-expect-error/.test(line)) {
          expected.push(i + 2);
          return line.replace('@ts-expect-error', 'expected error:');
        }
        return line.replace(/from '\.\.\/\.\.\//g, `from '${ROOT.replace(/\/$/, '')}/`);
      });
      expect(expected.length, `${f} marks no mistake`).toBeGreaterThan(0);
      writeFileSync(join(dir, f), stripped.join('\n'));
      marked.set(join(dir, f), expected);
    }
    const found = await errors(compiler, dir, [...marked.keys()]);
    for (const [file, lines] of marked) {
      const here = found.filter((e) => e.file === file);
      for (const line of lines) expect(here.some((e) => e.line === line), `no error on line ${line} of ${file}`).toBe(true);
      expect(here.filter((e) => !lines.includes(e.line)), 'errors on lines no directive marked').toEqual([]);
    }
    expect(found.filter((e) => !marked.has(e.file))).toEqual([]);
  }, 300_000);
});
