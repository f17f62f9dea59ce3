/**
 * How the command line connects: a list of nodes in --url (the first that answers is
 * used), credentials apart from the URL, and TLS flags. Runs `run(argv, io)` in this
 * process against the broker under test and, in the 3.10 run, the TLS node of
 * scripts/tls.sh that requires a client certificate (127.0.0.1:5712).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { describe, expect, it, vi } from 'vitest';
import { AMQP_URL, BROKER, listening, MGMT_URL, onTeardown, waitFor } from '../../test/helpers.js';
import { ManagementClient } from '../management/client.js';
import { declared } from '../park/testing/fixtures.js';
import { topologySpec } from '../topology/plan.js';
import { clusterUnavailable, CLUSTER_URLS, connectCluster, lockCluster, startNode, stopNode } from '../../test/cluster/support.js';
import type { Io } from './context.js';
import { run } from './run.js';
import { tempDir, topologyModule } from './testing/run.js';

vi.setConfig({ testTimeout: 60_000 });

interface Ran {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs the CLI in this process with only `env` in its environment. */
async function cli(argv: readonly string[], env: Record<string, string | undefined>): Promise<Ran> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const io: Io = {
    stdout: stdout as unknown as NodeJS.WriteStream,
    stderr: stderr as unknown as NodeJS.WriteStream,
    stdin: Readable.from([]) as unknown as NodeJS.ReadStream,
    env,
    cwd: process.cwd(),
  };
  const code = await run(argv, io);
  return { code, stdout: out, stderr: err };
}

const build = ({ exchange, name }: { exchange: string; name: (c: string) => string }) => ({
  exchange,
  consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
});

const broker = new URL(AMQP_URL);

describe('--url with several nodes', () => {
  it('skips a node that does not answer, uses the next, and says which', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    await conn.close();
    // The first node is dead; the second is a bare host:port that takes the first URL's user and password.
    const url = `amqp://${broker.username}:${broker.password}@127.0.0.1:1${broker.pathname},${broker.host}`;
    const r = await cli(['status', '--url', url, '--management-url', MGMT_URL], mod.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`broker: amqp://${broker.username}:\\*\\*\\*@${broker.host.replace(/\./g, '\\.')}/? \\(RabbitMQ ${BROKER.replace('.', '\\.')}[.\\d]*, node 2 of 2 in --url\\)`));
    expect(r.stderr).toContain('note: amqp://');
    expect(r.stderr).toContain('127.0.0.1:1 (connection refused); trying the next node in --url');

    const env = { ...mod.env, WARREN_AMQP_URL: url, WARREN_MANAGEMENT_URL: MGMT_URL };
    const j = await cli(['status', '--json'], env);
    expect(j.code, j.stderr).toBe(0);
    const report = JSON.parse(j.stdout) as { broker: { address: string; tls: boolean; server: string } };
    expect(report.broker).toMatchObject({ address: broker.host, tls: false });
    expect(report.broker.server).toMatch(/^RabbitMQ /);
  });

  it('names every node tried when none answers, exits 3, and prints no password', async () => {
    const mod = await topologyModule(build);
    const secret = 'Sup3r-s3cret-pw';
    const r = await cli(['status', '--url', `amqp://app:${secret}@127.0.0.1:1/shop, 127.0.0.1:2`], mod.env);
    expect(r.code).toBe(3);
    const last = r.stderr.trim().split('\n').at(-1) ?? '';
    expect(last).toBe(
      'warren: Cannot reach RabbitMQ at any of the 2 nodes in --url (or WARREN_AMQP_URL): amqp://app:***@127.0.0.1:1/shop (connection refused); amqp://app:***@127.0.0.1:2/shop (connection refused). Check that the brokers run and the hosts and ports in the list.',
    );
    expect(r.stdout + r.stderr).not.toContain(secret);
  });

  it('refuses a list entry that is neither a URL nor host:port, naming the flag (exit 2)', async () => {
    const mod = await topologyModule(build);
    const r = await cli(['status', '--url', 'amqp://guest:guest@127.0.0.1:5672,rabbit-2/oops'], mod.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^warren: --url \(or WARREN_AMQP_URL\): 'rabbit-2\/oops' is neither a URL nor host\[:port\]/);
  });

  it('keeps the user and password out of the URL with --username and --password-env, and never prints the password', async () => {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    await conn.close();
    const bare = `amqp://${broker.host}${broker.pathname}`;
    const ok = await cli(['status', '--url', bare, '--username', decodeURIComponent(broker.username), '--password-env', 'BROKER_PW', '--management-url', MGMT_URL], {
      ...mod.env,
      BROKER_PW: decodeURIComponent(broker.password),
    });
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toContain(`broker: amqp://${broker.username}@${broker.host}`);

    const wrong = 'n0t-the-Pa55word';
    const refused = await cli(['status', '--url', bare], { ...mod.env, WARREN_AMQP_USERNAME: 'guest', WARREN_AMQP_PASSWORD: wrong });
    expect(refused.code).toBe(3);
    expect(refused.stderr).toMatch(/refused the credentials of user 'guest' \(ACCESS_REFUSED\)\. Check the user name and password in --username and --password-env \(or WARREN_AMQP_USERNAME and WARREN_AMQP_PASSWORD\)/);
    expect(refused.stdout + refused.stderr).not.toContain(wrong);

    const half = await cli(['status', '--url', bare, '--username', 'guest'], mod.env);
    expect(half.code).toBe(2);
    expect(half.stderr).toContain('set both --username and --password-env (or WARREN_AMQP_USERNAME and WARREN_AMQP_PASSWORD), or neither');
    const unset = await cli(['status', '--url', bare, '--username', 'guest', '--password-env', 'NOT_SET_ANYWHERE'], mod.env);
    expect(unset.code).toBe(2);
    expect(unset.stderr).toContain('--password-env NOT_SET_ANYWHERE: the environment variable NOT_SET_ANYWHERE is not set.');
  });
});

/** A port on this machine where nothing listens: connecting is refused. */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A port that accepts connections and never answers, closed after the test. */
async function silentPort(): Promise<number> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTeardown(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return (server.address() as AddressInfo).port;
}

describe('--management-url with several nodes', () => {
  const mgmt = new URL(MGMT_URL);

  /** The test topology, declared, once the management API lists its queues (it lags on 4.0). */
  async function declaredModule() {
    const mod = await topologyModule(build);
    const conn = await declared(mod.topology);
    await conn.close();
    const api = new ManagementClient({ url: MGMT_URL });
    const queues = [...mod.topology.consumers.values()].flatMap((c) => [c.queue, ...c.retryQueues, c.parkedQueue]);
    await waitFor(async () => (await Promise.all(queues.map((q) => api.queue(q)))).every((q) => q !== undefined), 'the management API to list the queues');
    // The broker under test over AMQP too, whichever it is.
    return { ...mod, env: { ...mod.env, WARREN_AMQP_URL: AMQP_URL } };
  }

  it('skips a node that refuses the connection, reads the next, and says which', async () => {
    const mod = await declaredModule();
    const dead = await deadPort();
    const list = `http://${mgmt.username}:${mgmt.password}@127.0.0.1:${dead},${MGMT_URL}`;
    const r = await cli(['status', '--json', '--management-url', list], mod.env);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const report = JSON.parse(r.stdout) as { source: string; managementUnavailable?: string };
    expect(report.source).toBe('management');
    expect(r.stderr).toContain(`note: the management API at http://127.0.0.1:${dead} did not answer (connection refused); trying the next node in --management-url`);
    // Once, however many requests the command makes.
    expect(r.stderr.split('note: the management API').length).toBe(2);

    // In the environment too, and a later node may be host:port, taking the first URL's user and password.
    const bare = await cli(['status', '--json'], { ...mod.env, WARREN_MANAGEMENT_URL: `${MGMT_URL.replace(mgmt.host, `127.0.0.1:${dead}`)},${mgmt.host}` });
    expect(bare.code, bare.stderr).toBe(0);
    expect((JSON.parse(bare.stdout) as { source: string }).source).toBe('management');
  });

  it('skips a node that accepts the connection and never answers, after --connect-timeout', async () => {
    const mod = await declaredModule();
    const silent = await silentPort();
    const r = await cli(['status', '--json', '--connect-timeout', '300ms', '--management-url', `http://guest:guest@127.0.0.1:${silent},${MGMT_URL}`], mod.env);
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { source: string }).source).toBe('management');
    expect(r.stderr).toContain(`note: the management API at http://127.0.0.1:${silent} did not answer (no answer within 300 ms); trying the next node in --management-url`);
  });

  it('names every node tried and why when none answers, and prints no password', async () => {
    const mod = await declaredModule();
    const [first, second] = [await deadPort(), await silentPort()];
    const secret = 'Mgmt-s3cret-pw';
    const list = `http://ops:${secret}@127.0.0.1:${first}, 127.0.0.1:${second}`;
    const expected = `The management API answered at none of the 2 nodes in --management-url (or WARREN_MANAGEMENT_URL): http://127.0.0.1:${first} (connection refused); http://127.0.0.1:${second} (no answer within 300 ms). Check that the brokers run with the management plugin (\`rabbitmq-plugins enable rabbitmq_management\`) and the hosts and ports in the list.`;
    const j = await cli(['status', '--json', '--connect-timeout', '300ms', '--management-url', list], mod.env);
    expect(j.code, j.stderr).toBe(0);
    const report = JSON.parse(j.stdout) as { source: string; managementUnavailable?: string };
    expect(report).toMatchObject({ source: 'amqp', managementUnavailable: expected });
    const text = await cli(['status', '--connect-timeout', '300ms'], { ...mod.env, WARREN_MANAGEMENT_URL: list });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(`Management API not used: t${expected.slice(1)}`);
    const plan = await cli(['topology', 'plan', '--connect-timeout', '300ms', '--management-url', list], mod.env);
    expect(plan.stdout + plan.stderr).toMatch(/Bindings could not be checked/);
    for (const r of [j, text, plan]) expect(r.stdout + r.stderr).not.toContain(secret);
  });

  it('refuses a list entry that is not a URL, naming the flag (exit 2)', async () => {
    const mod = await topologyModule(build);
    // Refused before any connection: the broker's URL does not matter.
    const r = await cli(['status', '--management-url', `${MGMT_URL},ftp://127.0.0.1:21`], mod.env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('warren: --management-url (or WARREN_MANAGEMENT_URL): ftp://127.0.0.1:21 is not an http:// or https:// URL of the management API');
    const first = await cli(['status', '--management-url', '127.0.0.1:15672,127.0.0.1:15673'], mod.env);
    expect(first.code).toBe(2);
    expect(first.stderr).toContain('warren: --management-url (or WARREN_MANAGEMENT_URL): 127.0.0.1:15672 is not a URL of the management API');
    const secret = 'Mgmt-s3cret-pw';
    const bad = await cli(['status', '--management-url', `http://ops:${secret}@[bad`], mod.env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('http://ops:***@[bad is not a URL');
    expect(bad.stderr).not.toContain(secret);
  });
});

const DIR = process.env['WARREN_TLS_DIR'] ?? '/var/lib/warren/tls';
const TLS_PORT = 5712;

const tlsSkip =
  BROKER !== '3.10'
    ? "the TLS node is the machine's RabbitMQ 3.10 whichever broker is under test; it is tested once, in the 3.10 run"
    : !existsSync(join(DIR, 'ca.pem')) || !existsSync(join(DIR, 'password'))
      ? `no certificates in ${DIR}; run: sudo bash scripts/tls.sh start`
      : !(await listening(TLS_PORT))
        ? `the TLS node is not listening on ${TLS_PORT}; run: sudo bash scripts/tls.sh start`
        : undefined;
if (tlsSkip) console.warn(`src/cli/connection.test.ts (TLS) skipped: ${tlsSkip}`);

describe.skipIf(tlsSkip !== undefined)('TLS flags', () => {
  const password = tlsSkip ? 'unused' : readFileSync(join(DIR, 'password'), 'utf8').trim();
  const passphrase = tlsSkip ? 'unused' : readFileSync(join(DIR, 'client.passphrase'), 'utf8').trim();
  const url = `amqps://127.0.0.1:${TLS_PORT}`;
  // No management API on the TLS node: the plan is read over AMQP.
  const common = ['topology', 'plan', '--url', url, '--username', 'warren', '--password-env', 'TLS_PW', '--management-url', 'http://127.0.0.1:1'];
  const file = (name: string) => join(DIR, name);

  it('connects with a CA, a client certificate and an encrypted key, and prints no secret', async () => {
    const mod = await topologyModule(build);
    const env = { ...mod.env, TLS_PW: password, KEY_PASS: passphrase };
    const r = await cli([...common, '--tls-ca', file('ca.pem'), '--tls-cert', file('client.pem'), '--tls-key', file('client.enc.key'), '--tls-passphrase-env', 'KEY_PASS'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`create  exchange  ${mod.topology.exchange}`);
    expect(r.stdout + r.stderr).not.toContain(password);
    expect(r.stdout + r.stderr).not.toContain(passphrase);

    // The same from the environment, the URL in WARREN_AMQP_URL after a dead node.
    const fromEnv = await cli(['topology', 'plan', '--management-url', 'http://127.0.0.1:1'], {
      ...mod.env,
      WARREN_AMQP_URL: `amqps://127.0.0.1:1,127.0.0.1:${TLS_PORT}`,
      WARREN_AMQP_USERNAME: 'warren',
      WARREN_AMQP_PASSWORD: password,
      WARREN_TLS_CA: file('ca.pem'),
      WARREN_TLS_CERT: file('client.pem'),
      WARREN_TLS_KEY: file('client.key'),
      WARREN_TLS_SERVERNAME: 'localhost',
    });
    expect(fromEnv.code, fromEnv.stderr).toBe(0);
    expect(fromEnv.stderr).toContain('note: amqps://warren@127.0.0.1:1 (connection refused); trying the next node in --url');
    expect(fromEnv.stdout + fromEnv.stderr).not.toContain(password);
  });

  it('refuses a broker certificate from an untrusted CA with a clear error and exit 3', async () => {
    const mod = await topologyModule(build);
    const dir = await tempDir();
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=some other CA', '-keyout', join(dir, 'other.key'), '-out', join(dir, 'other-ca.pem')], { stdio: 'ignore' });
    const r = await cli([...common, '--tls-ca', join(dir, 'other-ca.pem'), '--tls-cert', file('client.pem'), '--tls-key', file('client.key')], { ...mod.env, TLS_PW: password });
    expect(r.code).toBe(3);
    expect(r.stderr.trim()).toMatch(
      /^warren: RabbitMQ at amqps:\/\/warren@127\.0\.0\.1:5712 presented a TLS certificate that failed certificate verification \([A-Z_]+: [^)]+\)\. Give the CA that signed the broker's certificate with --tls-ca FILE \(or WARREN_TLS_CA\); without it only Node's public CAs are trusted\. Do not use --tls-insecure/,
    );
    expect(r.stdout + r.stderr).not.toContain(password);
  });

  it('says what is missing or wrong: no client certificate, a wrong passphrase, a bad file, TLS flags on amqp://', async () => {
    const mod = await topologyModule(build);
    const env = { ...mod.env, TLS_PW: password, KEY_PASS: 'wrong-passphrase' };
    const noCert = await cli([...common, '--tls-ca', file('ca.pem')], env);
    expect(noCert.code).toBe(3);
    expect(noCert.stderr).toContain('requires a client certificate and none was given');
    expect(noCert.stderr).toContain('Give --tls-cert FILE and --tls-key FILE (or WARREN_TLS_CERT and WARREN_TLS_KEY)');

    const badPass = await cli([...common, '--tls-ca', file('ca.pem'), '--tls-cert', file('client.pem'), '--tls-key', file('client.enc.key'), '--tls-passphrase-env', 'KEY_PASS'], env);
    expect(badPass.code).toBe(3);
    expect(badPass.stderr).toContain('could not be decrypted');
    expect(badPass.stderr).toContain('the passphrase is missing or wrong (--tls-passphrase-env NAME, or WARREN_TLS_PASSPHRASE)');
    expect(badPass.stderr).not.toContain('wrong-passphrase');

    const missing = await cli([...common, '--tls-ca', file('no-such-ca.pem')], env);
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim()).toBe(`warren: --tls-ca (or WARREN_TLS_CA): cannot read ${file('no-such-ca.pem')}: no such file. Give the PEM file of the CA that signed the broker's certificate.`);
    const notPem = await cli([...common, '--tls-ca', file('password')], env);
    expect(notPem.code).toBe(2);
    expect(notPem.stderr).toContain(`--tls-ca (or WARREN_TLS_CA): ${file('password')} holds no PEM block`);
    expect(notPem.stderr).not.toContain(password);

    const insecure = await cli([...common, '--tls-insecure', '--tls-cert', file('client.pem'), '--tls-key', file('client.key')], env);
    expect(insecure.code, insecure.stderr).toBe(0);
    expect(insecure.stderr).toContain("warning: --tls-insecure: the broker's TLS certificate is not verified");

    const plain = await cli(['topology', 'plan', '--url', AMQP_URL, '--tls-ca', file('ca.pem')], mod.env);
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain('TLS options are set but no URL is amqps://');
  });
});

const clusterSkip = BROKER !== '3.10' ? "the test cluster is three nodes of the machine's RabbitMQ 3.10; it runs once, in the 3.10 run" : await clusterUnavailable();
if (clusterSkip) console.warn(`src/cli/connection.test.ts (cluster) skipped: ${clusterSkip}`);

describe.skipIf(clusterSkip !== undefined)('--url with the nodes of the test cluster', () => {
  it('reads the status through the second node while the first is stopped', { timeout: 600_000 }, async () => {
    // Quorum queues: a classic queue lives on one node and is gone while that node is down.
    const mod = await topologyModule((names) => ({ ...build(names), queueType: 'quorum' as const }));
    onTeardown(await lockCluster(300_000));
    const spec = topologySpec(mod.topology);
    onTeardown(async () => {
      const conn = await connectCluster();
      for (const name of [...spec.queues.map((q) => ['queue', q.name]), ...spec.exchanges.map((x) => ['exchange', x.name])]) {
        const ch = await conn.createChannel();
        await (name[0] === 'queue' ? ch.deleteQueue(name[1]!) : ch.deleteExchange(name[1]!)).catch(() => undefined);
        await ch.close().catch(() => undefined);
      }
      await conn.close();
    });
    // c1 first, then c2 and c3 as host:port entries.
    const url = [CLUSTER_URLS[0], ...CLUSTER_URLS.slice(1).map((u) => new URL(u).host)].join(',');
    const env = { ...mod.env, WARREN_AMQP_URL: url, WARREN_MANAGEMENT_URL: 'http://guest:guest@127.0.0.1:15702' };
    const applied = await cli(['topology', 'apply'], env);
    expect(applied.code, applied.stderr).toBe(0);
    await stopNode('c1');
    onTeardown(() => startNode('c1'));
    const r = await cli(['status'], env);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/broker: amqp:\/\/guest:\*\*\*@127\.0\.0\.1:5702\/? \(RabbitMQ [\d.]+, node 2 of 3 in --url\)/);
    expect(r.stderr).toContain('note: amqp://guest:***@127.0.0.1:5701 (connection refused); trying the next node in --url');
  });
});
