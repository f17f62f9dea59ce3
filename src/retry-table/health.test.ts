/**
 * Health checks over every backend, without a broker: an HTTP check pauses a
 * dependency's rows after N straight failures and resumes them, due now, when it
 * answers 2xx again; a check that hangs counts as failing; a dependency paused before a
 * restart is resumed by the first passing check.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { onTeardown, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { retryRowFixture } from './testing/rows.js';

function row(messageId: string, nextAttemptAt: Date | null) {
  return retryRowFixture({ messageId, nextAttemptAt });
}

/** An HTTP health endpoint whose answer the test sets. */
async function endpoint(): Promise<{ url: string; status: { code: number; hang: boolean }; hits: () => number }> {
  const status = { code: 503, hang: false };
  let hits = 0;
  const server = createServer((_req, res) => {
    hits++;
    if (status.hang) return; // never answers
    res.writeHead(status.code).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  onTeardown(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/health`, status, hits: () => hits };
}

describe.each(BACKENDS)('health checks: %s', (backend) => {
  it('pauses after N straight failures of an HTTP check, and resumes with the rows due now when it answers 2xx', async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    await table.insert(row('a', new Date(Date.now() + 3_600_000)));
    await table.insert(row('b', null));
    const ep = await endpoint();
    const monitor = table.health({ carrier: ep.url }, { intervalMs: 20, failuresToPause: 3 });
    const events: string[] = [];
    monitor.on('pause', (e: { rows: number }) => events.push(`pause ${e.rows}`));
    monitor.on('resume', (e: { rows: number }) => events.push(`resume ${e.rows}`));
    await monitor.start();
    onTeardown(() => monitor.stop());
    await waitFor(() => monitor.stats.paused === 1, 'the rows paused');
    expect(monitor.stats.failures).toBeGreaterThanOrEqual(3);
    expect(await table.count({ paused: true })).toBe(2);
    // A row arriving while the dependency is paused is paused too.
    expect((await table.insert(row('c', new Date()))).paused).toBe(true);
    ep.status.code = 204;
    await waitFor(() => monitor.stats.resumed === 1, 'the rows resumed');
    expect(await table.count({ paused: false, due: true })).toBe(3);
    expect(events).toEqual(['pause 2', 'resume 3']);
    expect(monitor.states()).toMatchObject([{ dependency: 'carrier', healthy: true, paused: false, consecutiveFailures: 0 }]);
    expect((await table.history()).map((e) => `${e.actor} ${e.action}`)).toEqual(['health-check:carrier resume', 'health-check:carrier pause']);
  });

  it('counts a check that hangs past its timeout as failing', async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    await table.insert(row('a', new Date()));
    const ep = await endpoint();
    ep.status.hang = true;
    const monitor = table.health({ carrier: { check: ep.url, timeoutMs: 50, failuresToPause: 2 } }, { intervalMs: 10 });
    await monitor.start();
    onTeardown(() => monitor.stop());
    await waitFor(() => monitor.stats.paused === 1, 'the rows paused after two timeouts');
    expect(monitor.states()[0]?.lastError).toMatch(/longer than 50 ms/);
  });

  it("resumes after a restart a dependency an earlier monitor paused, but never lifts an operator's pause", async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    await table.insert(row('a', null));
    let up = false;
    const first = table.health({ carrier: () => up }, { intervalMs: 10, failuresToPause: 1 });
    await first.start();
    await waitFor(() => first.stats.paused === 1, 'the first monitor paused');
    await first.stop();
    await table.pause({ dependency: 'carrier' }, { actor: 'alice' });
    up = true;
    const second = h.store().retryTable.health({ carrier: () => up }, { intervalMs: 10 });
    await second.start();
    onTeardown(() => second.stop());
    await waitFor(() => second.stats.resumed === 1, 'the second monitor resumed its pause');
    // Alice's pause still holds the row.
    expect(await table.count({ paused: true })).toBe(1);
    expect((await table.holds()).map((x) => x.actor)).toEqual(['alice']);
  });

  it('pauses again when its pause was lifted elsewhere while the check still fails', async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    await table.insert(row('a', new Date()));
    const monitor = table.health({ carrier: () => false }, { intervalMs: 10, failuresToPause: 2 });
    await monitor.start();
    onTeardown(() => monitor.stop());
    await waitFor(() => monitor.stats.paused === 1, 'the first pause');
    // An operator (or another process's monitor) lifts it while the carrier is still down.
    await table.resume({ dependency: 'carrier' }, { actor: 'alice' });
    await waitFor(() => monitor.stats.paused === 2, 'the monitor to pause again');
    expect(await table.count({ paused: true })).toBe(1);
    expect((await table.insert(row('b', new Date()))).paused).toBe(true);
  });

  it('a scheduler stopped while it starts leaves no check, loop or relay running', async () => {
    const h = await harness(backend);
    const store = h.store();
    let checks = 0;
    const scheduler = store.retryTable.scheduler({
      publisher: { send: async () => undefined },
      exchange: 'e',
      checks: { carrier: () => void checks++ },
      health: { intervalMs: 10 },
      pollMs: 10,
    });
    const starting = scheduler.start();
    await scheduler.stop();
    await starting;
    await new Promise((r) => setTimeout(r, 200));
    expect(checks).toBe(0);
    expect(scheduler.started).toBe(false);
    expect(scheduler.stats.passes).toBe(0);
  });

  it('refuses checks it cannot run', async () => {
    const h = await harness(backend);
    const table = h.store().retryTable;
    expect(() => table.health({})).toThrow(/at least one check/);
    expect(() => table.health({ carrier: 'ftp://x' })).toThrow(/not an http\(s\) URL/);
    expect(() => table.health({ carrier: 'not a url' })).toThrow(/not a URL/);
    expect(() => table.health({ carrier: 42 as never })).toThrow(/checks.carrier/);
    expect(() => table.health({ carrier: () => true }, { failuresToPause: 0 })).toThrow(/failuresToPause/);
  });
});
