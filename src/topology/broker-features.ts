/**
 * What the broker a connection reached can do, read from the server properties it sent
 * in the handshake (`product`, `version`): nothing is declared or published to learn it.
 *
 * Why the version and not a probe: RabbitMQ before 4.3 accepts the `x-delayed-retry-*`
 * queue arguments and ignores them (seen on 3.10.8 and 4.0.5), and 4.3 accepts any value
 * of `x-delayed-retry-type` (a misspelt one delays nothing). A declaration that succeeds
 * proves nothing; only a reject that comes back late would, at the cost of a quorum queue
 * made and deleted and of `min` waited on every connect.
 */
import type * as amqp from 'amqplib';
import { UnsupportedBrokerError } from '../errors.js';
import type { ConsumerTopology, Topology } from './declaration.js';

/** The first RabbitMQ version whose quorum queues delay retries themselves. */
export const IN_QUEUE_RETRY_SINCE = { major: 4, minor: 3 } as const;

/** A broker as its server properties describe it. */
export interface BrokerIdentity {
  /** `product`, e.g. `RabbitMQ`; undefined when the broker sent none. */
  readonly product: string | undefined;
  /** `version`, e.g. `4.3.6`; undefined when the broker sent none. */
  readonly version: string | undefined;
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  return Buffer.isBuffer(value) ? value.toString('utf8') : undefined;
}

/** The product and version a connection's broker sent in its handshake. */
export function brokerIdentity(model: amqp.ChannelModel): BrokerIdentity {
  const props = (model as unknown as { connection?: { serverProperties?: Record<string, unknown> } }).connection?.serverProperties ?? {};
  return { product: text(props['product']), version: text(props['version']) };
}

/** `major.minor` of a version text (`4.3.6`, `4.3.0-rc.1`, `4.4.0+build`), or undefined. */
export function parseVersion(version: string | undefined): { major: number; minor: number } | undefined {
  const m = version === undefined ? null : /^\s*(\d+)\.(\d+)/.exec(version);
  return m ? { major: Number(m[1]), minor: Number(m[2]) } : undefined;
}

/** True when the broker is RabbitMQ 4.3 or later: its quorum queues delay retries (`x-delayed-retry-*`). */
export function hasInQueueRetry(broker: BrokerIdentity): boolean {
  if (broker.product !== 'RabbitMQ') return false;
  const v = parseVersion(broker.version);
  if (v === undefined) return false;
  return v.major > IN_QUEUE_RETRY_SINCE.major || (v.major === IN_QUEUE_RETRY_SINCE.major && v.minor >= IN_QUEUE_RETRY_SINCE.minor);
}

/**
 * Throws {@link UnsupportedBrokerError} when one of `consumers` retries inside its queue
 * and the broker is not RabbitMQ 4.3 or later. Pure.
 */
export function checkBrokerFeatures(broker: BrokerIdentity, consumers: Iterable<ConsumerTopology>): void {
  for (const c of consumers) {
    if (c.inQueue === undefined || hasInQueueRetry(broker)) continue;
    const server = [broker.product ?? 'a broker that did not say its product', broker.version ?? '(no version given)'].join(' ');
    throw new UnsupportedBrokerError(
      `consumers.${c.name}.retry.inQueue`,
      server,
      `RabbitMQ ${IN_QUEUE_RETRY_SINCE.major}.${IN_QUEUE_RETRY_SINCE.minor}`,
      `consumer '${c.name}' retries inside its quorum queue with the broker's delayed retry, x-delayed-retry-*`,
      `give the consumer tier queues instead: remove \`inQueue\` and give \`retry.delays\`, e.g. ['5s', '1m', '10m']`,
    );
  }
}

/** {@link checkBrokerFeatures} for the broker `model` is connected to: every consumer of `topology`, or only `only`. */
export function checkTopologyFeatures(model: amqp.ChannelModel, topology: Topology, only?: string): void {
  const consumers = only === undefined ? topology.consumers.values() : [topology.consumer(only)];
  checkBrokerFeatures(brokerIdentity(model), consumers);
}
