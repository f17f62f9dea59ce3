import { describe, expect, it } from 'vitest';
import { HEADER, type TopologyOptions } from '../../src/index.js';
import { connectWarren, depth, rawConnection, testTopology, waitFor } from '../helpers.js';
import { spawnConsumer } from './support.js';

describe('the consumer process is killed mid-handler', () => {
  it('SIGKILL while the handler runs: the broker redelivers to the next consumer, which handles it once', async () => {
    let options: TopologyOptions | undefined;
    const topology = testTopology(({ exchange, name }) => (options = { exchange, crashLimit: 3, consumers: { [name('killed')]: { bindings: ['job'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const { messageId } = await warren.publish('job', { n: 1 });

    const child = spawnConsumer(options!, c.name, 'hang');
    const started = await child.line('handling ');
    expect(started.split(' ')[1]).toBe(messageId);
    child.process.kill('SIGKILL');
    expect(await child.exited).toBe('SIGKILL');

    const handled: Array<{ id: string | undefined; routingKey: string; redeliveries: unknown }> = [];
    const consumer = await warren.consume(c.name, (_p, ctx) => {
      handled.push({ id: ctx.messageId, routingKey: ctx.routingKey, redeliveries: ctx.headers[HEADER.redeliveries] });
    });
    await waitFor(() => consumer.stats.acked === 1, 'the redelivered message to be handled');
    // The guard's move is counted once its ack is done, which can come after its copy was handled.
    await waitFor(() => consumer.stats.redeliveryMoved === 1, 'the crash-loop move to be counted');
    // The delivery the dead process held came back marked redelivered; the crash-loop
    // guard counted it once (keeping the original routing key), and the handler ran once here.
    expect(handled).toEqual([{ id: messageId, routingKey: 'job', redeliveries: 1 }]);
    expect(consumer.stats).toMatchObject({ redeliveryMoved: 1, parked: 0, retried: 0 });
    await waitFor(() => consumer.stats.inFlight === 0, 'the consumer to be idle');
    const raw = await rawConnection();
    expect(await depth(raw, c.queue)).toBe(0);
    expect(await depth(raw, c.parkedQueue)).toBe(0);
  });
});
