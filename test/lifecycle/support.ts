import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { TopologyOptions } from '../../src/index.js';
import { AMQP_URL, MGMT_URL, onTeardown, uniqueName, waitFor } from '../helpers.js';

/** GET/DELETE against the management API of the broker under test. */
async function management(method: 'GET' | 'DELETE', path: string): Promise<Response> {
  const u = new URL(MGMT_URL);
  const auth = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username || 'guest')}:${decodeURIComponent(u.password || 'guest')}`).toString('base64');
  u.username = '';
  u.password = '';
  const base = u.toString().replace(/\/$/, '');
  return fetch(`${base}/api${path}`, { method, headers: { authorization: auth, 'x-reason': 'warren lifecycle test' }, signal: AbortSignal.timeout(5000) });
}

interface ConnectionInfo {
  readonly name: string;
  readonly client_properties?: { readonly connection_name?: string };
}

/** The broker's names of the connections whose client-provided name is `connectionName`. */
export async function connectionsNamed(connectionName: string): Promise<string[]> {
  const res = await management('GET', '/connections?columns=name,client_properties.connection_name');
  if (!res.ok) throw new Error(`management API answered ${res.status} listing connections; is rabbitmq_management enabled at ${MGMT_URL}?`);
  const all = (await res.json()) as ConnectionInfo[];
  return all.filter((c) => c.client_properties?.connection_name === connectionName).map((c) => c.name);
}

/**
 * The broker's name of the one connection whose client-provided name is
 * `connectionName`. The management API learns of new connections asynchronously
 * (it can take seconds), so look it up before the moment it is needed.
 */
export async function findConnection(connectionName: string, except: ReadonlySet<string> = new Set()): Promise<string> {
  let names: string[] = [];
  await waitFor(async () => (names = (await connectionsNamed(connectionName)).filter((n) => !except.has(n))).length > 0, `the management API to list connection '${connectionName}'`, 15_000);
  if (names.length !== 1) throw new Error(`expected one connection named '${connectionName}', found ${names.length}`);
  return names[0] as string;
}

/** Closes a connection from the broker's side, as the management UI's "force close" does. */
export async function forceCloseConnection(brokerName: string): Promise<void> {
  const res = await management('DELETE', `/connections/${encodeURIComponent(brokerName)}`);
  if (!res.ok) throw new Error(`management API answered ${res.status} closing connection '${brokerName}'`);
}

/** A connection name no other test uses. */
export function uniqueConnectionName(label: string): string {
  return uniqueName(`conn-${label}`);
}

const FIXTURE = fileURLToPath(new URL('../fixtures/consume-child.ts', import.meta.url));

/** What the child process is told to do in its handler. */
export type ChildMode = 'hang' | 'exit';

/** A consumer in a child process; see test/fixtures/consume-child.ts. */
export interface ChildConsumer {
  readonly process: ChildProcess;
  /** Lines the child wrote to stdout so far. */
  readonly lines: string[];
  /** Resolves with the exit code or signal once the child has exited. */
  readonly exited: Promise<number | string>;
  /** The exit code (or signal), failing after `timeoutMs` if the child is still running. */
  exit(timeoutMs?: number): Promise<number | string>;
  /** Waits for a line that starts with `prefix` and returns it. */
  line(prefix: string, timeoutMs?: number): Promise<string>;
}

/**
 * Starts `node --import tsx test/fixtures/consume-child.ts` consuming `consumer` of the
 * topology described by `options`. It is SIGKILLed after the test if still alive.
 */
export function spawnConsumer(options: TopologyOptions, consumer: string, mode: ChildMode): ChildConsumer {
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE], {
    env: {
      ...process.env,
      WARREN_CHILD_URL: AMQP_URL,
      WARREN_CHILD_TOPOLOGY: JSON.stringify(options),
      WARREN_CHILD_CONSUMER: consumer,
      WARREN_CHILD_MODE: mode,
      WARREN_CHILD_CONNECTION: uniqueConnectionName('child'),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | string>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')));
  const listeners = new Set<() => void>();
  createInterface({ input: child.stdout! }).on('line', (line) => {
    lines.push(line);
    for (const l of [...listeners]) l();
  });
  onTeardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  });
  return {
    process: child,
    lines,
    exited,
    exit(timeoutMs = 15_000) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`child still running after ${timeoutMs} ms; stdout: ${lines.join(' | ')}; stderr: ${stderr.slice(-2000)}`)), timeoutMs);
      });
      return Promise.race([exited, timeout]).finally(() => clearTimeout(timer));
    },
    line(prefix, timeoutMs = 15_000) {
      return new Promise<string>((resolve, reject) => {
        const check = () => {
          const found = lines.find((l) => l.startsWith(prefix));
          if (found === undefined) return false;
          done();
          resolve(found);
          return true;
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`child wrote no line starting '${prefix}' within ${timeoutMs} ms; stdout: ${lines.join(' | ')}; stderr: ${stderr.slice(-2000)}`));
        }, timeoutMs);
        const onExit = () => {
          setTimeout(() => {
            if (check()) return;
            done();
            reject(new Error(`child exited before writing '${prefix}'; stdout: ${lines.join(' | ')}; stderr: ${stderr.slice(-2000)}`));
          }, 50);
        };
        const done = () => {
          clearTimeout(timer);
          listeners.delete(listener);
          child.off('exit', onExit);
        };
        const listener = () => void check();
        if (check()) return;
        listeners.add(listener);
        child.once('exit', onExit);
      });
    },
  };
}
