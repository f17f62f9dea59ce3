// Test fixtures for parked-queue tests: parked messages published straight to a
// parked queue, with the headers warren writes when it parks one.
import * as amqp from 'amqplib';
import { HEADER } from '../../headers.js';
import { declareTopology } from '../../topology/apply.js';
import type { ConsumerTopology, Topology } from '../../topology/declaration.js';
import { AMQP_URL, guarded, onTeardown, testTopology } from '../../../test/helpers.js';

/** What a fake parked message failed with. */
export interface FakeFailure {
  readonly id?: string;
  readonly errorClass?: string;
  readonly message?: string;
  readonly stack?: string;
  readonly failedAt?: Date;
  readonly routingKey?: string;
  readonly attempts?: number;
  readonly body?: unknown;
  readonly extraHeaders?: Record<string, unknown>;
}

/** The headers warren's consumer writes on a parked message. */
export function parkedHeaders(consumer: ConsumerTopology, exchange: string, f: FakeFailure): Record<string, unknown> {
  const at = (f.failedAt ?? new Date()).toISOString();
  return {
    [HEADER.attempts]: f.attempts ?? 3,
    [HEADER.exchange]: exchange,
    [HEADER.routingKey]: f.routingKey ?? 'order.created',
    [HEADER.consumer]: consumer.name,
    [HEADER.firstFailedAt]: at,
    [HEADER.lastFailedAt]: at,
    [HEADER.errorClass]: f.errorClass ?? 'HttpError',
    [HEADER.errorMessage]: f.message ?? 'carrier 503',
    [HEADER.errorStack]: f.stack ?? 'at send (/app/carrier.js:10:5)',
    [HEADER.parkedReason]: 'max-attempts',
    [HEADER.parkedAt]: at,
    ...f.extraHeaders,
  };
}

/** Publishes parked messages (with confirms, in order) straight to a consumer's parked queue; returns their ids. */
export async function publishParked(conn: amqp.ChannelModel, topology: Topology, consumer: ConsumerTopology, failures: readonly FakeFailure[]): Promise<string[]> {
  const ch = await conn.createConfirmChannel();
  const ids: string[] = [];
  try {
    failures.forEach((f, i) => {
      const id = f.id ?? `m-${String(i + 1).padStart(5, '0')}`;
      ids.push(id);
      ch.sendToQueue(consumer.parkedQueue, Buffer.from(JSON.stringify(f.body ?? { n: i + 1 })), {
        messageId: id,
        contentType: 'application/json',
        persistent: true,
        headers: parkedHeaders(consumer, topology.exchange, f),
      });
    });
    await ch.waitForConfirms();
  } finally {
    await ch.close().catch(() => undefined);
  }
  return ids;
}

/** `n` fake failures built by `make(i)` (0-based). */
export function failures(n: number, make: (i: number) => FakeFailure = () => ({})): FakeFailure[] {
  return Array.from({ length: n }, (_, i) => make(i));
}

/**
 * A raw connection with Nagle's algorithm off (as warren's own connection has), closed
 * after the test. With it on, every `basic.get` round trip waits for a delayed ACK.
 */
export async function fastConnection(): Promise<amqp.ChannelModel> {
  const conn = guarded(await amqp.connect(AMQP_URL, { noDelay: true }));
  onTeardown(() => conn.close());
  return conn;
}

/** Declares a topology on a fresh connection that is closed after the test. */
export async function declared(topology: Topology): Promise<amqp.ChannelModel> {
  const conn = await fastConnection();
  await declareTopology(conn, topology);
  return conn;
}

/** Message ids in a queue, head first, read without removing anything (a channel that never acks). */
export async function peekIds(conn: amqp.ChannelModel, queue: string): Promise<string[]> {
  const ch = await conn.createChannel();
  const ids: string[] = [];
  const held: amqp.GetMessage[] = [];
  try {
    for (;;) {
      const m = await ch.get(queue, { noAck: false });
      if (m === false) break;
      held.push(m);
      ids.push(String(m.properties.messageId));
    }
    // Given back one by one, head first, the queue keeps its order (a classic queue puts
    // each back in its place; quorum queues on 3.10 and 4.0 kept it in every run). One
    // `nack` of them all (`multiple`) gave 50 back to a 4.0 quorum queue with the last 17
    // reversed, every time.
    for (const m of held) ch.nack(m, false, true);
  } finally {
    await ch.close().catch(() => undefined);
  }
  return ids;
}

/** Takes every message from a queue, acking them. */
export { drain as takeAll } from '../../../test/helpers.js';

/** A topology whose one consumer, `billing`, parks after two attempts, on queues of `queueType`. */
export function parkedTopology(queueType: 'classic' | 'quorum'): Topology {
  return testTopology(({ exchange, name }) => ({
    exchange,
    queueType,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.*'] } },
  }));
}
