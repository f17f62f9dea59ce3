/**
 * warren as an application loads it: the compiled `dist/` of `npm run build`, rebuilt
 * first when any file under `src/` is newer. Benchmarks that compare warren's own CPU
 * per message with bare amqplib load it from here: run from `src/` under the TypeScript
 * loader, every closure warren makes also pays the loader's function-naming helper, a
 * cost no installed package has.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const ENTRY = join(ROOT, 'dist', 'index.js');

/** The newest modification time of a `.ts` file under `dir`. */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) latest = Math.max(latest, newest(path));
    else if (entry.name.endsWith('.ts')) latest = Math.max(latest, statSync(path).mtimeMs);
  }
  return latest;
}

/** Builds `dist/` when it is missing or older than `src/`. */
export function ensureBuilt(log: (line: string) => void = (line) => void process.stderr.write(`${line}\n`)): void {
  if (existsSync(ENTRY) && statSync(ENTRY).mtimeMs >= newest(join(ROOT, 'src'))) return;
  log('building dist/ (npm run build), as an application would load warren…');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
}

/** The compiled `warren` entry, built first when stale. */
export async function loadBuilt(): Promise<typeof import('../src/index.js')> {
  ensureBuilt();
  return (await import(ENTRY)) as typeof import('../src/index.js');
}
