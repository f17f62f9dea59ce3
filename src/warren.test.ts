/**
 * The Warren facade made in two steps, as a framework that hands the instance out
 * before it connects uses it: `Warren.create()` opens nothing, `open()` connects.
 */
import { describe, expect, it } from 'vitest';
import { AMQP_URL, onTeardown, rawConnection, testTopology } from '../test/helpers.js';
import { ClosedError, Warren } from './index.js';

describe('Warren.create and open()', () => {
  it('opens nothing until open(); open() twice connects once; the topology is declared and publishing works', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('create')]: { bindings: ['x'] } } }));
    const warren = Warren.create({ url: AMQP_URL, topology, connectTimeoutMs: 5000 });
    onTeardown(() => warren.close());
    expect(warren.connection.ready).toBe(false);
    expect((await warren.health()).ready).toBe(false);

    const first = warren.open();
    expect(warren.open()).toBe(first);
    await first;
    expect((await warren.health()).ready).toBe(true);
    const queue = [...topology.consumers.values()][0]!.queue;
    const ch = await (await rawConnection()).createChannel();
    expect((await ch.checkQueue(queue)).messageCount).toBe(0);
    await warren.publish('x', { n: 1 });
    expect((await ch.checkQueue(queue)).messageCount).toBe(1);
    await ch.close();
  });

  it('a closed Warren cannot be opened', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('closed')]: { bindings: ['x'] } } }));
    const warren = Warren.create({ url: AMQP_URL, topology });
    await warren.close();
    await expect(warren.open()).rejects.toThrow(ClosedError);
  });
});
