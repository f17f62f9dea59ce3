/**
 * `warren consumer pause/resume/list` through the built executable, against real databases
 * and a running consumer on the real broker: the consumer (given `control: store.control`)
 * follows the pause the command writes, its messages wait in the queue, the resume lets
 * them through; each action is recorded before it is made, and bad input changes nothing.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { connectWarren, depth, rawConnection, waitFor } from '../../test/helpers.js';
import { BACKENDS, harness } from '../store/testing/harness.js';
import { assertBuilt, dbFlags, tempDir, topologyModule, warren } from './testing/run.js';

vi.setConfig({ testTimeout: 180_000 });
beforeAll(() => assertBuilt());

describe.each(BACKENDS)('warren consumer: %s', (backend) => {
  it('pauses a running consumer in another process, lists the pause, resumes it; both recorded', async () => {
    const h = await harness(backend);
    const store = h.store();
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { [name('ship')]: { bindings: ['x'], retry: { delays: ['50ms'], maxAttempts: 3 } } } }));
    const c = [...mod.topology.consumers.values()][0]!;
    const app = await connectWarren(mod.topology);
    const runs: number[] = [];
    const consumer = await app.consume<{ i: number }>(c.name, ({ i }) => void runs.push(i), { control: { source: store.control, intervalMs: 100 } });
    const cli = (args: string[]) => warren(['consumer', ...args, ...dbFlags(h)], { env: { ...mod.env, USER: 'erin' } });

    const paused = await cli(['pause', c.name, '--reason', 'carrier maintenance until 14:00']);
    expect(paused.stderr).toBe('');
    expect(paused.code).toBe(0);
    expect(paused.stdout).toContain(`Paused ${c.name}: carrier maintenance until 14:00`);
    expect(paused.stdout).toContain(`messages wait in queue ${c.queue}`);
    await waitFor(() => !consumer.intake.consuming, 'the running consumer to follow the pause');
    expect(consumer.intake.hand).toMatchObject({ reason: 'carrier maintenance until 14:00', actor: 'erin', from: 'store' });

    for (let i = 0; i < 20; i++) await app.publish('x', { i });
    const raw = await rawConnection();
    await waitFor(async () => (await depth(raw, c.queue)) === 20, 'the 20 messages to wait in the work queue');
    expect(runs).toEqual([]);

    const status = await warren(['status', c.name, ...dbFlags(h)], { env: mod.env });
    expect(status.code).toBe(1);
    expect(status.stdout).toMatch(new RegExp(`${c.name}  \\(paused by hand by erin .*: carrier maintenance until 14:00\\)`));
    expect(status.stdout).toMatch(new RegExp(`! ${c.name}: paused by hand by erin .*; 20 messages wait in ${c.queue} \\(warren consumer resume ${c.name}\\)`));

    const again = await cli(['pause', c.name, '--reason', 'another one', '--actor', 'bob']);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(new RegExp(`${c.name} was paused already, by erin since .*carrier maintenance until 14:00\\. Nothing was changed\\.`));

    const list = await cli(['list', '--json']);
    expect(list.code).toBe(0);
    expect((JSON.parse(list.stdout) as { consumers: unknown[] }).consumers).toEqual([expect.objectContaining({ consumer: c.name, paused: true, reason: 'carrier maintenance until 14:00', actor: 'erin', resumedBy: null })]);
    const table = await cli(['list']);
    expect(table.stdout).toMatch(new RegExp(`${c.name}\\s+paused\\s+carrier maintenance until 14:00\\s+erin`));

    const resumed = await cli(['resume', c.name, '--actor', 'alice']);
    expect(resumed.code).toBe(0);
    expect(resumed.stdout).toContain(`Resumed ${c.name} (paused by erin`);
    await waitFor(() => runs.length === 20, () => `the 20 waiting messages handled after the resume (${runs.length})`);
    expect((await store.control.read(c.name))[0]).toMatchObject({ paused: false, resumedBy: 'alice' });
    const noop = await cli(['resume', c.name]);
    expect(noop.stdout).toMatch(/is not paused by hand \(last resumed by alice/);

    // Started, then ended: a pause and a resume, each recorded before it was made. The
    // repeated pause and the no-op resume changed nothing and recorded nothing.
    const records = (await store.actions.list({ consumer: c.name })).reverse();
    expect(records.map((r) => [r.action, r.outcome, r.actor, r.count])).toEqual([
      ['consumer.pause', 'started', 'erin', 0],
      ['consumer.pause', 'ok', 'erin', 1],
      ['consumer.resume', 'started', 'alice', 0],
      ['consumer.resume', 'ok', 'alice', 1],
    ]);
    expect(records[1]?.detail).toEqual({ reason: 'carrier maintenance until 14:00' });
  });

  it('warren status --db shows a breaker shared through the database while it is open', async () => {
    const h = await harness(backend);
    const store = h.store();
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { [name('tax')]: { bindings: ['x'] } } }));
    const c = [...mod.topology.consumers.values()][0]!;
    await connectWarren(mod.topology);
    await store.breakers.open(c.name, 'the health check of \'tax-api\' failed 2 times', 'pod-7:41', new Date());
    const open = await warren(['status', c.name, ...dbFlags(h)], { env: mod.env });
    expect(open.code).toBe(1);
    expect(open.stdout).toMatch(new RegExp(`${c.name}  \\(breaker open .*: the health check of 'tax-api' failed 2 times\\)`));
    expect(open.stdout).toMatch(new RegExp(`! ${c.name}: breaker open .* \\(shared through the database; opened by pod-7:41\\): .*; 0 messages wait in ${c.queue} until a probe succeeds`));
    await store.breakers.close(c.name, 'pod-8:12');
    const closed = await warren(['status', c.name, ...dbFlags(h)], { env: mod.env });
    expect(closed.stdout).not.toContain('breaker open');
  });

  it('refuses what it cannot do, and changes nothing', async () => {
    const h = await harness(backend);
    const store = h.store();
    await store.migrate();
    const mod = await topologyModule(({ exchange, name }) => ({ exchange, consumers: { [name('mail')]: { bindings: ['x'] } } }));
    const c = [...mod.topology.consumers.values()][0]!;
    const cli = (args: string[], env: Record<string, string> = mod.env) => warren(['consumer', ...args, ...dbFlags(h)], { env });

    const noReason = await cli(['pause', c.name]);
    expect(noReason.code).toBe(2);
    expect(noReason.stderr).toMatch(/needs --reason TEXT/);
    const long = await cli(['pause', c.name, '--reason', 'x'.repeat(501)]);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/--reason: .* is not a reason of 1 to 500 characters/);
    const unknown = await cli(['pause', 'no-such-consumer', '--reason', 'typo']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(c.name);
    const noName = await cli(['resume']);
    expect(noName.code).toBe(2);
    expect(noName.stderr).toMatch(/needs a CONSUMER/);

    // A pause whose record cannot be written is not made.
    // (A directory under a plain file: not even root can make it.)
    const dir = await tempDir();
    await writeFile(join(dir, 'plain'), '');
    const unwritable = await cli(['pause', c.name, '--reason', 'deploy', '--audit-file', join(dir, 'plain', 'audit.jsonl')]);
    expect(unwritable.code).toBe(1);
    expect(unwritable.stderr).toMatch(/Nothing was changed: the action could not be recorded/);
    expect(await store.control.read(c.name)).toEqual([]);

    // Without a topology the name is taken as given: a consumer not declared yet can be paused ahead.
    const ahead = await cli(['pause', 'future-consumer', '--reason', 'not before the migration'], {});
    expect(ahead.code).toBe(0);
    expect(await store.control.read()).toEqual([expect.objectContaining({ consumer: 'future-consumer', paused: true })]);
    expect(await store.control.read(c.name)).toEqual([]);
  });
});
