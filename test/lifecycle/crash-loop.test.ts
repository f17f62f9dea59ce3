import { describe, expect, it } from 'vitest';
import { HEADER, type QueueType, type TopologyOptions } from '../../src/index.js';
import { connectWarren, depth, drain, rawConnection, testTopology } from '../helpers.js';
import { spawnConsumer } from './support.js';

const CRASH_LIMIT = 3;

describe.each<QueueType>(['classic', 'quorum'])('crash-loop guard on a %s queue', (queueType) => {
  it(`parks a message that kills the process every time, after a bounded number of deliveries, with reason 'crash-loop'`, async () => {
    let options: TopologyOptions | undefined;
    const topology = testTopology(({ exchange, name }) => (options = { exchange, queueType, crashLimit: CRASH_LIMIT, consumers: { [name('crashy')]: { bindings: ['poison'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology);
    const { messageId } = await warren.publish('poison', { kills: true });
    const raw = await rawConnection();

    // Each child runs the handler, which exits the process (code 3); the next one
    // gets the redelivery. The child that parks the message exits 0 by itself.
    const runs: string[] = [];
    const exits: Array<number | string> = [];
    while (exits.at(-1) !== 0) {
      expect(exits.length, `the message was still not parked after ${exits.length} processes; handler runs: ${runs.join(' | ')}`).toBeLessThan(CRASH_LIMIT + 3);
      const child = spawnConsumer(options!, c.name, 'exit');
      exits.push(await child.exit());
      runs.push(...child.lines.filter((l) => l.startsWith('handling ')));
    }
    expect(exits.slice(0, -1).every((code) => code === 3), `exit codes ${exits.join(', ')}`).toBe(true);

    // The handler ran crashLimit times, never more; every run was this message.
    expect(runs.length, runs.join(' | ')).toBe(CRASH_LIMIT);
    for (const r of runs) expect(r.split(' ')[1]).toBe(messageId);
    const [msg, ...rest] = await drain(raw, c.parkedQueue);
    expect(rest).toHaveLength(0);
    expect(msg?.properties.messageId).toBe(messageId);
    const h = msg!.properties.headers!;
    expect(h[HEADER.parkedReason]).toBe('crash-loop');
    expect(h[HEADER.errorClass]).toBe('CrashLoopError');
    expect(h[HEADER.consumer]).toBe(c.name);
    expect(h[HEADER.routingKey]).toBe('poison');
    expect(JSON.parse(msg!.content.toString())).toEqual({ kills: true });
    expect(await depth(raw, c.queue)).toBe(0);
  });
});
