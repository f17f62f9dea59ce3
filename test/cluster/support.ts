/**
 * The three-node cluster of scripts/cluster.sh, seen from a test: its URLs, its
 * management API, and stopping and starting one of its nodes.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as amqp from 'amqplib';
import { guarded, sleep } from '../helpers.js';

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL('../../scripts/cluster.sh', import.meta.url));

export const CLUSTER_NODES = ['c1', 'c2', 'c3'] as const;
export type ClusterNode = (typeof CLUSTER_NODES)[number];

const number = (n: ClusterNode): number => Number(n.slice(1));
export const amqpUrl = (n: ClusterNode): string => `amqp://guest:guest@127.0.0.1:${5700 + number(n)}`;
export const nodeName = (n: ClusterNode): string => `warren-${n}@localhost`;
export const CLUSTER_URLS = CLUSTER_NODES.map(amqpUrl);

/** The node behind an address (`127.0.0.1:5702`) or a node name (`warren-c2@localhost`). */
export function clusterNode(addressOrName: string): ClusterNode {
  const m = /:570([1-3])$/.exec(addressOrName) ?? /^warren-c([1-3])@/.exec(addressOrName);
  if (!m) throw new Error(`${addressOrName} is not a node of the test cluster`);
  return `c${m[1]}` as ClusterNode;
}

const AUTH = `Basic ${Buffer.from('guest:guest').toString('base64')}`;

/** GET from the management API of the first node that answers (a stopped node does not). */
export async function mgmt<T>(path: string, skip: readonly ClusterNode[] = []): Promise<T> {
  let last: unknown;
  for (const n of CLUSTER_NODES) {
    if (skip.includes(n)) continue;
    try {
      const res = await fetch(`http://127.0.0.1:${15700 + number(n)}/api${path}`, { headers: { authorization: AUTH }, signal: AbortSignal.timeout(5000) });
      if (res.ok) return (await res.json()) as T;
      last = new Error(`${res.status} ${res.statusText} from node ${n}: GET /api${path}`);
    } catch (error) {
      last = error;
    }
  }
  throw last instanceof Error ? last : new Error(String(last));
}

/**
 * Why the cluster test cannot run here, or `undefined` when all three nodes are running
 * members of one cluster.
 */
export async function clusterUnavailable(): Promise<string | undefined> {
  try {
    const nodes = await mgmt<Array<{ name: string; running: boolean }>>('/nodes?columns=name,running');
    const down = CLUSTER_NODES.filter((n) => !nodes.some((x) => x.name === nodeName(n) && x.running));
    if (down.length > 0) return `cluster node(s) ${down.map(nodeName).join(', ')} not running; run: sudo bash scripts/cluster.sh start`;
  } catch {
    return 'the test cluster is not running (no answer on 127.0.0.1:15701-15703); run: sudo bash scripts/cluster.sh start';
  }
  if (process.getuid?.() !== 0) return 'stopping a cluster node needs root (the nodes run as the rabbitmq user)';
  return undefined;
}

/** Stops one node (and waits until its process has exited). */
export async function stopNode(n: ClusterNode): Promise<void> {
  await run('bash', [SCRIPT, 'stop', n], { timeout: 120_000 });
}

/** Starts one node and waits until it answers AMQP and its management API. */
export async function startNode(n: ClusterNode): Promise<void> {
  await run('bash', [SCRIPT, 'start', n], { timeout: 240_000 });
}

/** The running members, by management API. */
export async function runningNodes(): Promise<ClusterNode[]> {
  const nodes = await mgmt<Array<{ name: string; running: boolean }>>('/nodes?columns=name,running');
  return CLUSTER_NODES.filter((n) => nodes.some((x) => x.name === nodeName(n) && x.running));
}

/** A quorum queue's leader and the members that are online. */
export async function quorumState(queue: string, skip: readonly ClusterNode[] = []): Promise<{ leader: ClusterNode | undefined; online: ClusterNode[] }> {
  const q = await mgmt<{ leader?: string; online?: string[] }>(`/queues/%2F/${encodeURIComponent(queue)}`, skip);
  return { leader: q.leader ? clusterNode(q.leader) : undefined, online: (q.online ?? []).map(clusterNode) };
}

/** Polls `check` until it returns a value other than `undefined`, or fails after `timeoutMs`. */
export async function until<T>(check: () => Promise<T | undefined>, what: string, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for: ${what}`);
    await sleep(200);
  }
}

/** A raw connection to the first running node, guarded; the caller closes it. */
export async function connectCluster(): Promise<amqp.ChannelModel> {
  let last: unknown;
  for (const url of CLUSTER_URLS) {
    try {
      return guarded(await amqp.connect(url, { noDelay: true, timeout: 5000 }));
    } catch (error) {
      last = error;
    }
  }
  throw last instanceof Error ? last : new Error(String(last));
}

const LOCK = `${(process.env['WARREN_CLUSTER_DIR'] ?? '/var/lib/warren/cluster').replace(/\/$/, '')}/failover-test.lock`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the cluster for this process alone (two tests stopping a node each would stop a
 * quorum queue's majority), waiting up to `timeoutMs` for another run to finish. A lock
 * left by a process that has died is taken over. Returns the release.
 */
export async function lockCluster(timeoutMs: number): Promise<() => Promise<void>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      mkdirSync(LOCK);
      writeFileSync(`${LOCK}/pid`, String(process.pid));
      return async () => rmSync(LOCK, { recursive: true, force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let holder = NaN;
    try {
      holder = Number(readFileSync(`${LOCK}/pid`, 'utf8'));
    } catch {
      // just made, its pid not written yet
    }
    if (Number.isInteger(holder) && !alive(holder)) rmSync(LOCK, { recursive: true, force: true });
    else if (Date.now() > deadline) throw new Error(`the test cluster is in use by process ${holder} (${LOCK}) for more than ${timeoutMs} ms`);
    else await sleep(1000);
  }
}
