/**
 * A handler that outlives the broker's consumer timeout. An operator's `consumer-timeout`
 * policy of 1.5 s on a quorum work queue, a handler that takes 4 s. RabbitMQ 4.3 cancels
 * the consumer (basic.cancel, the channel stays open) and returns the delivery; 4.0
 * closes the channel instead, at its next timeout check (once a minute), so there the
 * handler runs until the broker has acted. The redelivery of a message this process is
 * still running must not start a second run beside the first: it is held, and settled
 * by the first run's outcome. The consumer re-attaches, counts the broker's action and
 * logs it.
 *
 * 3.10 has the consumer timeout only as a global setting (no `consumer-timeout` policy
 * key, no `x-consumer-timeout` argument): it cannot be set for one queue, so the test is
 * skipped there.
 *
 * Failed before the fix on 4.3.6: without a store "Timed out after 100000 ms waiting for:
 * the message to be handled" (each run's ack went to the cancelled consumer, the
 * redelivery ran again beside it, and so on without end); with the SQLite guard "acked
 * once: expected +0 to be 1" (the redelivery's run found the work done: a duplicate).
 */
import { describe, expect, it } from 'vitest';
import type { Logger, TopologyOptions } from '../../src/index.js';
import { warrenMetrics } from '../../src/metrics/index.js';
import { parseScrape, valueOf } from '../../src/metrics/testing/scrape.js';
import { harness } from '../../src/store/testing/harness.js';
import { BROKER, MGMT_URL, connectWarren, onTeardown, queueCounts, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

async function mgmt(method: string, path: string, body?: unknown): Promise<void> {
  const u = new URL(MGMT_URL);
  const auth = `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`;
  const res = await fetch(`${u.protocol}//${u.host}${path}`, {
    method,
    headers: { authorization: auth, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!res.ok && !(method === 'DELETE' && res.status === 404)) throw new Error(`management API answered ${res.status} to ${method} ${path}: ${await res.text()}`);
}

/** A `consumer-timeout` policy of `ms` on exactly `queue`, removed after the test. */
async function consumerTimeoutPolicy(queue: string, ms: number): Promise<void> {
  const name = `${queue}.ctimeout`;
  const path = `/api/policies/%2F/${encodeURIComponent(name)}`;
  const pattern = `^${queue.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`;
  await mgmt('PUT', path, { pattern, 'apply-to': 'queues', priority: 50, definition: { 'consumer-timeout': ms } });
  onTeardown(() => mgmt('DELETE', path));
}

const perQueueTimeout = BROKER !== '3.10';

describe.skipIf(!perQueueTimeout)('a handler that outlives the broker\'s consumer timeout (3.10: the timeout is global-only, not settable per queue)', () => {
  for (const withStore of [false, true]) {
    it(`runs once at a time and is acked once, ${withStore ? 'with a SQLite idempotency guard' : 'without a store'}`, async () => {
      const topology = testTopology(({ exchange, name }): TopologyOptions => {
        const c = name('ctimeout');
        return { exchange, queueType: 'quorum', consumers: { [c]: { bindings: ['x'] } } };
      });
      const decl = [...topology.consumers.values()][0]!;
      const { queue, parkedQueue } = decl;
      const warren = await connectWarren(topology);
      await consumerTimeoutPolicy(queue, 1500);
      const guard = withStore ? await (async () => {
        const h = await harness('sqlite');
        const store = h.store();
        await store.migrate();
        return store.idempotency();
      })() : undefined;

      const lines: Array<{ level: string; message: string; fields: Record<string, unknown> | undefined }> = [];
      const logger: Logger = {
        debug: () => undefined,
        info: (message, fields) => lines.push({ level: 'info', message, fields }),
        warn: (message, fields) => lines.push({ level: 'warn', message, fields }),
        error: (message, fields) => lines.push({ level: 'error', message, fields }),
      };
      let running = 0;
      let mostAtOnce = 0;
      let runs = 0;
      let finished = 0;
      const consumer = await warren.consume(decl.name, async () => {
        runs++;
        running++;
        mostAtOnce = Math.max(mostAtOnce, running);
        try {
          await sleep(4000);
          // 4.0 checks consumer timeouts once a minute: run until the broker has acted.
          const until = Date.now() + 90_000;
          while (consumer.stats.brokerCancels === 0 && Date.now() < until) await sleep(200);
        } finally {
          running--;
          finished++;
        }
      }, { logger, timeoutMs: 120_000, prefetch: 4, concurrency: 4, ...(guard === undefined ? {} : { idempotency: guard }) });

      const metrics = warrenMetrics({ warren });
      await warren.publish('x', { n: 1 }, { messageId: 'slow-1' });
      await waitFor(() => consumer.stats.brokerCancels >= 1, 'the broker to cancel the consumer (or close its channel) for the timeout', 100_000);
      await waitFor(() => consumer.stats.acked + consumer.stats.duplicate >= 1 && running === 0, 'the message to be handled', 100_000);
      const conn = await rawConnection();
      await waitFor(async () => (await queueCounts(conn, queue)).ready === 0 && consumer.attached, 'the queue to be empty and the consumer attached', 20_000);
      // Anything still on its way (a redelivery, a late second run) shows within a few seconds.
      await sleep(3000);

      expect(mostAtOnce, 'two runs of one message at once').toBe(1);
      expect(consumer.stats.acked, 'acked once').toBe(1);
      expect(consumer.stats.parked, 'nothing parked').toBe(0);
      expect((await queueCounts(conn, parkedQueue)).ready, 'the parked queue is empty').toBe(0);
      expect((await queueCounts(conn, queue)).ready, 'the work queue is empty').toBe(0);
      expect(running).toBe(0);
      if (!withStore) expect(runs, 'without a store, the handler ran once').toBe(1);
      expect(consumer.attached, 'the consumer re-attached').toBe(true);
      const said = lines.find((l) => /broker (cancelled the consumer|closed the consumer's channel)/.test(l.message));
      expect(said, `a log line saying what the broker did; got ${JSON.stringify(lines.map((l) => l.message))}`).toBeDefined();
      expect(finished).toBe(runs);
      const cancels = valueOf(parseScrape(await metrics.registry.metrics()), 'warren_consumer_cancellations_total', { consumer: decl.name });
      expect(cancels, 'the metric counts what the broker did').toBe(consumer.stats.brokerCancels);
    }, 240_000);
  }
});
