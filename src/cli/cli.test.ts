import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { HEADER } from '../headers.js';
import type { ChildProcess } from 'node:child_process';
import type { ChannelModel } from 'amqplib';
import { AMQP_URL, depth, MGMT_URL, waitFor } from '../../test/helpers.js';
import { declared, failures, fastConnection, peekIds, publishParked, takeAll } from '../park/testing/fixtures.js';
import { assertBuilt, MAIN, tempDir, topologyModule, warren } from './testing/run.js';

// Each test runs the built CLI several times, one process after another. Node alone takes
// 3-5 s to start on a loaded 2-core machine (0.6 s idle), so the budget is per test, not per run.
vi.setConfig({ testTimeout: 180_000 });

beforeAll(() => assertBuilt());

function build({ exchange, name }: { exchange: string; name: (c: string) => string }) {
  return {
    exchange,
    retry: { delays: ['20ms', '1m'] as const, maxAttempts: 3 },
    consumers: {
      billing: { queue: name('billing'), bindings: ['order.created'] },
      email: { queue: name('email'), bindings: ['order.*'] },
    },
  };
}

/** A declared topology with parked messages on billing: 3 HttpError, 2 TypeError, one order.cancelled. */
async function withParked() {
  const mod = await topologyModule(build);
  const conn = await declared(mod.topology);
  const billing = mod.topology.consumer('billing');
  const ids = await publishParked(conn, mod.topology, billing, [
    { errorClass: 'HttpError', message: 'carrier 503 for order 1', failedAt: new Date('2026-03-01T10:00:00Z') },
    { errorClass: 'TypeError', message: "Cannot read properties of undefined (reading 'zip')", failedAt: new Date('2026-03-01T11:00:00Z') },
    { errorClass: 'HttpError', message: 'carrier 502 for order 2', failedAt: new Date('2026-03-01T12:00:00Z'), routingKey: 'order.cancelled' },
    { errorClass: 'TypeError', message: "Cannot read properties of undefined (reading 'zip')", failedAt: new Date('2026-03-01T13:00:00Z') },
    { errorClass: 'HttpError', message: 'carrier 503 for order 3', failedAt: new Date('2026-03-01T14:00:00Z'), body: { orderId: 3, lines: [{ sku: 'A-1', qty: 2 }] } },
  ]);
  return { ...mod, conn, billing, ids };
}

function json<T = Record<string, unknown>>(text: string): T {
  return JSON.parse(text) as T;
}

describe('help', () => {
  it('lists every command, the exit codes and examples', async () => {
    const r = await warren(['--help']);
    expect(r.code).toBe(0);
    for (const c of ['status', 'parked list', 'parked show', 'parked replay', 'parked purge', 'parked export', 'topology plan', 'topology apply', 'topology verify']) expect(r.stdout).toContain(c);
    expect(r.stdout).toMatch(/Exit codes:[\s\S]*0 .*\n[\s\S]*1 .*\n[\s\S]*2 .*usage[\s\S]*3 .*unreachable/);
    expect(r.stdout).toContain('WARREN_TOPOLOGY');
  });
  it.each([['status'], ['parked', 'list'], ['parked', 'show'], ['parked', 'replay'], ['parked', 'purge'], ['parked', 'export'], ['topology', 'plan'], ['topology', 'apply'], ['topology', 'verify']])('has examples for warren %s %s', async (...words) => {
    const r = await warren([...words.filter(Boolean), '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Usage: warren ${words.filter(Boolean).join(' ')}`);
    expect(r.stdout).toMatch(/Examples:\n {2}warren /);
    const viaHelp = await warren(['help', ...words.filter(Boolean)]);
    expect(viaHelp.stdout).toBe(r.stdout);
  });
  it('shows the subcommands of a group, and usage with no command exits 2', async () => {
    const group = await warren(['parked', '--help']);
    expect(group.code).toBe(0);
    expect(group.stdout).toMatch(/parked replay CONSUMER/);
    const none = await warren([]);
    expect(none.code).toBe(2);
    expect(none.stdout).toContain('Usage: warren COMMAND');
    const version = await warren(['--version']);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});

describe('bad input', () => {
  it('names the unknown command, flag or bad value, exit 2', async () => {
    const { env } = await topologyModule(build);
    const cases: Array<[string[], RegExp]> = [
      [['statsu'], /Unknown command `statsu`/],
      [['parked'], /`warren parked` needs a subcommand: list, show, replay, purge, export/],
      [['parked', 'list', 'billing', '--colour'], /Unknown flag --colour for `warren parked list`/],
      [['parked', 'list', 'billing', '--limit', 'ten'], /--limit: "ten" is not a whole number/],
      [['parked', 'list', 'billing', '--limit', '0'], /--limit: "0" is not a whole number of at least 1/],
      [['parked', 'list', 'billing', '--limit'], /--limit needs a value/],
      [['parked', 'replay', 'billing', '--rate', '0'], /--rate: "0" is not a number above 0/],
      [['parked', 'replay', 'billing', '--rate', 'fast'], /--rate: "fast"/],
      [['parked', 'list', 'billing', '--since', 'yesterday'], /`--since`: "yesterday" is not a time/],
      [['parked', 'list', 'billing', '--since', '1h', '--until', '2h'], /`--since`.*is not before --until/],
      [['parked', 'list', 'billing', '--error', '/carrier (/'], /`--error`: "\/carrier \(\/" has a \( without its \) at character 9/],
      [['parked', 'list', 'billing', '--error', '/(a)\\1/'], /`--error`.*a back-reference \\1 at character 4, which is not supported/],
      [['parked', 'replay', 'billing', '--error', '/(?<=x)y/'], /`--error`.*lookbehind/],
      [['parked', 'purge', 'billing', '--error', '/carrier/g', '--yes'], /`--error`.*the flag g, which is not supported/],
      [['parked', 'list', 'billing', '--error', 'x'.repeat(300)], /`--error`: the text is 300 characters long, more than 256/],
      [['parked', 'list', 'billing', '--max-held', '-3'], /--max-held/],
      [['status', '--connect-timeout', 'soon'], /--connect-timeout: "soon" is not a duration/],
      [['parked', 'show', 'billing'], /needs an ID/],
      [['parked', 'list'], /needs a CONSUMER, one of: billing, email/],
      [['parked', 'list', 'billing', 'extra'], /Unexpected argument "extra"/],
      [['topology', 'verify', '--json=yes'], /--json takes no value/],
    ];
    for (const [args, message] of cases) {
      const r = await warren(args, { env });
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(message);
      expect(r.stderr, args.join(' ')).not.toMatch(/\n\s+at /);
    }
  });

  it('an unknown consumer lists the known ones, exit 2', async () => {
    const { env } = await topologyModule(build);
    for (const args of [['parked', 'list', 'biling'], ['parked', 'replay', 'biling'], ['status', 'biling']]) {
      const r = await warren(args, { env });
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/Unknown consumer 'biling'\. The topology declares: billing, email\./);
    }
  });

  it('says where the topology should come from, exit 2', async () => {
    const none = await warren(['status']);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/No topology given: pass --topology PATH or set WARREN_TOPOLOGY/);
    const missing = await warren(['status', '--topology', 'no/such/topology.js']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--topology: no\/such\/topology\.js is not a file/);
    const dir = await tempDir();
    const empty = join(dir, 'empty.mjs');
    await writeFile(empty, 'export const nothing = 1;\n');
    const r = await warren(['status', '--topology', empty]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/exports neither `topology` nor a default export \(it exports: nothing\)/);
    const invalid = join(dir, 'invalid.mjs');
    await writeFile(invalid, "export default { consumers: { billing: { bindings: [] } } };\n");
    const bad = await warren(['status', '--topology', invalid]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/`consumers\.billing\.bindings`/);
  });

  it('broker unreachable: one line, exit 3, no stack, no password', async () => {
    const { env } = await topologyModule(build);
    const r = await warren(['status', '--url', 'amqp://warren:s3cret-Pa55@127.0.0.1:1/'], { env });
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/Cannot reach RabbitMQ at amqp:\/\/warren:\*\*\*@127\.0\.0\.1:1\/: connection refused/);
    expect(r.stderr + r.stdout).not.toContain('s3cret-Pa55');
    const viaEnv = await warren(['parked', 'list', 'billing'], { env: { ...env, WARREN_AMQP_URL: 'amqp://warren:s3cret-Pa55@no-such-host.invalid:5672' } });
    expect(viaEnv.code).toBe(3);
    expect(viaEnv.stderr).toMatch(/host not found/);
    expect(viaEnv.stderr + viaEnv.stdout).not.toContain('s3cret-Pa55');
  });

  it('wrong credentials: one line, exit 3, no password', async () => {
    const { env } = await topologyModule(build);
    const url = new URL(AMQP_URL);
    url.password = 'wr0ng-Passw0rd';
    const r = await warren(['parked', 'list', 'billing', '--url', url.toString()], { env });
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/refused the credentials of user 'guest'/);
    expect(r.stderr + r.stdout).not.toContain('wr0ng-Passw0rd');
  });

  it('a virtual host that does not exist, or that the user cannot use: says which and what to check, exit 3', async () => {
    const { env } = await topologyModule(build);
    const url = new URL(AMQP_URL);
    url.pathname = '/no-such-vhost';
    const r = await warren(['status', '--url', url.toString()], { env });
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).not.toMatch(/ConnectionOpenOk|ConnectionClose/);
    expect(r.stderr).toMatch(/refused virtual host 'no-such-vhost': it does not exist, or the user has no access to it\. Check the vhost in --url/);
    expect(r.stderr).toMatch(/permissions/);
  });

  it('a server on the port that does not speak AMQP: says to check the port, exit 3', async () => {
    const { env } = await topologyModule(build);
    const { createServer } = await import('node:http');
    const server = createServer((_req, res) => res.end('not AMQP'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      const r = await warren(['status', '--url', `amqp://guest:guest@127.0.0.1:${port}`], { env });
      expect(r.code).toBe(3);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(new RegExp(`The server at amqp://guest:\\S+@127\\.0\\.0\\.1:${port} does not speak AMQP .*Check that port ${port} in --url \\(or WARREN_AMQP_URL\\) is RabbitMQ's AMQP port .*15672 is the management API's HTTP port`));
    } finally {
      server.close();
    }
  });

  it('a management API with a wrong password is reported without the password, and status still works', async () => {
    const { env } = await declaredModule();
    const mgmt = new URL(MGMT_URL);
    mgmt.password = 'wr0ng-Passw0rd';
    const r = await warren(['status', '--management-url', mgmt.toString()], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Management API not used/);
    expect(r.stderr + r.stdout).not.toContain('wr0ng-Passw0rd');
  });
});

async function declaredModule() {
  const mod = await topologyModule(build);
  const conn = await declared(mod.topology);
  return { ...mod, conn };
}

describe('under a pipe', () => {
  /** Runs `warren ARGS | READER` in bash and returns warren's exit code and stderr. */
  function piped(args: readonly string[], reader: string, env: Record<string, string>) {
    return warren(['-c', `"$0" "$1" ${args.join(' ')} | ${reader}; echo "warren-exit=\${PIPESTATUS[0]}" >&2`, process.execPath, MAIN], { env, shell: 'bash' });
  }

  it('a reader that goes away is a normal end: no EPIPE trace, the check decides the exit code', async () => {
    const ok = await declaredModule();
    // `true` exits before the CLI writes anything, so every write meets a closed pipe.
    const closed = await piped(['status'], 'true', ok.env);
    expect(closed.stderr).not.toMatch(/EPIPE|Error|at /);
    expect(closed.stderr).toMatch(/warren-exit=0/);
    const head = await piped(['status'], 'head -1', ok.env);
    expect(head.stdout).toBe('billing\n');
    expect(head.stderr).toMatch(/warren-exit=0$/m);

    const parked = await withParked();
    const failing = await piped(['status'], 'true', parked.env);
    expect(failing.stderr).not.toMatch(/EPIPE|Error|at /);
    expect(failing.stderr).toMatch(/warren-exit=1/);
    const json = await piped(['status', '--json'], 'head -c 10', parked.env);
    expect(json.stderr).toMatch(/warren-exit=1$/m);
  });
});

describe('warren status', () => {
  it('exits 0 when nothing is parked and no work waits without a consumer', async () => {
    const { env, topology } = await declaredModule();
    const r = await warren(['status'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(topology.consumer('billing').parkedQueue);
    expect(r.stdout).toMatch(/retry 20ms/);
    expect(r.stdout).toMatch(/OK: nothing parked/);
  });

  it('exits 1 naming what is parked and the queue with messages and no consumer', async () => {
    const { env, topology, conn } = await withParked();
    const ch = await conn.createConfirmChannel();
    ch.sendToQueue(topology.consumer('email').queue, Buffer.from('{}'));
    await ch.waitForConfirms();
    await ch.close();
    const r = await warren(['status'], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/! billing: 5 messages parked; see warren parked list billing/);
    expect(r.stdout).toMatch(/! email: 1 message in \S+ and no consumer attached/);
    const j = await warren(['status', '--json'], { env });
    expect(j.code).toBe(1);
    const report = json<{ ok: boolean; problems: Array<{ kind: string }>; consumers: Array<{ parked: { ready: number } }> }>(j.stdout);
    expect(report.ok).toBe(false);
    expect(report.problems.map((p) => p.kind)).toEqual(['parked', 'no-consumer']);
    expect(report.consumers[0]?.parked.ready).toBe(5);
  });

  it('without the management API, shows depths and consumer counts from AMQP and says what is missing', async () => {
    const { env } = await withParked();
    const r = await warren(['status', 'billing', '--management-url', 'http://guest:guest@127.0.0.1:1'], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/Management API not used: .*127\.0\.0\.1:1/);
    expect(r.stdout).toMatch(/unacknowledged counts and redelivery rates are not shown/);
    expect(r.stdout).toMatch(/parked\s+\S+\.parked\s+5\s+-\s+0\s+-/);
  });
});

describe('warren parked list', () => {
  it('lists every parked message in queue order with its failure, and changes nothing', async () => {
    const { env, ids, conn, billing } = await withParked();
    const r = await warren(['parked', 'list', 'billing'], { env });
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines[0]).toMatch(/#\s+message id\s+routing key\s+error class\s+error\s+attempts\s+failed at/);
    ids.forEach((id, i) => expect(lines[i + 1]).toContain(id));
    expect(lines[1]).toMatch(/1\s+m-00001\s+order\.created\s+HttpError\s+carrier 503 for order 1\s+3\s+2026-03-01T10:00:00Z/);
    expect(lines[3]).toMatch(/order\.cancelled/);
    expect(r.stdout).toMatch(/5 parked messages \(5 of 5 examined\)/);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });

  it('filters by error text or pattern, class, time range, id and routing key', async () => {
    const { env, ids } = await withParked();
    const listed = async (...args: string[]) => {
      const r = await warren(['parked', 'list', 'billing', '--json', ...args], { env });
      expect(r.code, r.stderr).toBe(0);
      return json<{ messages: Array<{ messageId: string }> }>(r.stdout).messages.map((m) => m.messageId);
    };
    expect(await listed('--error-class', 'httperror')).toEqual([ids[0], ids[2], ids[4]]);
    expect(await listed('--error', 'CARRIER 503')).toEqual([ids[0], ids[4]]);
    expect(await listed('--error', '/order [23]$/')).toEqual([ids[2], ids[4]]);
    expect(await listed('--since', '2026-03-01T11:00:00Z', '--until', '2026-03-01T13:00:00Z')).toEqual([ids[1], ids[2]]);
    expect(await listed('--id', `${ids[3]},${ids[0]}`)).toEqual([ids[0], ids[3]]);
    expect(await listed('--id', ids[3] as string, '--id', ids[1] as string)).toEqual([ids[1], ids[3]]);
    expect(await listed('--routing-key', 'order.cancelled')).toEqual([ids[2]]);
    expect(await listed('--routing-key', 'order.*', '--error-class', 'TypeError')).toEqual([ids[1], ids[3]]);
    expect(await listed('--limit', '2')).toEqual([ids[0], ids[1]]);
  });

  it('says so when a filter matches nothing', async () => {
    const { env } = await withParked();
    const r = await warren(['parked', 'list', 'billing', '--error-class', 'NoSuchError'], { env });
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/No parked message of billing matches error class NoSuchError \(5 messages examined\)/);
    const empty = await warren(['parked', 'list', 'email'], { env });
    expect(empty.stderr).toMatch(/Nothing is parked for email/);
  });

  it('--group counts by failure fingerprint with first and last seen', async () => {
    const { env } = await withParked();
    const r = await warren(['parked', 'list', 'billing', '--group'], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/3\s+HttpError\s+2026-03-01T10:00:00Z\s+2026-03-01T14:00:00Z\s+HttpError: carrier <n> for order <n> @ send/);
    expect(r.stdout).toMatch(/2\s+TypeError\s+2026-03-01T11:00:00Z\s+2026-03-01T13:00:00Z\s+TypeError: Cannot read properties of undefined \(reading <str>\)/);
    const j = json<{ groups: Array<{ count: number; sampleIds: string[] }> }>((await warren(['parked', 'list', 'billing', '--group', '--json'], { env })).stdout);
    expect(j.groups.map((g) => g.count)).toEqual([3, 2]);
  });

  it('says when not everything was scanned', async () => {
    const { env } = await withParked();
    const r = await warren(['parked', 'list', 'billing', '--error-class', 'TypeError', '--max-held', '2'], { env });
    expect(r.code).toBe(0);
    expect(r.stdout + r.stderr).toMatch(/Not everything was scanned: stopped after holding 2 messages .*; 3 more messages were not examined\. Raise --max-held/);
  });

  it('says when another consumer of the parked queue held messages it could not see', async () => {
    const { env, ids, conn, billing } = await withParked();
    // A reader that has not let go: it holds the first two messages.
    const other = await conn.createChannel();
    await other.prefetch(2);
    let held = 0;
    await other.consume(billing.parkedQueue, () => void (held += 1), { noAck: false });
    await waitFor(() => held === 2, 'the other reader holds 2 messages');
    const r = await warren(['parked', 'list', 'billing'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/3 parked messages \(3 of 3 examined\)/);
    expect(r.stdout + r.stderr).toMatch(/Not everything was seen: another consumer was reading .*\.parked when this began, and the messages it held were not examined\. Run again once it is gone/);
    const j = json<{ readers: number; complete: boolean; total: number }>((await warren(['parked', 'list', 'billing', '--json'], { env })).stdout);
    expect(j).toMatchObject({ readers: 1, complete: false, total: 3 });
    // Positions count what was ready: #1 is the third message, and it says why.
    const shown = await warren(['parked', 'show', 'billing', '#1'], { env });
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(ids[2] as string);
    expect(shown.stderr).toMatch(/Not everything was seen: another consumer was reading/);
    const none = await warren(['parked', 'purge', 'billing', '--id', ids[0] as string, '--yes'], { env });
    expect(none.stderr).toMatch(/No parked message of billing matches/);
    expect(none.stderr).toMatch(/Not everything was seen/);
    // Once it lets go, everything is seen again, and in its place.
    await other.close();
    const after = json<{ readers: number; complete: boolean; total: number }>((await warren(['parked', 'list', 'billing', '--json'], { env })).stdout);
    expect(after).toMatchObject({ readers: 0, complete: true, total: 5 });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });
});

describe('warren parked show', () => {
  it('shows every header, the pretty-printed body, the failure and the attempt history', async () => {
    const { env, ids } = await withParked();
    const r = await warren(['parked', 'show', 'billing', ids[4] as string], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`Message ${ids[4]}: position 5 of 5`);
    expect(r.stdout).toMatch(/error class:\s+HttpError/);
    expect(r.stdout).toMatch(/message:\s+carrier 503 for order 3/);
    expect(r.stdout).toMatch(/Attempt history\n\s+2026-03-01T14:00:00Z\s+attempt 1 failed\n\s+2026-03-01T14:00:00Z\s+attempt 3 failed: HttpError: carrier 503 for order 3\n\s+2026-03-01T14:00:00Z\s+parked: max-attempts after 3 attempts/);
    for (const h of Object.values(HEADER).filter((h) => !['warren-occurred-at', 'warren-redeliveries', 'warren-replays', 'warren-replayed-at', 'warren-waits', 'warren-dependency', 'warren-tenant', 'warren-dropped-headers', 'warren-edited-from', 'warren-archive-row'].includes(h))) expect(r.stdout).toContain(`  ${h}: `);
    expect(r.stdout).toContain('Body (JSON, ');
    expect(r.stdout).toContain('{\n  "orderId": 3,\n  "lines": [\n    {\n      "sku": "A-1",');
  });

  it('finds a message by position, prints JSON, and exits 1 when there is no such message', async () => {
    const { env, ids } = await withParked();
    const byPos = await warren(['parked', 'show', 'billing', '#2', '--json'], { env });
    expect(byPos.code).toBe(0);
    const j = json<{ messages: Array<{ messageId: string; body: unknown; headers: Record<string, unknown>; history: unknown[] }> }>(byPos.stdout);
    expect(j.messages[0]?.messageId).toBe(ids[1]);
    expect(j.messages[0]?.headers[HEADER.errorClass]).toBe('TypeError');
    expect(j.messages[0]?.history.length).toBeGreaterThan(0);
    const missing = await warren(['parked', 'show', 'billing', 'no-such-id'], { env });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/No parked message of billing with id no-such-id \(5 messages examined/);
  });
});

describe('warren parked replay', () => {
  it('replays matching messages to the consumer’s own queue; the others stay parked in order', async () => {
    const { env, ids, conn, billing, topology } = await withParked();
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'HttpError'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`Replayed 3 messages to queue ${billing.queue.replace(/\./g, '\\.')} in `));
    expect(r.stdout).toMatch(/2 messages that did not match stay parked, in their order/);
    const replayed = await takeAll(conn, billing.queue);
    expect(replayed.map((m) => m.properties.messageId)).toEqual([ids[0], ids[2], ids[4]]);
    const h = replayed[1]?.properties.headers ?? {};
    expect(h[HEADER.routingKey]).toBe('order.cancelled');
    expect(h[HEADER.attempts]).toBeUndefined();
    expect(h[HEADER.replays]).toBe(1);
    expect(typeof h[HEADER.replayedAt]).toBe('string');
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([ids[1], ids[3]]);
    // email is bound to order.* and must not get a copy.
    expect(await peekIds(conn, topology.consumer('email').queue)).toEqual([]);
  });

  it('--dry-run lists what would be replayed and changes nothing; --json gives a summary', async () => {
    const { env, ids, conn, billing } = await withParked();
    const dry = await warren(['parked', 'replay', 'billing', '--error', '/carrier/', '--dry-run'], { env });
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/Dry run: 3 messages would be replayed to queue \S+; nothing was changed/);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
    const j = await warren(['parked', 'replay', 'billing', '--limit', '2', '--json'], { env });
    expect(j.code).toBe(0);
    expect(json(j.stdout)).toMatchObject({ replayed: 2, matched: 2, limitReached: true, dryRun: false, failed: [], targetQueue: billing.queue });
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(2));
  });

  it('says so when the filter matches nothing', async () => {
    const { env } = await withParked();
    const r = await warren(['parked', 'replay', 'billing', '--id', 'nope'], { env });
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/No parked message of billing matches message id nope/);
  });

  it('--rate paces the replay and prints plain progress lines when not on a terminal', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    await publishParked(conn, mod.topology, billing, failures(31));
    const started = Date.now();
    const r = await warren(['parked', 'replay', 'billing', '--rate', '10'], { env: mod.env });
    const elapsed = Date.now() - started;
    expect(r.code, r.stderr).toBe(0);
    expect(elapsed).toBeGreaterThanOrEqual(3000);
    expect(r.stderr).toMatch(/replaying \d+\/31 \(\d+%\), \d+\/s, about \d+m?s left/);
    expect(r.stderr).not.toContain('\r');
    // Never faster than asked; slower only by the machine's load.
    const rate = Number(/Replayed 31 messages .* \((\d+)\/s\)/.exec(r.stdout)?.[1]);
    expect(rate, r.stdout).toBeGreaterThanOrEqual(5);
    expect(rate, r.stdout).toBeLessThanOrEqual(10);
  });

  // A process start alone takes several seconds on a loaded machine, so the signal is sent
  // once the broker shows the replay under way (a few messages moved), never after a fixed time:
  // a Ctrl-C that lands before the CLI has started is the shell's, not the replay's.
  const TOTAL = 200;
  function signalMidReplay(child: ChildProcess, conn: ChannelModel, queue: string, signal: NodeJS.Signals): void {
    void waitFor(async () => child.exitCode !== null || (await depth(conn, queue)) >= 6, `replay into ${queue} under way`, 50_000).then(
      () => child.kill(signal),
      () => child.kill('SIGKILL'),
    );
  }

  it('killed half-way: nothing lost, a duplicate at most', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    const ids = await publishParked(conn, mod.topology, billing, failures(TOTAL));
    const r = await warren(['parked', 'replay', 'billing', '--rate', '40'], { env: mod.env, timeoutMs: 60_000, onSpawn: (child) => signalMidReplay(child, conn, billing.queue, 'SIGKILL') });
    expect(r.signal).toBe('SIGKILL');
    // The broker takes back what the killed process held once it sees its connection gone:
    // read the queues only then (a loss would keep the sum short, and fail here).
    await waitFor(async () => {
      const ch = await conn.createChannel();
      try {
        const parked = await ch.checkQueue(billing.parkedQueue);
        const work = await ch.checkQueue(billing.queue);
        return parked.consumerCount === 0 && parked.messageCount + work.messageCount >= TOTAL;
      } finally {
        await ch.close();
      }
    }, 'the broker to take back what the killed replay held');
    const conn2 = await fastConnection();
    const replayed = (await takeAll(conn2, billing.queue)).map((m) => String(m.properties.messageId));
    const parked = await peekIds(conn2, billing.parkedQueue);
    expect(replayed.length).toBeGreaterThan(5);
    expect(replayed.length).toBeLessThan(TOTAL);
    // Every message is somewhere; a message in both places is the one duplicate allowed.
    expect(new Set([...replayed, ...parked])).toEqual(new Set(ids));
    expect(replayed.length + parked.length - TOTAL).toBeLessThanOrEqual(1);
    // The replayed ones are a prefix and the parked ones keep their order.
    expect(replayed).toEqual(ids.slice(0, replayed.length));
    expect(parked).toEqual(ids.slice(ids.length - parked.length));
  });

  it('Ctrl-C stops after the message under way: exit 130, no duplicate, the rest still parked in order', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    const ids = await publishParked(conn, mod.topology, billing, failures(TOTAL));
    const r = await warren(['parked', 'replay', 'billing', '--rate', '40'], { env: mod.env, timeoutMs: 60_000, onSpawn: (child) => signalMidReplay(child, conn, billing.queue, 'SIGINT') });
    expect(r.code, r.stderr).toBe(130);
    expect(r.stderr).toMatch(/SIGINT: finishing the message under way/);
    expect(r.stderr).toMatch(/Interrupted: what was replayed is confirmed; everything else is still parked/);
    const replayed = (await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId));
    expect(replayed.length).toBeGreaterThan(5);
    expect(replayed.length).toBeLessThan(TOTAL);
    expect(replayed).toEqual(ids.slice(0, replayed.length));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.slice(replayed.length));
  });

  it('shows a progress bar on a terminal', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    await publishParked(conn, mod.topology, mod.topology.consumer('billing'), failures(8));
    // `script` gives the command a pseudo-terminal.
    const { spawnSync } = await import('node:child_process');
    const env = { ...process.env, WARREN_AMQP_URL: AMQP_URL, WARREN_MANAGEMENT_URL: MGMT_URL, WARREN_TOPOLOGY: mod.path, NODE_OPTIONS: '' };
    const which = spawnSync('script', ['--version']);
    if (which.error) return; // no `script` here: the unit test of the bar stands in
    const r = spawnSync('script', ['-qfec', `${process.execPath} ${MAIN} parked replay billing --rate 20`, '/dev/null'], { env, encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(0);
    // Each redraw returns to the start of the line and clears it (ESC [ K).
    expect(r.stdout.split('\r\u001b[K').some((frame) => /^replaying \[█*░*\] \d+\/8 \d+% · \d+\/s · (\d+ms|\d+s) left/.test(frame))).toBe(true);
    expect(r.stdout).toMatch(/Replayed 8 messages/);
  });
});

describe('on quorum queues', () => {
  it('lists, replays with a filter and keeps the rest in order', async () => {
    const mod = await topologyModule((names) => ({ ...build(names), queueType: 'quorum' as const }));
    const conn = await declared(mod.topology);
    const billing = mod.topology.consumer('billing');
    const ids = await publishParked(conn, mod.topology, billing, failures(12, (i) => ({ errorClass: i % 4 === 0 ? 'HttpError' : 'TypeError' })));
    const list = await warren(['parked', 'list', 'billing', '--json'], { env: mod.env });
    expect(json<{ messages: Array<{ messageId: string }> }>(list.stdout).messages.map((m) => m.messageId)).toEqual(ids);
    const show = await warren(['parked', 'show', 'billing', ids[5] as string], { env: mod.env });
    expect(show.code).toBe(0);
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'HttpError'], { env: mod.env });
    expect(r.code, r.stderr).toBe(0);
    expect((await takeAll(conn, billing.queue)).map((m) => m.properties.messageId)).toEqual(ids.filter((_, i) => i % 4 === 0));
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids.filter((_, i) => i % 4 !== 0));
  });
});

describe('warren parked purge', () => {
  it('will not delete without --yes when it cannot ask, and deletes only the matching messages with it', async () => {
    const { env, ids, conn, billing } = await withParked();
    const refused = await warren(['parked', 'purge', 'billing', '--error-class', 'TypeError'], { env });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/This would delete 2 parked messages of billing matching error class TypeError\. Pass --yes/);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
    const r = await warren(['parked', 'purge', 'billing', '--error-class', 'TypeError', '--yes'], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Deleted 2 parked messages of billing/);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual([ids[0], ids[2], ids[4]]);
    const none = await warren(['parked', 'purge', 'billing', '--error-class', 'TypeError', '--yes'], { env });
    expect(none.stderr).toMatch(/No parked message of billing matches error class TypeError/);
  });
});

describe('warren parked export', () => {
  it('writes JSON lines to stdout or a file, and removes nothing', async () => {
    const { env, ids, conn, billing } = await withParked();
    const r = await warren(['parked', 'export', 'billing', '--error-class', 'HttpError'], { env });
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n').map((l) => json<{ messageId: string; routingKey: string; body: unknown; failure: { errorClass: string }; headers: Record<string, unknown> }>(l));
    expect(lines.map((l) => l.messageId)).toEqual([ids[0], ids[2], ids[4]]);
    expect(lines[2]?.body).toEqual({ orderId: 3, lines: [{ sku: 'A-1', qty: 2 }] });
    expect(lines[1]?.routingKey).toBe('order.cancelled');
    expect(lines[0]?.failure.errorClass).toBe('HttpError');
    expect(lines[0]?.headers[HEADER.attempts]).toBe(3);
    expect(r.stderr).toMatch(/Exported 3 parked messages of billing to stdout/);
    const dir = await tempDir();
    const file = join(dir, 'out.jsonl');
    const f = await warren(['parked', 'export', 'billing', '-o', file], { env });
    expect(f.code).toBe(0);
    const { readFile } = await import('node:fs/promises');
    expect((await readFile(file, 'utf8')).trim().split('\n')).toHaveLength(5);
    expect(await peekIds(conn, billing.parkedQueue)).toEqual(ids);
  });
});

describe('warren topology', () => {
  it('plan shows what apply creates; verify fails until apply, then passes', async () => {
    const { env, topology } = await topologyModule(build);
    const before = await warren(['topology', 'verify'], { env });
    expect(before.code).toBe(1);
    expect(before.stdout).toMatch(new RegExp(`queue ${topology.consumer('billing').parkedQueue.replace(/\./g, '\\.')}: missing`));
    const plan = await warren(['topology', 'plan', '--json'], { env });
    expect(plan.code).toBe(0);
    // The exchange, 8 queues and 2 bindings.
    expect(json<{ toCreate: unknown[] }>(plan.stdout).toCreate).toHaveLength(11);
    const apply = await warren(['topology', 'apply'], { env });
    expect(apply.code, apply.stderr).toBe(0);
    expect(apply.stdout).toMatch(/Applied: exchange \S+, 8 queues, 2 bindings \(11 created/);
    const after = await warren(['topology', 'verify'], { env });
    expect(after.code).toBe(0);
    expect(after.stdout).toMatch(/The broker matches the declaration/);
    const again = await warren(['topology', 'apply'], { env });
    expect(again.stdout).toMatch(/\(0 created/);
  });

  it('verify exits 1 naming each difference; apply refuses and says how to migrate', async () => {
    const { env, topology } = await topologyModule(build);
    const conn = await fastConnection();
    const ch = await conn.createChannel();
    // Someone made the 1m retry tier by hand with another TTL.
    const tier = topology.consumer('billing').retryQueues[1] as string;
    await ch.assertQueue(tier, { durable: true, arguments: { 'x-message-ttl': 30_000, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': topology.consumer('billing').queue } });
    await ch.close();
    const verify = await warren(['topology', 'verify'], { env });
    expect(verify.code).toBe(1);
    expect(verify.stdout).toContain(`queue ${tier}: x-message-ttl is 30000 on the broker, the declaration wants 60000`);
    const apply = await warren(['topology', 'apply'], { env });
    expect(apply.code).toBe(1);
    expect(apply.stderr).toMatch(/Not applied: the broker differs from the declaration/);
    expect(apply.stderr).toMatch(/x-message-ttl is 30000 on the broker, the declaration wants 60000/);
    expect(apply.stderr).toMatch(/warren never deletes anything/);
  });
});

describe('bindings are part of the topology', () => {
  it('a deleted binding: verify and status fail naming it, apply re-creates and counts it', async () => {
    const { env, topology } = await topologyModule(build);
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ch = await conn.createChannel();
    await ch.unbindQueue(billing.queue, topology.exchange, 'order.created');
    await ch.close();
    const where = `${topology.exchange} -> ${billing.queue} with routing key order.created`.replace(/[.>]/g, (c) => `\\${c}`);

    const verify = await warren(['topology', 'verify'], { env });
    expect(verify.code, verify.stdout).toBe(1);
    expect(verify.stdout).toMatch(new RegExp(`binding ${where}: missing \\(warren topology apply creates it\\)`));
    const plan = await warren(['topology', 'plan', '--json'], { env });
    expect(json<{ toCreate: Array<{ kind: string }> }>(plan.stdout).toCreate.map((e) => e.kind)).toEqual(['binding']);

    const status = await warren(['status'], { env });
    expect(status.code, status.stdout).toBe(1);
    expect(status.stdout).toMatch(new RegExp(`! billing: binding ${where} is missing`));
    const statusJson = json<{ problems: Array<{ kind: string; consumer: string }> }>((await warren(['status', '--json'], { env })).stdout);
    expect(statusJson.problems).toEqual([expect.objectContaining({ kind: 'missing-binding', consumer: 'billing' })]);

    const apply = await warren(['topology', 'apply'], { env });
    expect(apply.code, apply.stderr).toBe(0);
    expect(apply.stdout).toMatch(new RegExp(`created binding ${where}`));
    expect(apply.stdout).toMatch(/\(1 created/);
    expect((await warren(['topology', 'verify'], { env })).code).toBe(0);
    expect((await warren(['status'], { env })).code).toBe(0);
  });

  it('an extra binding on a work queue is drift, reported with how to remove it, and never removed', async () => {
    const { env, topology } = await topologyModule(build);
    const conn = await declared(topology);
    const email = topology.consumer('email');
    const ch = await conn.createChannel();
    await ch.bindQueue(email.queue, topology.exchange, 'invoice.#');
    await ch.close();
    const verify = await warren(['topology', 'verify'], { env });
    expect(verify.code, verify.stdout).toBe(1);
    expect(verify.stdout).toContain(`binding ${topology.exchange} -> ${email.queue} with routing key invoice.#: on the broker, not in the declaration`);
    expect(verify.stdout).toMatch(/rabbitmqadmin .*delete binding source=\S+ destination_type=queue destination=\S+ properties_key=invoice\.%23/);
    const status = await warren(['status', 'email'], { env });
    expect(status.code).toBe(1);
    expect(status.stdout).toMatch(/! email: binding .* invoice\.# is not in the declaration/);
    const apply = await warren(['topology', 'apply'], { env });
    expect(apply.code, apply.stderr).toBe(0);
    expect(apply.stdout).toMatch(/not in the declaration.*never removes/);
    // Still there: a message with that key reaches the queue.
    const pub = await conn.createConfirmChannel();
    pub.publish(topology.exchange, 'invoice.paid', Buffer.from('{}'), { mandatory: true });
    await pub.waitForConfirms();
    await pub.close();
    await waitFor(async () => (await depth(conn, email.queue)) === 1, 'the message through the extra binding');
  });

  it('without the management API, says that bindings could not be checked', async () => {
    const { env, topology } = await topologyModule(build);
    await declared(topology);
    const off = ['--management-url', 'http://guest:guest@127.0.0.1:1'];
    const verify = await warren(['topology', 'verify', ...off], { env });
    expect(verify.code).toBe(0);
    expect(verify.stdout).toMatch(/bindings could not be checked/i);
    expect(verify.stdout).not.toMatch(/The broker matches the declaration/);
    const status = await warren(['status', ...off], { env });
    expect(status.stdout).toMatch(/bindings are not checked/);
  });
});

describe('topology modules', () => {
  it('accepts a Topology from defineTopology exported as `topology`', async () => {
    const { topology, conn: _c } = await declaredModule();
    const dir = await tempDir();
    const path = join(dir, 'app-topology.mjs');
    const index = new URL('../../dist/index.js', import.meta.url).href;
    const c = topology.consumer('billing');
    await writeFile(path, `import { defineTopology } from ${JSON.stringify(index)};\nexport const topology = defineTopology({ exchange: ${JSON.stringify(topology.exchange)}, retry: { delays: ['20ms', '1m'] }, consumers: { billing: { queue: ${JSON.stringify(c.queue)}, bindings: ['order.created'] } } });\n`);
    const r = await warren(['topology', 'verify', '--topology', path]);
    expect(r.code, r.stderr).toBe(0);
  });

  it('refuses a misspelt or misplaced option, naming it and the closest known one, exit 2', async () => {
    const dir = await tempDir();
    const typo = join(dir, 'typo.mjs');
    await writeFile(typo, "export default { consumers: { billing: { bindings: ['order.created'], retry: { maxAtempts: 3 } } } };\n");
    const r = await warren(['topology', 'verify', '--topology', typo]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/`consumers\.billing\.retry\.maxAtempts`: maxAtempts is not an option of consumers\.billing\.retry\. Did you mean maxAttempts\?/);
    // Made with defineTopology in the module itself: the same error, before the CLI sees it.
    const built = join(dir, 'built.mjs');
    const index = new URL('../../dist/index.js', import.meta.url).href;
    await writeFile(built, `import { defineTopology } from ${JSON.stringify(index)};\nexport const topology = defineTopology({ consumers: { billing: { bindings: ['order.created'], retry: { queueType: 'quorum' } } } });\n`);
    const b = await warren(['topology', 'verify', '--topology', built]);
    expect(b.code).toBe(2);
    expect(b.stderr).toMatch(/`consumers\.billing\.retry\.queueType`.*queueType belongs to the consumer or the topology, not to retry/);
  });

  it('loads a .ts module under tsx, and says how when plain node cannot', async () => {
    const { topology } = await declaredModule();
    const dir = await tempDir();
    const path = join(dir, 'topology.ts');
    const c = topology.consumer('billing');
    await writeFile(path, `const queue: string = ${JSON.stringify(c.queue)};\nexport default { exchange: ${JSON.stringify(topology.exchange)}, retry: { delays: ['20ms', '1m'] as const }, consumers: { billing: { queue, bindings: ['order.created'] } } };\n`);
    const plain = await warren(['topology', 'verify', '--topology', path]);
    expect(plain.code).toBe(2);
    expect(plain.stderr).toMatch(/is TypeScript, which plain node cannot load.*Compile it to \.js \(tsc\), or run the CLI under tsx: NODE_OPTIONS='--import tsx'/);
    const tsx = await warren(['topology', 'verify', '--topology', path], { nodeArgs: ['--import', 'tsx'] });
    expect(tsx.code, tsx.stderr).toBe(0);
  });
});
