/**
 * Publisher.close() fails the publishes waiting to be written, but not those waiting
 * for a slot (`maxInFlight`), and it stops the sweep that bounds them. When a slot
 * frees (the in-flight publish confirmed), the waiter finds no channel, opens a new
 * one on the still-open connection (its ready hook is gone, nobody closes it) and
 * writes the message after close() returned, with no deadline left to bound it.
 */
import { describe, expect, it } from 'vitest';
import { ClosedError, Publisher } from '../../src/index.js';
import { BrokerConnection } from '../../src/connection/index.js';
import { AMQP_URL, depth, onTeardown, rawConnection, testTopology } from '../helpers.js';

describe('Publisher.close() with a publish waiting for a slot', () => {
  // Failed before the fix: "expected 'written' to be an instance of ClosedError".
  it('the waiting publish is rejected with ClosedError, never written after close', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('closeslot')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const raw = await rawConnection();
    const ch = await raw.createChannel();
    await ch.assertExchange(topology.exchange, 'topic', { durable: true });
    await ch.assertQueue(c.queue, { durable: true });
    await ch.bindQueue(c.queue, topology.exchange, 'k');
    const connection = new BrokerConnection({ url: AMQP_URL });
    await connection.open();
    onTeardown(() => connection.close());
    const publisher = new Publisher(connection, topology.exchange, { maxInFlight: 1 });
    await publisher.start();
    const first = publisher.publish('k', { n: 1 });
    const second = publisher.publish('k', { n: 2 }).then(() => 'written', (e: unknown) => e);
    await publisher.close();
    await first;
    const fate = await second;
    expect(fate, 'a publish still waiting for a slot when close() was called').toBeInstanceOf(ClosedError);
    expect(await depth(raw, c.queue)).toBe(1);
  });
});
