/**
 * Several exchanges against a real broker: a consumer bound to direct, fanout and headers
 * exchanges besides the default topic one; a passive exchange another team owns, missing
 * and present; drift on a non-default exchange; and the per-consumer guarantees (retry,
 * park, replay to the failing consumer only) for a message that came from a foreign exchange.
 */
import { describe, expect, it } from 'vitest';
import {
  declareTopology,
  ExchangeNotFoundError,
  HEADER,
  listParked,
  ManagementClient,
  planTopology,
  readStatus,
  replayParked,
  TopologyDriftError,
  UnroutableError,
  verifyTopology,
  Warren,
  type Topology,
} from '../index.js';
import { AMQP_URL, MGMT_URL, connectWarren, depth, onTeardown, rawConnection, testTopology, uniqueName, waitFor } from '../../test/helpers.js';

const fast = { delays: [20], maxAttempts: 2 };

/** An exchange made by "another team": created raw, deleted after the test. */
async function foreignExchange(type: 'topic' | 'direct', options: { durable?: boolean; arguments?: Record<string, unknown> } = {}): Promise<string> {
  const name = `${uniqueName('foreign')}.events`;
  const conn = await rawConnection();
  const ch = await conn.createChannel();
  await ch.assertExchange(name, type, { durable: options.durable ?? true, ...(options.arguments ? { arguments: options.arguments } : {}) });
  await ch.close();
  onTeardown(async () => {
    const c = await (await rawConnection()).createChannel();
    await c.deleteExchange(name).catch(() => undefined);
  });
  return name;
}

/** Publishes as a producer that is not warren would: plain amqplib, with a confirm. */
async function publishRaw(exchange: string, key: string, body: unknown, properties: Record<string, unknown> = {}): Promise<void> {
  const conn = await rawConnection();
  const ch = await conn.createConfirmChannel();
  ch.publish(exchange, key, Buffer.from(JSON.stringify(body)), properties);
  await ch.waitForConfirms();
  await ch.close();
}

function management(): ManagementClient {
  return new ManagementClient({ url: MGMT_URL });
}

describe('several exchanges', () => {
  it('binds one consumer to a direct, a fanout and a headers exchange besides the default topic one; each message reaches only the queues bound for it', async () => {
    const n = { commands: '', broadcast: '', docs: '', billing: '', audit: '' };
    const topology = testTopology(({ exchange, name }) => {
      Object.assign(n, { commands: `${exchange}.commands`, broadcast: `${exchange}.broadcast`, docs: `${exchange}.docs`, billing: name('billing'), audit: name('audit') });
      return {
        exchange,
        exchanges: { [n.commands]: { type: 'direct' }, [n.broadcast]: { type: 'fanout' }, [n.docs]: { type: 'headers', arguments: { 'alternate-exchange': `${exchange}.unrouted` } } },
        consumers: {
          [n.billing]: { bindings: ['order.created', { exchange: n.commands, keys: ['invoice.send'] }, { exchange: n.broadcast }, { exchange: n.docs, headers: { format: 'pdf', region: 'eu' }, match: 'any' }], retry: fast },
          [n.audit]: { bindings: [{ exchange: n.broadcast }], retry: fast },
        },
      };
    });
    const warren = await connectWarren(topology);
    const seen: Record<'billing' | 'audit', string[]> = { billing: [], audit: [] };
    const record = (who: 'billing' | 'audit') => (p: { n: number }, ctx: { raw: { fields: { exchange: string } } }) => void seen[who].push(`${ctx.raw.fields.exchange}#${p.n}`);
    const billing = await warren.consume(n.billing, record('billing'));
    const audit = await warren.consume(n.audit, record('audit'));

    await warren.publish('order.created', { n: 1 });
    await warren.publish('invoice.send', { n: 2 }, { exchange: n.commands });
    await warren.publish('', { n: 3 }, { exchange: n.broadcast });
    await warren.publish('', { n: 4 }, { exchange: n.docs, headers: { format: 'csv', region: 'eu' } });
    await expect(warren.publish('invoice.void', { n: 5 }, { exchange: n.commands })).rejects.toThrow(UnroutableError);
    await expect(warren.publish('', { n: 6 }, { exchange: n.docs, headers: { format: 'csv', region: 'us' } })).rejects.toThrow(UnroutableError);
    await waitFor(() => billing.stats.acked === 4 && audit.stats.acked === 1, 'billing to handle four messages and audit one');
    expect(seen.billing.sort()).toEqual([`${topology.exchange}#1`, `${n.commands}#2`, `${n.broadcast}#3`, `${n.docs}#4`].sort());
    expect(seen.audit).toEqual([`${n.broadcast}#3`]);

    const plan = await planTopology(await rawConnection(), topology, management());
    expect(plan.method).toBe('management');
    expect(plan.drift).toEqual([]);
    expect(plan.toCreate).toEqual([]);
    expect(plan.entries.filter((e) => e.kind === 'exchange').map((e) => [e.name, e.status])).toEqual([
      [topology.exchange, 'ok'],
      [n.commands, 'ok'],
      [n.broadcast, 'ok'],
      [n.docs, 'ok'],
    ]);
    expect(plan.entries.filter((e) => e.kind === 'binding')).toHaveLength(5);
    expect(plan.entries.map((e) => e.name)).toContain(`${n.docs} -> ${n.billing} with arguments {"x-match":"any","format":"pdf","region":"eu"}`);
  });

  it('reports an exchange whose type or arguments differ, and refuses to declare over it', async () => {
    const n = { commands: '' };
    const topology = testTopology(({ exchange, name }) => {
      n.commands = `${exchange}.commands`;
      return { exchange, exchanges: { [n.commands]: { type: 'direct' } }, consumers: { [name('a')]: { bindings: [{ exchange: n.commands, keys: ['k'] }] } } };
    });
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.assertExchange(n.commands, 'fanout', { durable: true });
    await ch.close();
    const error = await declareTopology(conn, topology).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TopologyDriftError);
    expect((error as TopologyDriftError).differences[0]).toMatchObject({ kind: 'exchange', name: n.commands, argument: 'type' });
    const plan = await planTopology(conn, topology, management());
    expect(plan.drift).toEqual([{ kind: 'exchange', name: n.commands, argument: 'type', expected: 'direct', actual: 'fanout' }]);
  });
});

describe('a passive exchange owned by another team', () => {
  function topologyOn(foreign: string, consumers = ['refunds']): { topology: Topology; name: (c: string) => string } {
    let naming!: (c: string) => string;
    const topology = testTopology(({ exchange, name }) => {
      naming = name;
      return {
        exchange,
        exchanges: { [foreign]: { passive: true } },
        consumers: Object.fromEntries(consumers.map((c) => [name(c), { bindings: [{ exchange: foreign, keys: ['payment.refunded', `${c}.only`] }], retry: fast }])),
      };
    });
    return { topology, name: naming };
  }

  it('missing: connecting fails naming the exchange, its consumers and what to do; nothing is declared; plan calls it missing', async () => {
    const foreign = `${uniqueName('absent')}.events`;
    const { topology, name } = topologyOn(foreign);
    const error = await Warren.connect({ url: AMQP_URL, topology, connectTimeoutMs: 5000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ExchangeNotFoundError);
    expect((error as ExchangeNotFoundError).exchange).toBe(foreign);
    expect((error as Error).message).toMatch(new RegExp(`Exchange '${foreign.replace(/\./g, '\\.')}' does not exist`));
    expect((error as Error).message).toMatch(/passive/);
    expect((error as Error).message).toMatch(/Ask its owner to declare it/);
    expect((error as Error).message).toContain(name('refunds'));
    const conn = await rawConnection();
    // Never created by warren, and nothing else declared either.
    const probe = await conn.createChannel();
    await expect(probe.checkExchange(foreign)).rejects.toThrow(/404/);
    const probe2 = await conn.createChannel();
    await expect(probe2.checkQueue(name('refunds'))).rejects.toThrow(/404/);

    for (const api of [management(), undefined]) {
      const plan = await planTopology(conn, topology, api);
      const entry = plan.entries.find((e) => e.name === foreign);
      expect(entry?.status).toBe('missing');
      expect(entry?.hint).toMatch(/Ask its owner/);
      expect(plan.drift).toContainEqual({ kind: 'exchange', name: foreign, argument: 'exists', expected: true, actual: false });
      expect(plan.toCreate.map((e) => e.name)).not.toContain(foreign);
    }
    await expect(verifyTopology(conn, topology, management())).rejects.toThrow(/does not exist, and it is passive/);
  });

  it('present: bound to without being declared again (its own type and arguments are left as they are)', async () => {
    // Not durable and of type direct: declaring it as warren declares its own would fail with 406.
    const foreign = await foreignExchange('direct', { durable: false });
    const { topology, name } = topologyOn(foreign);
    const warren = await connectWarren(topology);
    const got: string[] = [];
    const consumer = await warren.consume(name('refunds'), (p: { id: string }) => void got.push(p.id));
    await publishRaw(foreign, 'payment.refunded', { id: 'r1' }, { messageId: 'r1' });
    await waitFor(() => consumer.stats.acked === 1, 'the foreign message to be handled');
    expect(got).toEqual(['r1']);
    const plan = await planTopology(await rawConnection(), topology, management());
    expect(plan.drift).toEqual([]);
    expect(plan.entries.find((e) => e.name === foreign)?.status).toBe('ok');
  });

  it('drift on a non-default exchange: a missing binding is reported by plan and status, and apply puts it back', async () => {
    const foreign = await foreignExchange('topic');
    const { topology, name } = topologyOn(foreign);
    const queue = name('refunds');
    const conn = await rawConnection();
    await declareTopology(conn, topology);
    const ch = await conn.createChannel();
    await ch.unbindQueue(queue, foreign, 'payment.refunded');
    await ch.bindQueue(queue, foreign, 'payment.#');
    await ch.close();
    const missingName = `${foreign} -> ${queue} with routing key payment.refunded`;

    const plan = await planTopology(conn, topology, management());
    expect(plan.toCreate.map((e) => [e.kind, e.name])).toEqual([['binding', missingName]]);
    expect(plan.drift).toEqual([{ kind: 'binding', name: `${foreign} -> ${queue} with routing key payment.#`, argument: 'binding', expected: undefined, actual: 'payment.#' }]);
    const status = await readStatus(conn, topology, { management: management() });
    expect(status.problems.map((p) => [p.kind, p.message.split(' is ')[0]])).toEqual([
      ['missing-binding', `binding ${missingName}`],
      ['extra-binding', `binding ${foreign} -> ${queue} with routing key payment.#`],
    ]);

    await declareTopology(conn, topology);
    const after = await planTopology(conn, topology, management());
    expect(after.toCreate).toEqual([]);
    expect(after.drift.map((d) => d.actual)).toEqual(['payment.#']); // never removed by warren
  });

  it('a message from it retries, parks with its exchange recorded, and is replayed to the failing consumer only', async () => {
    const foreign = await foreignExchange('topic');
    const { topology, name } = topologyOn(foreign, ['refunds', 'ledger']);
    const warren = await connectWarren(topology);
    let fixed = false;
    const runs: number[] = [];
    const refunds = await warren.consume(name('refunds'), (_p, ctx) => {
      runs.push(ctx.attempt);
      if (!fixed) throw new Error('refund service down');
    });
    const ledgerSaw: string[] = [];
    const ledger = await warren.consume(name('ledger'), (p: { id: string }) => void ledgerSaw.push(p.id));

    await publishRaw(foreign, 'payment.refunded', { id: 'p1' }, { messageId: 'p1' });
    await waitFor(() => refunds.stats.parked === 1, 'refunds to park the message after its retry');
    expect(runs).toEqual([1, 2]);
    const conn = await rawConnection();
    const { messages } = await listParked(conn, topology.consumer(name('refunds')));
    expect(messages).toHaveLength(1);
    expect(messages[0]).toMatchObject({ messageId: 'p1', exchange: foreign, routingKey: 'payment.refunded', attempts: 2, reason: 'max-attempts' });
    expect(messages[0]?.headers[HEADER.exchange]).toBe(foreign);

    fixed = true;
    const result = await replayParked(conn, topology.consumer(name('refunds')));
    expect(result.replayed).toBe(1);
    await waitFor(() => refunds.stats.acked === 1, 'the replayed message to be handled');
    expect(runs).toEqual([1, 2, 1]);
    // A marker only the ledger is bound for: the ledger's queue is in order, so once the
    // marker is handled, any retry or replay copy routed to it would have been handled too.
    await publishRaw(foreign, 'ledger.only', { id: 'marker' }, { messageId: 'marker' });
    // Its ack is counted once the handler has returned: wait for the count, not only the run.
    await waitFor(() => ledgerSaw.includes('marker') && ledger.stats.acked >= 2, () => `the ledger to handle and ack the marker (acked ${ledger.stats.acked})`);
    expect(ledgerSaw).toEqual(['p1', 'marker']);
    expect(ledger.stats).toMatchObject({ acked: 2, retried: 0, parked: 0 });
    expect(await depth(conn, topology.consumer(name('refunds')).parkedQueue)).toBe(0);
  });
});
