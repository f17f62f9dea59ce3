import { describe, expect, it } from 'vitest';
import { ManagementClient } from '../management/client.js';
import { MGMT_URL, testTopology, waitFor } from '../../test/helpers.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { listParked } from '../park/operations.js';
import { findProblems, readStatus, type StatusReport } from './index.js';

const management = new ManagementClient({ url: MGMT_URL, timeoutMs: 2000 });
const managementUp = await management.available();

function topology() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20, 60_000] },
    consumers: {
      billing: { queue: name('billing'), bindings: ['order.created'] },
      email: { queue: name('email'), bindings: ['order.*'] },
    },
  }));
}

async function scenario() {
  const t = topology();
  const conn = await declared(t);
  const billing = t.consumer('billing');
  await publishParked(conn, t, billing, failures(2));
  const ch = await conn.createConfirmChannel();
  for (let i = 0; i < 3; i++) ch.sendToQueue(t.consumer('email').queue, Buffer.from('{}'));
  ch.sendToQueue(billing.retryQueues[1] as string, Buffer.from('{}'));
  await ch.waitForConfirms();
  await ch.close();
  return { t, conn, billing };
}

describe('readStatus', () => {
  it('without the management API: depths and consumer counts from AMQP, and says what is missing', async () => {
    const { t, conn, billing } = await scenario();
    const report = await readStatus(conn, t, { management: new ManagementClient({ url: 'http://guest:guest@127.0.0.1:1', timeoutMs: 500 }) });
    expect(report.source).toBe('amqp');
    expect(report.managementUnavailable).toMatch(/127\.0\.0\.1:1/);
    expect(report.managementUnavailable).not.toMatch(/guest:guest/);
    expect(report.missing).toEqual(['unacknowledged counts', 'redelivery rates']);
    const b = report.consumers.find((c) => c.consumer === 'billing');
    expect(b?.parked).toMatchObject({ name: billing.parkedQueue, exists: true, ready: 2, unacked: undefined });
    expect(b?.retries.map((r) => [r.delayMs, r.ready])).toEqual([[20, 0], [60_000, 1]]);
    expect(report.consumers.find((c) => c.consumer === 'email')?.work).toMatchObject({ ready: 3, consumers: 0 });
    expect(report.problems.map((p) => [p.consumer, p.kind])).toEqual([['billing', 'parked'], ['email', 'no-consumer']]);
    expect(report.ok).toBe(false);
  });

  it.skipIf(!managementUp)('with the management API: unacknowledged counts too', async () => {
    const { t, conn, billing } = await scenario();
    // Hold one email message unacknowledged, with a consumer attached.
    const ch = await conn.createChannel();
    await ch.prefetch(1);
    let got = false;
    await ch.consume(t.consumer('email').queue, () => void (got = true), { noAck: false });
    await waitFor(() => got, 'a delivery');
    let report: StatusReport | undefined;
    // The management API's figures lag by its stats interval (5 s by default).
    await waitFor(
      async () => {
        report = await readStatus(conn, t, { management });
        const email = report.consumers.find((c) => c.consumer === 'email');
        return email?.work.unacked === 1 && email.work.ready === 2 && report.consumers.find((c) => c.consumer === 'billing')?.parked.ready === 2;
      },
      'the management API to report the queues',
      20_000,
    );
    expect(report?.source).toBe('management');
    expect(report?.missing).toEqual([]);
    expect(report?.consumers.find((c) => c.consumer === 'email')?.work.consumers).toBe(1);
    expect(report?.problems.map((p) => [p.consumer, p.kind, p.queue])).toEqual([['billing', 'parked', billing.parkedQueue]]);
    await ch.close();
  }, 40_000);

  it.skipIf(!managementUp)('with the management API: a missing binding and an extra one are problems; without it, bindings are unchecked', async () => {
    const t = topology();
    const conn = await declared(t);
    const billing = t.consumer('billing');
    const email = t.consumer('email');
    const ch = await conn.createChannel();
    await ch.unbindQueue(billing.queue, t.exchange, 'order.created');
    await ch.bindQueue(email.queue, t.exchange, 'invoice.#');
    await ch.close();
    const report = await readStatus(conn, t, { management });
    expect(report.bindingsChecked).toBe(true);
    expect(report.problems.map((p) => [p.consumer, p.kind, p.queue])).toEqual([
      ['billing', 'missing-binding', billing.queue],
      ['email', 'extra-binding', email.queue],
    ]);
    expect(report.problems[1]?.message).toMatch(/rabbitmqadmin .*properties_key=invoice\.%23/);
    expect(report.ok).toBe(false);
    const onlyEmail = await readStatus(conn, t, { management, consumers: ['email'] });
    expect(onlyEmail.problems.map((p) => p.kind)).toEqual(['extra-binding']);
    const without = await readStatus(conn, t, { management: new ManagementClient({ url: 'http://guest:guest@127.0.0.1:1', timeoutMs: 500 }) });
    expect(without.bindingsChecked).toBe(false);
    expect(without.problems).toEqual([]);
  });

  it.skipIf(!managementUp)('browsing the parked queue is not a redelivery rate: walks read it, nothing failed', async () => {
    const { t, conn, billing } = await scenario();
    // Each walk holds what it keeps and the broker takes it back: the next walk's deliveries are redeliveries.
    for (let i = 0; i < 3; i++) expect((await listParked(conn, billing)).messages).toHaveLength(2);
    await waitFor(async () => ((await management.queues()).find((q) => q.name === billing.parkedQueue)?.message_stats?.redeliver ?? 0) >= 4, 'the management API to count the walks\' redeliveries', 20_000);
    const report = await readStatus(conn, t, { management });
    const b = report.consumers.find((c) => c.consumer === 'billing');
    expect(b?.parked).toMatchObject({ ready: 2, redeliverRate: undefined });
    expect(b?.work.redeliverRate ?? 0).toBe(0);
  });

    it('reports queues that do not exist, and only the consumers asked for', async () => {
    const t = topology();
    const conn = await declared(t);
    const ch = await conn.createChannel();
    await ch.deleteQueue(t.consumer('billing').retryQueues[0] as string);
    await ch.close();
    const report = await readStatus(conn, t, { consumers: ['billing'] });
    expect(report.consumers.map((c) => c.consumer)).toEqual(['billing']);
    expect(report.problems).toEqual([expect.objectContaining({ kind: 'missing-queue', queue: t.consumer('billing').retryQueues[0] })]);
  });
});

describe('findProblems', () => {
  const q = (name: string, ready: number, consumers: number, unacked?: number) => ({ name, exists: true, ready, unacked, consumers, redeliverRate: undefined });
  it('flags parked messages and work without consumers, and nothing else', () => {
    expect(findProblems([{ consumer: 'a', work: q('a', 0, 0), retries: [{ ...q('a.retry.5s', 9, 0), delayMs: 5000 }], parked: q('a.parked', 0, 0) }])).toEqual([]);
    expect(findProblems([{ consumer: 'a', work: q('a', 0, 0, 2), retries: [], parked: q('a.parked', 0, 0, 1) }]).map((p) => p.kind)).toEqual(['parked', 'no-consumer']);
    expect(findProblems([{ consumer: 'a', work: q('a', 5, 1), retries: [], parked: q('a.parked', 0, 0) }])).toEqual([]);
  });
});
