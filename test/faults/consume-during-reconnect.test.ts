/**
 * A consumer started while the connection is reconnecting, after the model is up but
 * before every ready hook has run: `onReady` neither runs the new hook (the connection
 * is not ready yet) nor is the hook in the list the reconnect is running (a copy taken
 * when it began). The consumer never attaches, until the next reconnect.
 */
import { describe, expect, it } from 'vitest';
import { connectWarren, sleep, testTopology, waitFor } from '../helpers.js';

describe('consume() while the connection runs its ready hooks', () => {
  // Failed before the fix: "Timed out after 5000 ms waiting for: the consumer to attach".
  it('the consumer attaches and handles messages', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('midhooks')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    // A slow ready hook (any setup step: declaring topology, another consumer's attach).
    let inHooks = false;
    await warren.connection.onReady(async () => {
      inHooks = true;
      await sleep(500);
      inHooks = false;
    });
    const model = await warren.connection.waitReady(1000);
    (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
    await waitFor(() => inHooks, 'the reconnect to be running its hooks');
    const handled: number[] = [];
    const consumer = await warren.consume(c.name, async (p: { n: number }) => void handled.push(p.n));
    await waitFor(() => warren.connection.ready, 'the reconnect to finish');
    await warren.publish('k', { n: 1 });
    await waitFor(() => consumer.attached, 'the consumer to attach', 5_000);
    await waitFor(() => handled.length === 1, 'the message to be handled');
    expect(handled).toEqual([1]);
  });
});

describe('consume() when the connection drops while it attaches', () => {
  // Failed before the fix: consume() rejected with "Channel ended, no reply will be
  // forthcoming", and a worker that called it at start-up exited (seen in the chaos run).
  it('resolves, and the consumer attaches when the connection is back', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('middrop')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } });
    const model = await warren.connection.waitReady(1000);
    const inner = model as unknown as { createChannel: () => Promise<unknown>; connection: { stream: { destroy(e: Error): void } } };
    const createChannel = inner.createChannel.bind(model);
    // The connection is cut just after the consumer's channel opens, before its consume.
    inner.createChannel = async () => {
      const ch = await createChannel();
      inner.createChannel = createChannel;
      inner.connection.stream.destroy(new Error('cut by the test'));
      return ch;
    };
    const handled: number[] = [];
    const consumer = await warren.consume(c.name, async (p: { n: number }) => void handled.push(p.n));
    await waitFor(() => consumer.attached && warren.connection.currentGeneration === 2, 'the consumer to attach on the new connection', 10_000);
    await warren.publish('k', { n: 1 });
    await waitFor(() => handled.length === 1, 'the message to be handled');
    expect(handled).toEqual([1]);
  });

  it('still rejects when the broker refuses the consume (no such queue)', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('noqueue')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const raw = await (await warren.connection.waitReady(1000)).createChannel();
    await raw.deleteQueue(c.queue);
    await expect(warren.consume(c.name, async () => undefined)).rejects.toThrow(/404|NOT_FOUND/);
  });
});

describe('close() while consume() attaches', () => {
  // Failed before the fix: consume() resolved, the consumer was not in the Warren's list,
  // so close() did not close it, and it tried to re-attach to the closed connection for
  // ever ("consumer could not re-attach; trying again"), keeping the process alive.
  it('closes that consumer too: no re-attach after close', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('closestart')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warnings: string[] = [];
    const logger = { debug: () => undefined, info: () => undefined, warn: (m: string) => void warnings.push(m), error: (m: string) => void warnings.push(m) };
    const warren = await connectWarren(topology, { logger });
    const started = warren.consume(c.name, async () => undefined).then(
      (consumer) => consumer,
      () => undefined,
    );
    await warren.close();
    const consumer = await started;
    if (consumer !== undefined) expect(consumer.attached).toBe(false);
    await sleep(1500);
    expect(warnings.filter((w) => /re-attach/.test(w))).toEqual([]);
  });
});
