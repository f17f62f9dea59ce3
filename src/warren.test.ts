/**
 * The Warren facade made in two steps, as a framework that hands the instance out
 * before it connects uses it: `Warren.create()` opens nothing, `open()` connects.
 */
import { describe, expect, it } from 'vitest';
import { AMQP_URL, onTeardown, rawConnection, testTopology } from '../test/helpers.js';
import { ClosedError, InvalidOptionError, Warren, type IdempotencyGuard } from './index.js';

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

  it('refuses at consume() a handler that declares requiresTx when no idempotency guard gives it a transaction', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('receipts')]: { bindings: ['x'] } } }));
    const name = [...topology.consumers.keys()][0]!;
    const warren = Warren.create({ url: AMQP_URL, topology });
    onTeardown(() => warren.close());
    // As JavaScript (or a loosely typed handler) would call it: the types are out of the way.
    const handler = (_p: unknown, ctx: { tx: { query(sql: string): Promise<void> } }) => ctx.tx.query('INSERT INTO receipts DEFAULT VALUES');
    const error = await warren.consume(name, handler as never, { requiresTx: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as Error).message).toContain(`\`requiresTx\`: consumer '${name}' has a handler that needs a transaction (ctx.tx), but no idempotency guard gives it one`);
    expect((error as Error).message).toMatch(/Pass \{ idempotency: store\.idempotency\(\) \}/);
    expect(warren.listConsumers()).toHaveLength(0);
    await expect(warren.consume(name, () => undefined, { requiresTx: 'yes' as never })).rejects.toThrow(/`requiresTx`: expected true or false, got "yes"/);
    // With a guard it is accepted (not attached: open() was never called, so there is no connection yet).
    const guard: IdempotencyGuard<unknown> = { run: () => Promise.resolve('done') };
    const consumer = await warren.consume(name, () => undefined, { requiresTx: true, idempotency: guard });
    expect(consumer.attached).toBe(false);
    expect(warren.listConsumers()).toEqual([consumer]);
  });
});
