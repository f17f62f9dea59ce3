/**
 * Packs warren as `npm publish` would, from a copy of the working tree (tracked and
 * untracked files, none that git ignores: no dist, no node_modules), so the tarball
 * is what a clean checkout produces. The copy matters for another reason too: packing
 * rebuilds dist (the prepack script removes it first), and tests running beside this
 * one load the checkout's own dist.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync, symlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

const run = promisify(execFile);

/** What `npm pack --json` reports of one tarball. */
export interface Packed {
  /** Absolute path of the .tgz. */
  readonly tarball: string;
  /** Paths inside the package, relative to its root (`package/` stripped). */
  readonly files: readonly string[];
  /** The package.json that was packed. */
  readonly manifest: Manifest;
}

/** The parts of package.json these tests read. */
export interface Manifest {
  readonly name: string;
  readonly version: string;
  readonly exports: Record<string, ExportTarget>;
  readonly bin?: Record<string, string>;
  readonly peerDependencies?: Record<string, string>;
}

/** An `exports` value: a path, or conditions mapping to paths (or to nested conditions). */
export type ExportTarget = string | { readonly [condition: string]: ExportTarget };

/** Runs a command, failing with its output when it exits non-zero. */
export async function sh(cmd: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}, timeout = 180_000): Promise<{ stdout: string; stderr: string }> {
  try {
    return await run(cmd, args, { cwd, env: { ...process.env, ...env }, timeout, maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')} (in ${cwd}) failed: ${e.message}\n--- stdout\n${e.stdout ?? ''}\n--- stderr\n${e.stderr ?? ''}`, { cause: error });
  }
}

/** Copies the working tree (what git tracks or would track) into `dest`. */
async function copyTree(dest: string): Promise<void> {
  const { stdout } = await sh('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], ROOT);
  for (const file of stdout.split('\0')) {
    if (file === '' || file === 'node_modules') continue;
    const from = join(ROOT, file);
    // --cached lists files deleted from the working tree too.
    if (!existsSync(from) || !statSync(from).isFile()) continue;
    mkdirSync(dirname(join(dest, file)), { recursive: true });
    copyFileSync(from, join(dest, file));
  }
}

/** Packs a copy of the working tree under `work`; the tarball lands in `work`. */
export async function packWorkingTree(work: string): Promise<Packed> {
  const source = join(work, 'source');
  mkdirSync(source, { recursive: true });
  await copyTree(source);
  // The build needs TypeScript and the type packages; nothing is installed.
  symlinkSync(join(ROOT, 'node_modules'), join(source, 'node_modules'), 'dir');
  // The build is most of the time: a few seconds of CPU, minutes on a loaded machine.
  const { stdout } = await sh('npm', ['pack', '--json', '--pack-destination', work], source, { npm_config_loglevel: 'error' }, 540_000);
  // npm prints the build's own output before the JSON.
  const json = stdout.slice(stdout.indexOf('\n[') + 1 || stdout.indexOf('['));
  const [report] = JSON.parse(json) as Array<{ filename: string; files: Array<{ path: string }> }>;
  if (!report) throw new Error(`npm pack reported nothing:\n${stdout}`);
  return {
    tarball: join(work, report.filename),
    files: report.files.map((f) => f.path),
    manifest: JSON.parse(readFileSync(join(source, 'package.json'), 'utf8')) as Manifest,
  };
}

/** One "exports" entry that is code: the key (`.`, `./sqlite`) and the specifier a user imports. */
export interface Entry {
  readonly key: string;
  readonly specifier: string;
}

/** The code entries of `exports` (not `./package.json`, not patterns), as a user imports them. */
export function codeEntries(manifest: Manifest): Entry[] {
  return Object.entries(manifest.exports)
    .filter(([key, target]) => !key.includes('*') && targets(target).some((t) => /\.[cm]?js$/.test(t)))
    .map(([key]) => ({ key, specifier: key === '.' ? manifest.name : `${manifest.name}/${key.slice(2)}` }));
}

/** Every path an `exports` value can resolve to, whatever the conditions. */
export function targets(target: ExportTarget): string[] {
  return typeof target === 'string' ? [target] : Object.values(target).flatMap(targets);
}
