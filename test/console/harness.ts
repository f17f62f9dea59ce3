// A console served over HTTP on loopback for the browser tests, signed in with tokens
// (an operator's and a viewer's), over the broker under test.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ManagementClient } from '../../src/management/client.js';
import type { Topology } from '../../src/topology/declaration.js';
import { nodeListener, tokenAuth, warrenConsole, type ConsoleOptions, type WarrenConsole } from '../../src/console/index.js';
import { AMQP_URL, MGMT_URL, onTeardown } from '../helpers.js';

export const OPERATOR_TOKEN = 'operator-token-0123456789abcdef';
export const VIEWER_TOKEN = 'viewer-token-0123456789abcdef';

/** A running console: its URL (ending in `/`) and the console itself. */
export interface ServedConsole {
  readonly url: string;
  readonly ops: WarrenConsole;
}

/** Serves a console over `topology` on 127.0.0.1 (a free port); closed after the test. */
export async function serveConsole(topology: Topology, options: Partial<ConsoleOptions> = {}): Promise<ServedConsole> {
  const ops = warrenConsole({
    topology,
    url: AMQP_URL,
    management: new ManagementClient({ url: MGMT_URL, timeoutMs: 5000 }),
    authorize: tokenAuth({ operator: OPERATOR_TOKEN, viewer: VIEWER_TOKEN }),
    challenge: 'Basic realm="warren console"',
    cacheMs: 0,
    sampleIntervalMs: 1000,
    ...options,
  });
  const server = createServer(nodeListener(ops.fetch));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTeardown(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await ops.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${ops.basePath}/`, ops };
}

/** The credentials a browser context signs in with. */
export function operator(): { username: string; password: string } {
  return { username: 'alice', password: OPERATOR_TOKEN };
}

export function viewer(): { username: string; password: string } {
  return { username: 'victor', password: VIEWER_TOKEN };
}

/** A queue's ready messages as the management API reports them (its statistics lag a few seconds). */
export async function managementDepth(queue: string): Promise<number | undefined> {
  const u = new URL(MGMT_URL);
  const auth = `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`;
  const res = await fetch(`${u.origin}/api/queues/%2F/${encodeURIComponent(queue)}`, { headers: { authorization: auth } });
  if (!res.ok) return undefined;
  const q = (await res.json()) as { messages_ready?: number; consumers?: number };
  return q.messages_ready;
}

/** A queue's consumer count as the management API reports it. */
export async function managementConsumers(queue: string): Promise<number | undefined> {
  const u = new URL(MGMT_URL);
  const auth = `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`;
  const res = await fetch(`${u.origin}/api/queues/%2F/${encodeURIComponent(queue)}`, { headers: { authorization: auth } });
  if (!res.ok) return undefined;
  return ((await res.json()) as { consumers?: number }).consumers;
}
