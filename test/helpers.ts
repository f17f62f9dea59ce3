import { randomBytes } from 'node:crypto';
import { Socket } from 'node:net';
import * as amqp from 'amqplib';
import { afterEach } from 'vitest';
import { defineTopology, topologySpec, Warren, type Topology, type TopologyOptions, type WarrenOptions } from '../src/index.js';

/** The broker under test; scripts/test.sh runs the suite once per broker version. */
export const AMQP_URL = process.env['WARREN_TEST_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
export const MGMT_URL = process.env['WARREN_TEST_MGMT_URL'] ?? 'http://guest:guest@127.0.0.1:15672';
export const BROKER = process.env['WARREN_TEST_BROKER'] ?? '3.10';
export const PG_URL = process.env['WARREN_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A name no other test uses, so tests can run side by side on one broker. */
export function uniqueName(label = 't'): string {
  return `wt.${label}.${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
}

const cleanups: Array<() => Promise<void>> = [];

/** Runs `fn` after the current test, pass or fail. */
export function onTeardown(fn: () => Promise<void>): void {
  cleanups.push(fn);
}

afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) {
    // A cleanup that hangs fails the test by the hook's timeout (30 s): say which one it was.
    const slow = setTimeout(() => console.error(`teardown: still waiting after 20 s for ${String(fn).replace(/\s+/g, ' ').slice(0, 160)}`), 20_000);
    await fn()
      .catch(() => undefined)
      .finally(() => clearTimeout(slow));
  }
});

/** A topology with unique exchange and consumer names, whose queues are deleted after the test. */
export function testTopology(build: (names: { exchange: string; name: (c: string) => string }) => TopologyOptions): Topology {
  const prefix = uniqueName();
  const topology = defineTopology(build({ exchange: `${prefix}.events`, name: (c) => `${prefix}.${c}` }));
  onTeardown(() => deleteTopology(topology));
  return topology;
}

/**
 * Gives a raw amqplib connection an `error` listener, and every channel made from it one
 * from the moment amqplib hands it over. An 'error' nobody listens to is an uncaught
 * exception (amqplib's "Unexpected close" when a socket drops) that fails the whole run;
 * with a listener, the operation that meets the closed connection fails instead.
 * Returns the connection.
 */
export function guarded(conn: amqp.ChannelModel): amqp.ChannelModel {
  conn.on('error', () => undefined);
  const plain = conn.createChannel.bind(conn);
  const confirm = conn.createConfirmChannel.bind(conn);
  conn.createChannel = async (options?: unknown) => withListener(await plain(options as never));
  conn.createConfirmChannel = async (options?: unknown) => withListener(await confirm(options as never));
  return conn;
}

function withListener<C extends amqp.Channel>(ch: C): C {
  ch.on('error', () => undefined);
  return ch;
}

/** A raw amqplib connection to the broker under test, {@link guarded}; the caller closes it. */
export async function connectRaw(url = AMQP_URL): Promise<amqp.ChannelModel> {
  return guarded(await amqp.connect(url, { noDelay: true }));
}

/** Deletes what a topology declared. Only tests do this; warren never deletes. */
export async function deleteTopology(topology: Topology): Promise<void> {
  const conn = await connectRaw();
  try {
    const spec = topologySpec(topology);
    for (const q of spec.queues) {
      const ch = await conn.createChannel();
      await ch.deleteQueue(q.name).catch(() => undefined);
      await ch.close().catch(() => undefined);
    }
    // Passive exchanges belong to someone else: the test that made one deletes it.
    for (const ex of spec.exchanges) {
      if (ex.passive) continue;
      const ch = await conn.createChannel();
      await ch.deleteExchange(ex.name).catch(() => undefined);
      await ch.close().catch(() => undefined);
    }
  } finally {
    await conn.close();
  }
}

/** A connected Warren that is closed after the test. */
export async function connectWarren(topology: Topology, options: Partial<WarrenOptions> = {}): Promise<Warren> {
  const warren = await Warren.connect({ url: AMQP_URL, topology, connectTimeoutMs: 5000, ...options });
  onTeardown(() => warren.close());
  return warren;
}

/** A raw amqplib connection for inspecting queues, closed after the test. */
export async function rawConnection(): Promise<amqp.ChannelModel> {
  const conn = await connectRaw();
  onTeardown(() => conn.close());
  return conn;
}

/** Messages ready in a queue. */
export async function depth(conn: amqp.ChannelModel, queue: string): Promise<number> {
  return (await queueCounts(conn, queue)).ready;
}

/**
 * A queue's ready messages and consumers, as the queue itself says (no statistics lag).
 * A queue drops a consumer and takes back what it held in one step: no consumers means
 * nothing is held by a reader that has gone.
 */
export async function queueCounts(conn: amqp.ChannelModel, queue: string): Promise<{ ready: number; consumers: number }> {
  const ch = await conn.createChannel();
  try {
    const ok = await ch.checkQueue(queue);
    return { ready: ok.messageCount, consumers: ok.consumerCount };
  } finally {
    await ch.close().catch(() => undefined);
  }
}

/** Takes every message from a queue (acking them). */
export async function drain(conn: amqp.ChannelModel, queue: string): Promise<amqp.GetMessage[]> {
  const ch = await conn.createChannel();
  const out: amqp.GetMessage[] = [];
  try {
    for (;;) {
      const m = await ch.get(queue, { noAck: true });
      if (m === false) return out;
      out.push(m);
    }
  } finally {
    await ch.close().catch(() => undefined);
  }
}

/**
 * Polls until `check` returns true, or fails after `timeoutMs` with `what` (a function
 * is called at the failure, so the message can show the state it ended in).
 */
export async function waitFor(check: () => boolean | Promise<boolean>, what: string | (() => string), timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(20);
  }
  throw new Error(`Timed out after ${timeoutMs} ms waiting for: ${typeof what === 'function' ? what() : what}`);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** True when something accepts TCP connections on 127.0.0.1:`port` within 2 s (a node a script may not have started). */
export async function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = new Socket();
    s.setTimeout(2000, () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(false));
    s.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
  });
}
