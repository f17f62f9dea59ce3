import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { connectWarren, drain, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { harness } from '../store/testing/harness.js';
import { WaitForConditionError } from '../retry-table/index.js';

describe('a retry-table row the table refuses (not an outage)', () => {
  it('the ladder takes the message, counting each run, and parks it at the cap: nothing lost, nothing run past it', async () => {
    const h = await harness('sqlite');
    const store = h.store();
    const table = Object.create(store.retryTable) as typeof store.retryTable;
    let refused = 0;
    table.insert = () => {
      refused += 1;
      return Promise.reject(new Error('row refused: a constraint the table enforces'));
    };
    const topology = testTopology(({ exchange, name }) => ({ exchange, retry: { delays: [20], maxAttempts: 3 }, consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } } }));
    const warren = await connectWarren(topology);
    let runs = 0;
    const consumer = await warren.consume(
      'billing',
      () => {
        runs += 1;
        return Promise.reject(new WaitForConditionError('carrier', { retryAt: null }));
      },
      { retryTable: { table } },
    );
    const { messageId } = await warren.publish('order.created', {});
    await waitFor(() => consumer.stats.parked === 1, 'the message parked at the cap');
    expect(consumer.stats).toMatchObject({ retried: 2, parked: 1, waiting: 0 });
    expect(runs).toBe(3);
    expect(refused).toBe(3);
    const parked = await drain(await rawConnection(), topology.consumer('billing').parkedQueue);
    expect(parked.map((m) => m.properties.messageId)).toEqual([messageId]);
    expect(parked[0]?.properties.headers).toMatchObject({ [HEADER.parkedReason]: 'max-attempts', [HEADER.attempts]: 3 });
  });
});
