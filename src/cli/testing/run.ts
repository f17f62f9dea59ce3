// Runs the BUILT `warren` executable as a subprocess, as a user would.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Harness } from '../../store/testing/harness.js';
import type { Topology, TopologyOptions } from '../../topology/declaration.js';
import { AMQP_URL, MGMT_URL, onTeardown, testTopology } from '../../../test/helpers.js';

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const MAIN = join(ROOT, 'dist/cli/main.js');

/** Fails with a clear message when the executable has not been built. */
export function assertBuilt(): void {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: the CLI tests run the built executable. Run \`npm run build\` first (scripts/test.sh does).`);
}

/** What a run of the executable produced. */
export interface RunResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunOptions {
  /** Environment on top of a clean one (no inherited WARREN_*): AMQP and management URLs of the broker under test. */
  readonly env?: Record<string, string | undefined>;
  /** Extra node flags, e.g. `['--import', 'tsx']`. */
  readonly nodeArgs?: readonly string[];
  readonly timeoutMs?: number;
  /** Called with the child once it runs, e.g. to kill it mid-way. */
  readonly onSpawn?: (child: ChildProcess) => void;
  /**
   * Runs this program with `args` instead of `node dist/cli/main.js`, e.g. `bash` with
   * `-c '… | head -1'` to put the CLI under a pipe.
   */
  readonly shell?: string;
}

function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('WARREN_') && k !== 'NODE_OPTIONS') env[k] = v;
  env['WARREN_AMQP_URL'] = AMQP_URL;
  env['WARREN_MANAGEMENT_URL'] = MGMT_URL;
  return env;
}

/** Runs `node dist/cli/main.js ...args` and collects its output. */
export function warren(args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  assertBuilt();
  const env = { ...baseEnv(), ...options.env };
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  return new Promise((resolve, reject) => {
    const [file, argv] = options.shell ? [options.shell, [...args]] : [process.execPath, [...(options.nodeArgs ?? []), MAIN, ...args]];
    const child = spawn(file, argv, { env: env as NodeJS.ProcessEnv, cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdin.end();
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`warren ${args.join(' ')} did not finish within ${options.timeoutMs ?? 20_000} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? 20_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
    options.onSpawn?.(child);
  });
}

/** A temporary directory removed after the test. */
export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'warren-cli-'));
  onTeardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A test topology (unique names, deleted after the test) and a module file that
 * exports it as plain options, as the CLI loads it.
 */
export async function topologyModule(build: Parameters<typeof testTopology>[0]): Promise<{ topology: Topology; path: string; env: Record<string, string> }> {
  let options: TopologyOptions | undefined;
  const topology = testTopology((names) => (options = build(names)));
  const dir = await tempDir();
  const path = join(dir, 'topology.mjs');
  await writeFile(path, `// written by a warren CLI test\nexport default ${JSON.stringify(options, null, 2)};\n`);
  return { topology, path, env: { WARREN_TOPOLOGY: path } };
}

/** The flags that point the CLI at a store test harness's tables; the SQLite file relative to the CLI's directory. */
export function dbFlags(h: Harness): string[] {
  const s = h.spec;
  if (s.backend === 'sqlite') return ['--db', `sqlite:${relative(ROOT, s.filename)}`, '--table-prefix', s.tablePrefix];
  return ['--db', s.connectionString, '--schema', s.schema, '--table-prefix', s.tablePrefix];
}
