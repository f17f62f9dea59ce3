/**
 * The ack line (AckLine) on a real broker, for classic and quorum queues: a `multiple`
 * ack never reaches a delivery whose work is not done (a handler still running, a move
 * whose copy is not confirmed), acks are written in fewer frames than messages, and a
 * blocker with more successes behind it than the line keeps leaves each acked once.
 *
 * What the broker hands back when a channel or connection goes is exactly what it holds
 * unacked: a multiple ack that reached too far shows as a message that never comes back.
 * Before a connection is cut, a request on the consumer's own channel is answered: the
 * broker has read every ack written on that channel before it.
 */
import net from 'node:net';
import type * as amqp from 'amqplib';
import { describe, expect, it } from 'vitest';
import type { Logger } from '../logger.js';
import { AMQP_URL, connectWarren, depth, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';

/** A gate a handler waits at until the test opens it. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

/** The consumer's channel (private): the test closes it, wraps its acks, or asks on it. */
function channelOf(consumer: object): amqp.Channel {
  const ch = (consumer as unknown as { channel: amqp.Channel | undefined }).channel;
  if (ch === undefined) throw new Error('the consumer has no channel');
  return ch;
}

/** Returns once the broker has read every frame written on the consumer's channel so far (a request on it is answered in order). */
async function acksRead(consumer: object, queue: string): Promise<void> {
  await channelOf(consumer).checkQueue(queue);
}

/** A logger that keeps the consumer's warnings and errors, to find a channel the broker closed (a double ack: PRECONDITION_FAILED). */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const keep = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push(`${level}: ${message} ${JSON.stringify(fields ?? {})}`);
  return { logger: { debug: () => undefined, info: () => undefined, warn: keep('warn'), error: keep('error') }, lines };
}

/**
 * The ids whose redelivery came while their first run was still going here: the broker
 * gave back what was not acked, and the consumer holds it until that run ends (never a
 * second run beside it), then settles it by the run's outcome.
 */
const heldBack = (lines: readonly string[]) =>
  lines.filter((l) => l.includes('a redelivery of a message still running here')).map((l) => /"messageId":"([^"]+)"/.exec(l)?.[1]);

const channelErrors = (lines: readonly string[]) => lines.filter((l) => /channel error|PRECONDITION|unknown delivery tag/i.test(l));

/**
 * A TCP forwarder to the broker that tells warren's two connections apart (the publish
 * one names itself `... (publish)` in its start-ok) and can stop reading what the
 * publish connection writes: its copies and their confirms wait, as on a broker that
 * is slow to read. `cut` drops the connections of one kind, as a network fault would.
 */
class SplitProxy {
  private readonly links = new Set<{ client: net.Socket; server: net.Socket; publish: boolean }>();
  private stalled = false;

  private constructor(private readonly server: net.Server, readonly port: number) {}

  static async start(targetPort: number): Promise<SplitProxy> {
    const self: { proxy?: SplitProxy } = {};
    const server = net.createServer((client) => {
      const upstream = net.connect(targetPort, '127.0.0.1');
      const link = { client, server: upstream, publish: false };
      let opening = Buffer.alloc(0);
      self.proxy?.links.add(link);
      client.on('data', (chunk: Buffer) => {
        if (!link.publish && opening.length < 8192) {
          opening = Buffer.concat([opening, chunk]);
          link.publish = opening.includes('(publish)');
          if (link.publish && self.proxy?.stalled) client.pause();
        }
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => void client.write(chunk));
      const close = () => {
        client.destroy();
        upstream.destroy();
        self.proxy?.links.delete(link);
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    self.proxy = new SplitProxy(server, (server.address() as net.AddressInfo).port);
    return self.proxy;
  }

  /** Stops reading what the publish connection writes: nothing it publishes reaches the broker, nothing is confirmed. */
  stallPublish(): void {
    this.stalled = true;
    for (const l of this.links) if (l.publish) l.client.pause();
  }

  /** Drops the connections of one kind; new connections are read from again. */
  cut(kind: 'consumer' | 'publish'): void {
    this.stalled = false;
    for (const l of [...this.links]) {
      if (l.publish !== (kind === 'publish')) continue;
      l.client.destroy();
      l.server.destroy();
      this.links.delete(l);
    }
  }

  async close(): Promise<void> {
    for (const l of this.links) {
      l.client.destroy();
      l.server.destroy();
    }
    this.links.clear();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

type Run = { id: string; redelivered: boolean };

describe.each(['classic', 'quorum'] as const)('the ack line, %s queue', (queueType) => {
  async function setup(url?: string) {
    const topology = testTopology(({ exchange, name }) => ({ exchange, queueType, retry: { delays: [50], maxAttempts: 3 }, consumers: { [name('acks')]: { bindings: ['a.*'] } } }));
    const c = [...topology.consumers.values()][0]!;
    const warren = await connectWarren(topology, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 }, ...(url === undefined ? {} : { url }) });
    const raw = await rawConnection();
    const publish = async (ids: readonly string[]) => {
      await Promise.all(ids.map((id) => warren.publish('a.x', { id }, { messageId: id })));
    };
    return { c, warren, raw, publish };
  }

  const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `m${from + i}`);

  for (const slowAt of [1, 25]) {
    it(`a connection cut while the handler at position ${slowAt} of 50 still runs gives back that message alone (prefetch 50)`, async () => {
      const { c, warren, raw, publish } = await setup();
      const slow = gate();
      const slowId = `m${slowAt}`;
      const runs: Run[] = [];
      const { logger, lines } = recordingLogger();
      const all = ids(50);
      await publish(all);
      const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
        runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
        if (p.id === slowId && !ctx.raw.fields.redelivered) await slow.wait;
      }, { prefetch: 50, logger });
      await waitFor(() => consumer.stats.acked === 49, () => `the 49 others to be acked: ${consumer.stats.acked}`);
      await acksRead(consumer, c.queue);
      const model = await warren.connection.waitReady(5000);
      (model as unknown as { connection: { stream: { destroy(e: Error): void } } }).connection.stream.destroy(new Error('cut by the test'));
      await waitFor(() => heldBack(lines).includes(slowId), () => `the running one to come back: ${JSON.stringify(heldBack(lines))}`, 20_000);
      // Let the first run go: its ack meets a closed channel, and its redelivery is acked by its outcome.
      slow.open();
      await waitFor(async () => consumer.stats.acked >= 50 && consumer.stats.inFlight === 0 && (await depth(raw, c.queue)) === 0, 'the running one\'s redelivery to be acked');
      expect(consumer.stats.acked).toBe(50);
      expect(heldBack(lines), 'only the delivery still running comes back').toEqual([slowId]);
      expect(runs.filter((r) => r.redelivered), 'no second run').toEqual([]);
      expect(new Set(runs.map((r) => r.id)).size).toBe(50);
      expect(channelErrors(lines)).toEqual([]);
    });
  }

  it('a warren closed with a short shutdown timeout while one handler runs leaves that message alone in the queue', async () => {
    const { c, warren, raw, publish } = await setup();
    const slow = gate();
    onTeardown(async () => slow.open());
    const { logger, lines } = recordingLogger();
    await publish(ids(50));
    const consumer = await warren.consume(c.name, async (p: { id: string }) => {
      if (p.id === 'm1') await slow.wait;
    }, { prefetch: 50, shutdownTimeoutMs: 200, logger });
    await waitFor(() => consumer.stats.acked === 49, () => `the 49 others to be acked: ${consumer.stats.acked}`);
    await warren.close();
    await waitFor(async () => (await depth(raw, c.queue)) === 1, 'the running one back in the queue');
    const ch = await raw.createChannel();
    const back = await ch.get(c.queue, { noAck: true });
    await ch.close();
    expect(back && back.properties.messageId).toBe('m1');
    expect(back && back.fields.redelivered).toBe(true);
    expect(channelErrors(lines)).toEqual([]);
  });

  it('a failed delivery whose retry copy is not confirmed is not acked by the acks after it: cut, it comes back from the work queue', async () => {
    const proxy = await SplitProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const { c, warren, raw, publish } = await setup(`amqp://guest:guest@127.0.0.1:${proxy.port}`);
    const runs: Run[] = [];
    const { logger, lines } = recordingLogger();
    const all = ids(20);
    await publish(all);
    // The copy m10's retry writes is never read: no confirm, and no copy in the broker.
    proxy.stallPublish();
    let failed = false;
    const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
      runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
      if (p.id === 'm10' && !failed) {
        failed = true;
        throw new Error('transient');
      }
    }, { prefetch: 20, logger });
    await waitFor(() => consumer.stats.acked === 19 && failed, () => `the 19 others to be acked while m10's copy waits: ${consumer.stats.acked}`);
    expect(consumer.stats.retried, 'the move is not done').toBe(0);
    await acksRead(consumer, c.queue);
    // Both connections die; the copy that was never read dies with the publish one.
    proxy.cut('consumer');
    proxy.cut('publish');
    await waitFor(() => runs.some((r) => r.id === 'm10' && r.redelivered), () => `m10 to come back from the work queue: ${JSON.stringify(runs.filter((r) => r.id === 'm10' || r.redelivered))}`, 20_000);
    await waitFor(async () => consumer.stats.inFlight === 0 && (await depth(raw, c.queue)) === 0 && (await depth(raw, c.retryQueues[0]!)) === 0, 'm10 to be handled');
    expect(runs.filter((r) => r.redelivered).map((r) => r.id), 'only the delivery being moved comes back').toEqual(['m10']);
    expect(channelErrors(lines)).toEqual([]);
  });

  it('a burst is acked in fewer basic.ack frames than messages', async () => {
    const { c, warren, raw, publish } = await setup();
    const n = 1000;
    // Every channel the consumer connection makes counts its ack frames (one per ch.ack call).
    let frames = 0;
    const model = await warren.connection.waitReady(5000);
    const create = model.createChannel.bind(model);
    model.createChannel = async (...args: Parameters<typeof create>) => {
      const ch = await create(...args);
      const ack = ch.ack.bind(ch);
      ch.ack = (message, allUpTo) => {
        frames += 1;
        ack(message, allUpTo);
      };
      return ch;
    };
    const { logger, lines } = recordingLogger();
    await publish(ids(n));
    const consumer = await warren.consume(c.name, async () => undefined, { prefetch: 50, logger });
    await waitFor(async () => consumer.stats.acked === n && (await depth(raw, c.queue)) === 0, () => `all ${n} acked: ${consumer.stats.acked}`, 30_000);
    await acksRead(consumer, c.queue);
    console.log(`[acks] ${queueType}: ${n} messages acked in ${frames} basic.ack frames (${(frames / n).toFixed(3)} a message)`);
    expect(frames).toBeGreaterThan(0);
    expect(frames).toBeLessThan(n);
    expect(channelErrors(lines)).toEqual([]);
  });

  it('a blocker with more successes behind it than the line keeps: all acked once, and the blocker last', async () => {
    const { c, warren, raw, publish } = await setup();
    const blocker = gate();
    const runs: Run[] = [];
    const { logger, lines } = recordingLogger();
    // prefetch 10: the line keeps 2 × 10 + 64 = 84 entries before it drops settled ones.
    await publish(['m0']);
    const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
      runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
      if (p.id === 'm0') await blocker.wait;
    }, { prefetch: 10, logger });
    await waitFor(() => runs.length === 1, 'the blocker to start');
    await publish(ids(300, 1));
    await waitFor(() => consumer.stats.acked === 300, () => `the 300 behind the blocker to be acked: ${consumer.stats.acked}`, 30_000);
    await acksRead(consumer, c.queue);
    // The blocker goes while more arrive: the next multiple ack reaches over what was acked one by one.
    const more = publish(ids(100, 301));
    blocker.open();
    await more;
    await waitFor(async () => consumer.stats.acked === 401 && consumer.stats.inFlight === 0 && (await depth(raw, c.queue)) === 0, () => `all 401 acked: ${consumer.stats.acked}`, 30_000);
    await acksRead(consumer, c.queue);
    expect(channelErrors(lines)).toEqual([]);
    expect(runs.filter((r) => r.redelivered)).toEqual([]);
    expect(runs.length).toBe(401);
    // Nothing left unacked on the channel: closing it gives nothing back.
    await channelOf(consumer).close();
    await waitFor(() => consumer.attached, 'the consumer to attach again');
    expect(await depth(raw, c.queue)).toBe(0);
    expect(runs.length).toBe(401);
  });

  it('a blocker with more successes behind it than the line keeps is still held: a closed channel gives it back alone', async () => {
    const { c, warren, publish } = await setup();
    const blocker = gate();
    onTeardown(async () => blocker.open());
    const runs: Run[] = [];
    const { logger, lines } = recordingLogger();
    await publish(['m0']);
    const consumer = await warren.consume(c.name, async (p: { id: string }, ctx) => {
      runs.push({ id: p.id, redelivered: ctx.raw.fields.redelivered });
      if (p.id === 'm0' && !ctx.raw.fields.redelivered) await blocker.wait;
    }, { prefetch: 10, logger });
    await waitFor(() => runs.length === 1, 'the blocker to start');
    await publish(ids(300, 1));
    await waitFor(() => consumer.stats.acked === 300, () => `the 300 behind the blocker to be acked: ${consumer.stats.acked}`, 30_000);
    await channelOf(consumer).close();
    await waitFor(() => heldBack(lines).includes('m0'), () => `the blocker to come back: ${JSON.stringify(heldBack(lines))}`, 20_000);
    blocker.open();
    await waitFor(() => consumer.stats.acked === 301, () => `the blocker's redelivery to be acked: ${consumer.stats.acked}`, 20_000);
    expect(heldBack(lines)).toEqual(['m0']);
    expect(runs.filter((r) => r.redelivered), 'no second run').toEqual([]);
    expect(channelErrors(lines)).toEqual([]);
  });
});
