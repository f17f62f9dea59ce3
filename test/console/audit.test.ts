// `warren console`'s action record, as a user runs it: a record it cannot write stops it
// before it serves, and a replay cut short by SIGKILL leaves the record of its start.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it, vi } from 'vitest';
import { assertBuilt, MAIN, tempDir, topologyModule, warren } from '../../src/cli/testing/run.js';
import { declared, failures, publishParked } from '../../src/park/testing/fixtures.js';
import { AMQP_URL, MGMT_URL, onTeardown, waitFor } from '../helpers.js';

vi.setConfig({ testTimeout: 120_000 });

const billing = () =>
  topologyModule(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
  }));

function records(file: string): Record<string, unknown>[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('warren console: its action record', () => {
  it('refuses to start when --audit-file cannot be written, naming the file and what to do', async () => {
    const { path } = await billing();
    const dir = await tempDir();
    // A regular file where the record's directory should be: not writable whoever runs the test (root too).
    writeFileSync(join(dir, 'not-a-dir'), '');
    const file = join(dir, 'not-a-dir', 'actions.jsonl');
    const run = await warren(['console', '-t', path, '--listen', '127.0.0.1:0', '--audit-file', file], { timeoutMs: 60_000 });
    expect(run.code).toBe(2);
    expect(run.stdout).not.toContain('warren console: http');
    expect(run.stderr).toContain(`--audit-file ${file} cannot be written`);
    expect(run.stderr).toMatch(/Give --audit-file a file this user may create and append to/);
  });

  it('a replay killed with SIGKILL mid-way leaves the record of its start, written before the first message moved', async () => {
    assertBuilt();
    const { topology, path } = await billing();
    const conn = await declared(topology);
    const consumer = topology.consumer('billing');
    await publishParked(conn, topology, consumer, failures(40));
    const file = join(await tempDir(), 'actions.jsonl');
    const child = spawn(process.execPath, [MAIN, 'console', '-t', path, '--listen', '127.0.0.1:0', '--audit-file', file], {
      env: { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    onTeardown(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout }).on('line', (l) => {
        const m = /^warren console: (http:\/\/\S+)/.exec(l);
        if (m) resolve(m[1] as string);
      });
      void exited.then(() => reject(new Error(`warren console exited: ${stderr}`)));
    });
    // It wrote to the record before it served.
    expect(records(file).map((r) => [r['action'], r['actor']])).toEqual([['console.start', 'warren']]);

    const page = await (await fetch(`${url}parked/${consumer.name}`)).text();
    const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(page)?.[1] as string;
    const res = await fetch(`${url}parked/${consumer.name}/replay`, { method: 'POST', redirect: 'manual', body: new URLSearchParams({ _csrf: csrf, scope: 'filter', rate: '4' }) });
    expect(res.status).toBe(303);
    const job = (res.headers.get('location') ?? '').split('/').pop() as string;
    await waitFor(async () => ((await (await fetch(`${url}api/jobs/${job}`)).json()) as { progress: { published: number } }).progress.published >= 1, 'the replay has moved a message');
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');

    const replay = records(file).filter((r) => r['action'] === 'parked.replay');
    expect(replay).toHaveLength(1);
    expect(replay[0]).toMatchObject({ actor: 'local', consumer: consumer.name, outcome: 'started', count: 0, detail: { job, rate: 4 } });
  });
});
