/**
 * `settled` is documented as once per publish (the metrics count publishes by it). A
 * publish given up at its deadline is settled then; its late confirm, when the broker
 * reads it after all, ran the same settle again and emitted `settled` a second time.
 */
import { describe, expect, it } from 'vitest';
import { PublishNotConfirmedError } from '../../src/index.js';
import { BlockingProxy } from '../../src/publish/testing/blocking-proxy.js';
import { AMQP_URL, connectWarren, depth, rawConnection, sleep, testTopology, waitFor } from '../helpers.js';

describe('a confirm that arrives after the publish was given up', () => {
  // Failed before the fix: "expected 3 to be 2" ('settled' with the error, then again with none).
  it("emits 'settled' once", async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('settledonce')]: { bindings: ['k'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const proxy = await BlockingProxy.start(Number(new URL(AMQP_URL).port || 5672));
    const warren = await connectWarren(topology, { url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, publisher: { confirmTimeoutMs: 300 } });
    const settled: Array<Error | undefined> = [];
    warren.publisher.on('settled', (error: Error | undefined) => void settled.push(error));
    proxy.stall();
    await expect(warren.publish('k', { n: 1 })).rejects.toBeInstanceOf(PublishNotConfirmedError);
    proxy.unblock();
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) === 1, 'the late copy to land');
    await warren.publish('k', { n: 2 }); // its confirm comes after the late one
    await sleep(50);
    await warren.close();
    await proxy.close();
    expect(settled.length, "'settled' events for two publishes").toBe(2);
  });
});
