import * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import { declareTopology, defineTopology, ManagementClient, planTopology, TopologyDriftError, verifyTopology, Warren } from '../index.js';
import { parseInequivalent } from './apply.js';
import { AMQP_URL, MGMT_URL, deleteTopology, guarded, onTeardown, rawConnection, testTopology, uniqueName } from '../../test/helpers.js';

describe('parseInequivalent', () => {
  it('reads the 406 text of a queue argument', () => {
    const text = "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'a.retry.5s' in vhost '/': received the value '5000' of type 'signedint' but current is the value '100' of type 'long'";
    expect(parseInequivalent(text)).toEqual({ kind: 'queue', name: 'a.retry.5s', argument: 'x-message-ttl', expected: '5000', actual: '100' });
    const none = "PRECONDITION_FAILED - inequivalent arg 'x-dead-letter-exchange' for queue 'a' in vhost '/': received the value '' of type 'longstr' but current is none";
    expect(parseInequivalent(none)?.actual).toBeUndefined();
  });
});

describe('declaring and verifying', () => {
  it('is idempotent and creates every queue, exchange and binding', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('a')]: { bindings: ['k.*'], retry: { delays: [10, 20] } } } }));
    const conn = await rawConnection();
    await declareTopology(conn, topology);
    await declareTopology(conn, topology);
    const plan = await planTopology(conn, topology);
    expect(plan.toCreate).toEqual([]);
    expect(plan.drift).toEqual([]);
    expect(plan.entries.map((e) => e.name)).toHaveLength(5);
  });

  it('plans creation without creating anything', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('a')]: { bindings: ['k'] } } }));
    const conn = await rawConnection();
    const plan = await planTopology(conn, topology);
    expect(plan.toCreate.map((e) => e.kind)).toEqual(['exchange', 'queue', 'queue', 'queue', 'queue', 'queue']);
    const again = await planTopology(conn, topology);
    expect(again.toCreate).toHaveLength(6);
  });

  it('reports a queue that exists with other arguments, naming queue, argument and both values; deletes nothing', async () => {
    const exchange = `${uniqueName()}.events`;
    const name = uniqueName('drift');
    const before = defineTopology({ exchange, consumers: { [name]: { bindings: ['k'], retry: { delays: [100] } } } });
    const after = defineTopology({ exchange, consumers: { [name]: { bindings: ['k'], retry: { delays: [100], maxAttempts: 3 } } } });
    onTeardown(() => deleteTopology(before));
    const conn = await rawConnection();
    await declareTopology(conn, before);
    // Same tier name, other TTL: simulate an operator who changed a queue by hand.
    const ch = await conn.createChannel();
    await ch.deleteQueue(`${name}.retry.100ms`);
    // A TTL long enough that the message below outlives the test on a slow machine.
    await ch.assertQueue(`${name}.retry.100ms`, { durable: true, arguments: { 'x-message-ttl': 600_000 } });
    ch.sendToQueue(`${name}.retry.100ms`, Buffer.from('keep me'));
    await ch.close();

    const error = await declareTopology(conn, after).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TopologyDriftError);
    const diff = (error as TopologyDriftError).differences[0];
    expect(diff?.name).toBe(`${name}.retry.100ms`);
    expect(diff?.argument).toMatch(/^x-/);
    expect((error as Error).message).toMatch(/rabbitmqctl delete_queue/);
    expect((error as Error).message).toMatch(/never deletes/);

    const viaAmqp = await planTopology(conn, after);
    expect(viaAmqp.method).toBe('amqp');
    expect(viaAmqp.drift.map((d) => d.name)).toEqual([`${name}.retry.100ms`]);

    const api = new ManagementClient({ url: MGMT_URL });
    if (await api.available()) {
      const viaApi = await planTopology(conn, after, api);
      expect(viaApi.method).toBe('management');
      const args = viaApi.drift.map((d) => `${d.argument}:${String(d.expected)}:${String(d.actual)}`).sort();
      expect(args).toEqual(['x-dead-letter-exchange::undefined', `x-dead-letter-routing-key:${name}:undefined`, 'x-message-ttl:100:600000']);
      await expect(verifyTopology(conn, after, api)).rejects.toThrow(/x-message-ttl is 600000 on the broker, the declaration wants 100/);
    }
    const check = await conn.createChannel();
    expect((await check.checkQueue(`${name}.retry.100ms`)).messageCount).toBe(1);
    await check.close();
  });

  it('sees bindings through the management API: a missing one is to create, an extra one is drift; over AMQP says they are unchecked', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('a')]: { bindings: ['k.one', 'k.two'], retry: { delays: [10] } } } }));
    const [c] = [...topology.consumers.values()];
    const queue = c?.queue as string;
    const conn = await rawConnection();
    await declareTopology(conn, topology);
    const ch = await conn.createChannel();
    await ch.unbindQueue(queue, topology.exchange, 'k.two');
    await ch.bindQueue(queue, topology.exchange, 'other.#');
    await ch.close();
    const api = new ManagementClient({ url: MGMT_URL });
    const plan = await planTopology(conn, topology, api);
    expect(plan.bindingsChecked).toBe(true);
    expect(plan.toCreate.map((e) => [e.kind, e.name])).toEqual([['binding', `${topology.exchange} -> ${queue} with routing key k.two`]]);
    expect(plan.drift).toEqual([{ kind: 'binding', name: `${topology.exchange} -> ${queue} with routing key other.#`, argument: 'binding', expected: undefined, actual: 'other.#' }]);
    expect(plan.entries.find((e) => e.status === 'extra')?.hint).toMatch(/^rabbitmqadmin --vhost=\/ delete binding .*properties_key=other\.%23$/);
    await expect(verifyTopology(conn, topology, api)).rejects.toThrow(/binding .* other\.#: on the broker, not in the declaration/);
    const viaAmqp = await planTopology(conn, topology);
    expect(viaAmqp.bindingsChecked).toBe(false);
    expect(viaAmqp.toCreate).toEqual([]);

    await declareTopology(conn, topology);
    const after = await planTopology(conn, topology, api);
    expect(after.toCreate).toEqual([]);
    // Never removed: the extra binding is still reported.
    expect(after.drift.map((d) => d.actual)).toEqual(['other.#']);
  });

  it('fails Warren.connect with the drift error instead of starting', async () => {
    const exchange = `${uniqueName()}.events`;
    const name = uniqueName('drift2');
    const topology = defineTopology({ exchange, consumers: { [name]: { bindings: ['k'] } } });
    onTeardown(() => deleteTopology(topology));
    const conn = guarded(await amqp.connect(AMQP_URL));
    const ch = await conn.createChannel();
    await ch.assertQueue(name, { durable: true });
    await conn.close();
    await expect(Warren.connect({ url: AMQP_URL, topology })).rejects.toThrow(TopologyDriftError);
  });
});
