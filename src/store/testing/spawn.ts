import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { onTeardown } from '../../../test/helpers.js';

const CHILD = fileURLToPath(new URL('./child.ts', import.meta.url));

/** A child started from child.ts; SIGKILLed after the test if still alive. */
export interface Child {
  readonly process: ChildProcess;
  /** Lines written to stdout so far. */
  readonly lines: string[];
  /** The exit code, or the signal that ended it. */
  readonly exited: Promise<number | string>;
  /** Waits for a line starting with `prefix`. */
  line(prefix: string, timeoutMs?: number): Promise<string>;
}

/** Starts `node --import tsx src/store/testing/child.ts` (or another `script`) with these variables. */
export function spawnChild(env: Record<string, string>, script: string = CHILD): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  const waiters = new Set<() => void>();
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (line) => {
    lines.push(line);
    for (const w of [...waiters]) w();
  });
  onTeardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return {
    process: child,
    lines,
    exited,
    line(prefix, timeoutMs = 20_000) {
      return new Promise<string>((resolve, reject) => {
        const check = () => {
          const found = lines.find((l) => l.startsWith(prefix));
          if (found === undefined) return false;
          done();
          resolve(found);
          return true;
        };
        const fail = (why: string) => {
          done();
          reject(new Error(`child ${why} before writing '${prefix}'; stdout: ${lines.join(' | ')}; stderr: ${stderr.slice(-2000)}`));
        };
        const timer = setTimeout(() => fail(`wrote nothing for ${timeoutMs} ms`), timeoutMs);
        const onExit = () => setTimeout(() => void (check() || fail('exited')), 50);
        const listener = () => void check();
        const done = () => {
          clearTimeout(timer);
          waiters.delete(listener);
          child.off('exit', onExit);
        };
        if (check()) return;
        waiters.add(listener);
        child.once('exit', onExit);
      });
    },
  };
}
