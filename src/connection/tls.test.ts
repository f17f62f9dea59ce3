/**
 * amqps:// against the TLS-only nodes of scripts/tls.sh: one checks a client certificate
 * when given (5711), one requires it (5712). Both know one user, `warren`, whose password
 * is in the script's directory. They are the machine's RabbitMQ 3.10 whatever broker the
 * suite runs against, so this runs in the 3.10 run of `npm test` only.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BrokerConnection, BrokerHandshakeError, BrokerUnreachableError, defineTopology, Warren, type Logger, type WarrenOptions } from '../index.js';
import { BROKER, listening, onTeardown, uniqueName, waitFor } from '../../test/helpers.js';

const DIR = process.env['WARREN_TLS_DIR'] ?? '/var/lib/warren/tls';

const skipReason =
  BROKER !== '3.10'
    ? "the TLS nodes are the machine's RabbitMQ 3.10 whichever broker is under test; they are tested once, in the 3.10 run"
    : !existsSync(`${DIR}/ca.pem`) || !existsSync(`${DIR}/password`)
      ? `no certificates in ${DIR}; run: sudo bash scripts/tls.sh start`
      : !(await listening(5711)) || !(await listening(5712))
        ? 'the TLS nodes are not listening on 5711 and 5712; run: sudo bash scripts/tls.sh start'
        : undefined;
if (skipReason) console.warn(`src/connection/tls.test.ts skipped: ${skipReason}`);

const file = (name: string): Buffer => readFileSync(`${DIR}/${name}`);
const password = skipReason ? 'unused' : file('password').toString('utf8').trim();
const ca = skipReason ? Buffer.alloc(0) : file('ca.pem');

/** A logger that keeps every line it is given, as the text a log file would hold. */
function recordingLogger(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const keep = (level: string) => (message: string, fields?: Record<string, unknown>) => void lines.push(`${level} ${message} ${JSON.stringify(fields ?? {})}`);
  return { logger: { debug: keep('debug'), info: keep('info'), warn: keep('warn'), error: keep('error') }, lines };
}

/** Everything an error would show in a log: message, url, and the chain of causes. */
function shown(error: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = error; e !== undefined && parts.length < 5; e = (e as { cause?: unknown }).cause) {
    parts.push(e instanceof Error ? `${e.name}: ${e.message} ${JSON.stringify({ ...e })}` : String(e));
  }
  return parts.join(' <- ');
}

async function failedOpen(options: ConstructorParameters<typeof BrokerConnection>[0]): Promise<{ error: unknown; ms: number }> {
  const conn = new BrokerConnection({ connectTimeoutMs: 5000, ...options });
  const started = Date.now();
  const error = await conn.open().then(
    () => undefined,
    (e: unknown) => e,
  );
  await conn.close();
  return { error, ms: Date.now() - started };
}

/** Connects, consumes and publishes one message over the given options; returns what arrived and the node. */
async function roundTrip(options: Partial<WarrenOptions>): Promise<{ received: unknown; warren: Warren }> {
  const prefix = uniqueName('tls');
  const name = `${prefix}.audit`;
  const topology = defineTopology({ exchange: `${prefix}.events`, consumers: { [name]: { bindings: ['audit.#'] } } });
  const warren = await Warren.connect({ topology, connectTimeoutMs: 10_000, ...options });
  onTeardown(async () => {
    const model = await warren.connection.waitReady(5000);
    const ch = await model.createChannel();
    for (const q of [topology.consumer(name).queue, topology.consumer(name).parkedQueue, ...topology.consumer(name).retryQueues]) await ch.deleteQueue(q).catch(() => undefined);
    await ch.deleteExchange(topology.exchange).catch(() => undefined);
    await ch.close().catch(() => undefined);
    await warren.close();
  });
  const received: unknown[] = [];
  await warren.consume(name, (payload) => void received.push(payload));
  await warren.publish('audit.login', { user: 'ada' });
  await waitFor(() => received.length === 1, 'the message to arrive over TLS');
  return { received: received[0], warren };
}

describe.skipIf(skipReason !== undefined)(`TLS (amqps://)${skipReason ? ` (skipped: ${skipReason})` : ''}`, () => {
  it('publishes and consumes over amqps:// with the CA given, the password kept out of the URL', async () => {
    const { received, warren } = await roundTrip({ url: 'amqps://localhost:5711', username: 'warren', password, tls: { ca } });
    expect(received).toEqual({ user: 'ada' });
    expect(warren.connection.node).toMatchObject({ url: 'amqps://localhost:5711', address: 'localhost:5711', tls: true, server: expect.stringMatching(/^RabbitMQ 3\./) as unknown });
    expect(warren.nodes.publish?.tls).toBe(true);
  });

  it('presents a client certificate (its key encrypted, with the passphrase) to a node that requires one', async () => {
    const tls = { ca, cert: file('client.pem'), key: file('client.enc.key'), passphrase: file('client.passphrase').toString('utf8').trim() };
    const { received, warren } = await roundTrip({ url: `amqps://warren:${encodeURIComponent(password)}@localhost:5712`, tls });
    expect(received).toEqual({ user: 'ada' });
    expect(warren.connection.node?.address).toBe('localhost:5712');
  });

  it('checks the certificate of an address against the address: 127.0.0.1 is in the certificate', async () => {
    const conn = new BrokerConnection({ url: 'amqps://127.0.0.1:5711', username: 'warren', password, tls: { ca } });
    onTeardown(() => conn.close());
    await conn.open();
    expect(conn.node?.address).toBe('127.0.0.1:5711');
  });

  it('refuses a broker whose certificate does not verify (no CA given), at once, naming certificate verification and tls.ca', async () => {
    const { error, ms } = await failedOpen({ url: 'amqps://localhost:5711', username: 'warren', password });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as BrokerHandshakeError).reason).toBe('tls');
    expect((error as Error).message).toMatch(/failed certificate verification \(SELF_SIGNED_CERT_IN_CHAIN/);
    expect((error as Error).message).toMatch(/Give the CA that signed the broker's certificate as tls\.ca/);
    expect(ms, 'no retry can fix a certificate, so none is made').toBeLessThan(4000);
  });

  it('refuses a certificate for another name (a wrong servername), naming tls.servername', async () => {
    const { error } = await failedOpen({ url: 'amqps://localhost:5711', username: 'warren', password, tls: { ca, servername: 'rabbit.example.invalid' } });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as Error).message).toMatch(/certificate for another name: certificate verification failed .*rabbit\.example\.invalid/);
    expect((error as Error).message).toMatch(/set tls\.servername/);
  });

  it('says a client certificate is required when the node asks for one and none is given', async () => {
    const { error, ms } = await failedOpen({ url: 'amqps://localhost:5712', username: 'warren', password, tls: { ca } });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as Error).message).toMatch(/requires a client certificate and none was given .*Set tls\.cert and tls\.key/);
    expect(ms).toBeLessThan(4000);
  });

  it('says the broker refused the client certificate when it comes from a CA the broker does not trust', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-tls-'));
    onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=stranger', '-keyout', `${dir}/key.pem`, '-out', `${dir}/cert.pem`], { stdio: 'ignore' });
    const { error } = await failedOpen({ url: 'amqps://localhost:5712', username: 'warren', password, tls: { ca, cert: readFileSync(`${dir}/cert.pem`), key: readFileSync(`${dir}/key.pem`) } });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as Error).message).toMatch(/refused this client's TLS certificate \(.*alert bad certificate\): the broker does not trust the CA that signed tls\.cert/);
  });

  it('says a plain AMQP port does not speak TLS', async () => {
    const { error } = await failedOpen({ url: 'amqps://127.0.0.1:5672', tls: { ca } });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as Error).message).toMatch(/does not speak TLS \(wrong version number\)\. Use the broker's TLS port/);
  });

  it('names tls.passphrase when the encrypted client key cannot be decrypted', async () => {
    const { error } = await failedOpen({ url: 'amqps://localhost:5712', username: 'warren', password, tls: { ca, cert: file('client.pem'), key: file('client.enc.key'), passphrase: 'not-the-passphrase' } });
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect((error as Error).message).toMatch(/could not be decrypted .*tls\.passphrase is missing or wrong/);
  });

  it('never logs the password nor puts it in an error: connects, reconnects, refusals and an unreachable node', async () => {
    const { logger, lines } = recordingLogger();
    const errors: unknown[] = [];
    // A dead node first in the list, then the TLS node: the connection moves on.
    const { warren } = await roundTrip({ url: [`amqps://warren:${encodeURIComponent(password)}@localhost:1`, `amqps://warren:${encodeURIComponent(password)}@localhost:5711`], tls: { ca }, logger });
    // The socket dropped under it: warren reconnects (trying the dead node on the way).
    const generation = warren.connection.currentGeneration;
    const stream = (warren.connection as unknown as { model: { connection: { stream: Socket } } }).model.connection.stream;
    stream.destroy();
    await waitFor(() => warren.connection.currentGeneration > generation && warren.connection.ready, 'the connection to come back', 20_000);
    expect(lines.some((l) => l.startsWith('info connected'))).toBe(true);
    expect(lines.some((l) => l.startsWith('warn connection lost'))).toBe(true);
    errors.push(JSON.stringify(await warren.health()), JSON.stringify(warren.nodes));

    // Refusals: a wrong password (in the URL and in the options), no CA, an unreachable node.
    const wrong = `${password}-wrong`;
    for (const options of [
      { url: `amqps://warren:${encodeURIComponent(wrong)}@localhost:5711`, tls: { ca }, logger },
      { url: 'amqps://localhost:5711', username: 'warren', password: wrong, tls: { ca }, logger },
      { url: `amqps://warren:${encodeURIComponent(password)}@localhost:5711`, logger },
      { url: `amqps://warren:${encodeURIComponent(password)}@localhost:1`, tls: { ca }, logger, connectTimeoutMs: 500 },
    ]) {
      const { error } = await failedOpen(options);
      expect(error).toBeInstanceOf(BrokerUnreachableError);
      errors.push(shown(error));
    }
    expect(errors[2]).toMatch(/refused the credentials of user 'warren'/);
    expect(errors[3]).toMatch(/refused the credentials of user 'warren' .*username and password options/);

    const leaks = [...lines, ...errors.map(String)].filter((l) => l.includes(password) || l.includes(encodeURIComponent(password)));
    expect(leaks, 'lines that show the password').toEqual([]);
    expect(lines.length).toBeGreaterThan(3);
  });

  it('rejects TLS options with no amqps:// URL, and a file path where PEM text belongs', () => {
    expect(() => new BrokerConnection({ url: 'amqp://localhost:5672', tls: { ca } })).toThrow(/TLS options are set but no URL is amqps:\/\//);
    expect(() => new BrokerConnection({ url: 'amqps://localhost:5711', tls: { ca: `${DIR}/ca.pem` } })).toThrow(/tls\.ca.*expected PEM text.*Pass the file's contents/);
    expect(() => new BrokerConnection({ url: 'amqps://localhost:5711', tls: { ca, cert: file('client.pem') } })).toThrow(/tls\.key.*needs both cert and key/);
  });
});
