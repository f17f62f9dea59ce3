import * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { declareTopology, defineTopology, ManagementClient, planTopology, TopologyDriftError, topologySpec, type Topology } from '../index.js';
import { listParked } from '../park/index.js';
import { publishParked } from '../park/testing/fixtures.js';
import { AMQP_URL, MGMT_URL, BROKER, connectRaw, onTeardown, uniqueName, waitFor } from '../../test/helpers.js';
import { QUEUE_TYPE_ARGUMENT } from './plan.js';
import { parkedQueueType } from './queue-type.js';

/** The management API of the broker under test, as a base URL and an authorization header. */
function managementOf(url = MGMT_URL): { base: string; auth: string } {
  const u = new URL(url);
  return { base: `${u.protocol}//${u.host}/api`, auth: `Basic ${Buffer.from(`${decodeURIComponent(u.username || 'guest')}:${decodeURIComponent(u.password || 'guest')}`).toString('base64')}` };
}

async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const { base, auth } = managementOf();
  const res = await fetch(`${base}${path}`, { method, headers: { authorization: auth, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  const text = await res.text();
  return { status: res.status, json: text === '' ? undefined : (JSON.parse(text) as unknown) };
}

/**
 * A vhost whose default queue type is quorum (as Amazon MQ 4.2 sets up), deleted after
 * the test. RabbitMQ 3.10's management API takes the type as `defaultqueuetype`, 4.x as
 * `default_queue_type`; both are sent, and the vhost is checked to have it.
 */
async function quorumDefaultVhost(): Promise<{ vhost: string; url: string; management: ManagementClient }> {
  const vhost = uniqueName('dq');
  const created = await api('PUT', `/vhosts/${encodeURIComponent(vhost)}`, { default_queue_type: 'quorum', defaultqueuetype: 'quorum' });
  expect(created.status, 'creating the vhost').toBeLessThan(300);
  onTeardown(async () => void (await api('DELETE', `/vhosts/${encodeURIComponent(vhost)}`)));
  const user = decodeURIComponent(new URL(MGMT_URL).username || 'guest');
  await api('PUT', `/permissions/${encodeURIComponent(vhost)}/${encodeURIComponent(user)}`, { configure: '.*', write: '.*', read: '.*' });
  const info = (await api('GET', `/vhosts/${encodeURIComponent(vhost)}`)).json as { default_queue_type?: string };
  expect(info.default_queue_type, 'the vhost default queue type').toBe('quorum');
  return { vhost, url: `${AMQP_URL.replace(/\/+$/, '')}/${encodeURIComponent(vhost)}`, management: new ManagementClient({ url: MGMT_URL, vhost }) };
}

async function connectTo(url: string): Promise<amqp.ChannelModel> {
  const conn = await connectRaw(url);
  onTeardown(() => conn.close());
  return conn;
}

/** Declares the queues of a topology as warren did before it stated every type: classic ones without `x-queue-type`. */
async function declareUntyped(conn: amqp.ChannelModel, topology: Topology): Promise<void> {
  const ch = await conn.createChannel();
  try {
    for (const q of topologySpec(topology).queues) {
      const { [QUEUE_TYPE_ARGUMENT]: type, ...untyped } = q.arguments;
      await ch.assertQueue(q.name, { durable: true, arguments: type === 'classic' ? untyped : { ...q.arguments } });
    }
  } finally {
    await ch.close();
  }
}

/** The type the broker reports for each queue of the topology, by name. */
async function typesOf(management: ManagementClient, topology: Topology): Promise<Record<string, string | undefined>> {
  const out: Record<string, string | undefined> = {};
  for (const q of topologySpec(topology).queues) out[q.name] = (await management.queue(q.name))?.type;
  return out;
}

function wantedTypes(topology: Topology): Record<string, string> {
  return Object.fromEntries(topologySpec(topology).queues.map((q) => [q.name, String(q.arguments[QUEUE_TYPE_ARGUMENT])]));
}

function shopTopology(): Topology {
  const prefix = uniqueName('qt');
  return defineTopology({
    exchange: `${prefix}.events`,
    consumers: {
      billing: { queue: `${prefix}.billing`, bindings: ['order.created'], retry: { delays: [50, 100], maxAttempts: 3 } },
      ledger: { queue: `${prefix}.ledger`, bindings: ['order.paid'], queueType: 'quorum', retry: { delays: [50] } },
    },
  });
}

const WALKS = 25;

describe('queue types on a vhost whose default queue type is quorum', () => {
  it('declares every queue with the type the declaration gives, whatever the vhost default', async () => {
    const { url, management } = await quorumDefaultVhost();
    const topology = shopTopology();
    const conn = await connectTo(url);
    await declareTopology(conn, topology);
    await waitFor(async () => Object.values(await typesOf(management, topology)).every((t) => t !== undefined), 'the management API to list every queue');
    expect(await typesOf(management, topology)).toEqual(wantedTypes(topology));
    for (const q of topologySpec(topology).queues) expect((await management.queue(q.name))?.arguments[QUEUE_TYPE_ARGUMENT], q.name).toBe(q.arguments[QUEUE_TYPE_ARGUMENT]);
    expect((await planTopology(conn, topology, management)).drift).toEqual([]);
    expect((await planTopology(conn, topology)).drift).toEqual([]);
  });

  it('keeps a parked message through many walks of a classic parked queue (the broker never counts them against a limit)', async () => {
    const { url } = await quorumDefaultVhost();
    const topology = shopTopology();
    const billing = topology.consumer('billing');
    const conn = await connectTo(url);
    await declareTopology(conn, topology);
    const [id] = await publishParked(conn, topology, billing, [{}]);
    for (let i = 1; i <= WALKS; i++) {
      const r = await listParked(conn, billing);
      expect(r.messages.map((m) => m.messageId), `walk ${i}`).toEqual([id]);
    }
  });

  it('reports a queue that the vhost default made quorum as drift (which argument, both types) and deletes nothing', async () => {
    const { url, management } = await quorumDefaultVhost();
    const topology = shopTopology();
    const billing = topology.consumer('billing');
    const conn = await connectTo(url);
    await declareUntyped(conn, topology);
    await waitFor(async () => (await management.queue(billing.parkedQueue))?.type !== undefined, 'the management API to list the parked queue');
    expect((await management.queue(billing.parkedQueue))?.type, 'declared without a type, the parked queue became').toBe('quorum');
    await publishParked(conn, topology, billing, [{}]);

    const error = await declareTopology(conn, topology).then(() => undefined, (e: unknown) => e);
    expect(error).toBeInstanceOf(TopologyDriftError);
    const drift = error as TopologyDriftError;
    expect(drift.differences[0]).toMatchObject({ kind: 'queue', argument: 'x-queue-type', expected: 'classic', actual: 'quorum' });
    expect(drift.message).toMatch(/type cannot be changed in place/);
    expect(drift.message).toMatch(/vhost's default type/);

    // Every classic queue of billing differs by its type; ledger's quorum queues do not.
    const byManagement = await planTopology(conn, topology, management);
    const typeDrift = byManagement.drift.filter((d) => d.argument === 'x-queue-type');
    expect(typeDrift.map((d) => d.name).sort()).toEqual([billing.queue, ...billing.retryQueues, billing.parkedQueue].sort());
    for (const d of typeDrift) expect(d).toMatchObject({ expected: 'classic', actual: 'quorum' });
    expect(byManagement.drift.filter((d) => d.name.startsWith(topology.consumer('ledger').queue))).toEqual([]);
    const byAmqp = await planTopology(conn, topology);
    expect(byAmqp.drift.find((d) => d.name === billing.parkedQueue)).toMatchObject({ argument: 'x-queue-type', expected: 'classic', actual: 'quorum' });

    // Nothing was deleted: the parked message is still there.
    const ch = await conn.createChannel();
    expect((await ch.checkQueue(billing.parkedQueue)).messageCount).toBe(1);
    await ch.close();
  });

  it('walks a parked queue as the type it really has: one the vhost made quorum keeps its message through many walks', async () => {
    const { url } = await quorumDefaultVhost();
    const topology = shopTopology();
    const billing = topology.consumer('billing');
    const conn = await connectTo(url);
    await declareUntyped(conn, topology);
    const [id] = await publishParked(conn, topology, billing, [{}]);
    expect(await parkedQueueType(conn, billing.parkedQueue, 'classic')).toBe('quorum');
    // Walked as classic, each walk handed the message back; RabbitMQ 4.0 counted every
    // return and, past the default delivery limit of 20, dropped it.
    for (let i = 1; i <= WALKS; i++) {
      const r = await listParked(conn, billing);
      expect(r.messages.map((m) => m.messageId), `walk ${i}`).toEqual([id]);
    }
  });
});

describe('upgrading a deployment whose queues were declared without a type', () => {
  it('takes them as the same classic queues: declared again, planned with and without the management API, no drift', async () => {
    const topology = shopTopology();
    onTeardown(async () => {
      const conn = await connectRaw();
      const ch = await conn.createChannel();
      for (const q of topologySpec(topology).queues) await ch.deleteQueue(q.name).catch(() => undefined);
      await ch.deleteExchange(topology.exchange).catch(() => undefined);
      await conn.close();
    });
    const conn = await connectTo(AMQP_URL);
    // On the default vhost (classic by default) the earlier declaration made classic
    // queues: RabbitMQ 3.10 stores no x-queue-type for them, 4.x stores 'classic'.
    await declareUntyped(conn, topology);
    await declareTopology(conn, topology);
    const management = new ManagementClient({ url: MGMT_URL });
    await waitFor(async () => Object.values(await typesOf(management, topology)).every((t) => t !== undefined), 'the management API to list every queue');
    expect(await typesOf(management, topology)).toEqual(wantedTypes(topology));
    expect((await planTopology(conn, topology, management)).drift).toEqual([]);
    expect((await planTopology(conn, topology)).drift).toEqual([]);
  });
});

describe('what RabbitMQ 4.3 refuses by default', () => {
  it('declares and uses no transient non-exclusive queue, no x-queue-mode or x-queue-version, no global QoS', async () => {
    // A vhost of its own, so that every queue and channel on it is this test's.
    const { vhost, url } = await quorumDefaultVhost();
    const topology = shopTopology();
    const { Warren, PermanentError } = await import('../index.js');
    const warren = await Warren.connect({ url, topology, connectTimeoutMs: 5000 });
    onTeardown(() => warren.close());
    const parked: string[] = [];
    await warren.consume('billing', () => Promise.reject(new PermanentError('no such order')), { onOutcome: (o) => void (o.kind === 'parked' && parked.push(o.kind)) });
    await warren.consume('ledger', () => Promise.resolve());
    await warren.publish('order.created', { id: 1 }, { messageId: 'q-1' });
    await warren.publish('order.paid', { id: 1 }, { messageId: 'q-2' });
    await waitFor(() => parked.length === 1, 'the message to be parked');
    const conn = await connectTo(url);
    expect((await listParked(conn, topology.consumer('billing'))).messages).toHaveLength(1);

    const queues = (await api('GET', `/queues/${encodeURIComponent(vhost)}`)).json as Array<{ name: string; durable: boolean; exclusive?: boolean; arguments: Record<string, unknown> }>;
    expect(queues.map((q) => q.name).sort()).toEqual(topologySpec(topology).queues.map((q) => q.name).sort());
    for (const q of queues) {
      expect(q.durable || q.exclusive === true, `${q.name} is durable or exclusive`).toBe(true);
      expect(q.arguments, q.name).not.toHaveProperty('x-queue-mode');
      expect(q.arguments, q.name).not.toHaveProperty('x-queue-version');
      expect(q.arguments[QUEUE_TYPE_ARGUMENT], q.name).toBeDefined();
    }
    // Channel statistics come every few seconds: wait until the consumers' channels are listed.
    type ChannelInfo = { name: string; global_prefetch_count?: number; consumer_count?: number };
    let channels: ChannelInfo[] = [];
    await waitFor(async () => {
      channels = ((await api('GET', `/vhosts/${encodeURIComponent(vhost)}/channels`)).json as ChannelInfo[] | undefined) ?? [];
      return channels.filter((c) => (c.consumer_count ?? 0) > 0).length >= 2;
    }, () => `the consumers' channels to be listed (have ${JSON.stringify(channels)})`, 30_000);
    for (const c of channels) expect(c.global_prefetch_count ?? 0, c.name).toBe(0);
    if (BROKER === '4.3') {
      const used = (await api('GET', '/deprecated-features/used')).json as Array<{ name: string }>;
      expect(used.map((f) => f.name)).toEqual([]);
    }
  });
});
