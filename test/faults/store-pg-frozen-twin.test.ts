/**
 * A copy whose twin still holds the message's advisory lock is refused with
 * StoreBusyError and held, uncounted: after `storeOutageHoldMs` it goes to the first
 * retry tier, still uncounted, comes back, and is refused again. When the twin is the
 * connection of a process that froze or whose host vanished (no FIN, no RST: a network
 * partition, a VM paused, an event loop stuck), PostgreSQL keeps that connection idle in
 * transaction, with the lock, until TCP keepalive gives up (about 2 h 11 min with Linux
 * defaults; `idle_in_transaction_session_timeout` is 0 by default). Meanwhile the message
 * goes round retry tier -> busy -> retry tier with no outcome and no attempt counted:
 * nothing parks it, nothing reports it but a warning per round.
 *
 * The guard bounds its own transaction's idle time: `SET LOCAL
 * idle_in_transaction_session_timeout` in the BEGIN round trip (`idleInTransactionTimeoutMs`,
 * 10 minutes by default, well above the handler's `timeoutMs`, which a live process
 * enforces itself). PostgreSQL then ends the frozen twin's session, its lock goes, and
 * the copy runs. The test shortens the bound to 1 s on the frozen process's guard.
 */
import { describe, expect, it } from 'vitest';
import type { TopologyOptions } from '../../src/index.js';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { connectWarren, onTeardown, testTopology, waitFor } from '../helpers.js';

describe('PostgreSQL guard: the twin is a frozen process idle in transaction', () => {
  it('the copy reaches an outcome within a bound', async () => {
    const h = await harness('postgres');
    // Process A: took the message, then froze inside its handler (its timer never fires).
    const frozen = h.store() as unknown as PostgresStore;
    await frozen.migrate();
    let consumer!: string;
    const topology = testTopology(({ exchange, name }): TopologyOptions => {
      consumer = name('billing');
      return { exchange, consumers: { [consumer]: { bindings: ['order.*'], retry: { delays: ['50ms'], maxAttempts: 2 } } } };
    });
    const warren = await connectWarren(topology);
    const { messageId } = await warren.publish('order.created', {});
    let entered = false;
    let thaw!: () => void;
    const ice = new Promise<void>((r) => (thaw = r));
    const twin = frozen.idempotency({ idleInTransactionTimeoutMs: 1000 }).run(messageId, consumer, async () => {
      entered = true;
      await ice;
      throw new Error('thawed after the test');
    });
    onTeardown(async () => {
      thaw();
      await twin.catch(() => undefined);
    });
    await waitFor(() => entered, 'the frozen twin to hold the marker');
    // Process B gets the redelivered copy.
    const store = h.store();
    const c = await warren.consume(consumer, async () => undefined, { idempotency: store.idempotency(), timeoutMs: 500, storeOutageHoldMs: 200 });
    await waitFor(() => c.stats.acked + c.stats.parked + c.stats.duplicate >= 1, 'the copy to reach an outcome', 5000);
    expect(c.stats.acked + c.stats.parked).toBe(1);
  });
});
