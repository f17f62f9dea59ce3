import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { BrokerHandshakeError, BrokerUnreachableError } from '../errors.js';
import { AMQP_URL } from '../../test/helpers.js';
import { BrokerConnection } from './index.js';

/** Opens a connection that must fail; returns the error and how long it took. */
async function failedOpen(url: string): Promise<{ error: unknown; ms: number }> {
  const conn = new BrokerConnection({ url, connectTimeoutMs: 20_000 });
  const started = Date.now();
  const error = await conn.open().catch((e: unknown) => e);
  await conn.close().catch(() => undefined);
  return { error, ms: Date.now() - started };
}

describe('a connection the broker refuses', () => {
  it('a virtual host that does not exist: names it, says what to check, and does not retry', async () => {
    const url = new URL(AMQP_URL);
    url.pathname = '/no-such-vhost';
    const { error, ms } = await failedOpen(url.toString());
    expect(error).toBeInstanceOf(BrokerHandshakeError);
    expect(error).toBeInstanceOf(BrokerUnreachableError);
    expect(error).toMatchObject({ code: 'BROKER_UNREACHABLE', reason: 'vhost' });
    expect((error as Error).message).toMatch(/refused virtual host 'no-such-vhost': it does not exist, or the user has no access to it\. Check the vhost in the URL/);
    expect((error as Error).message).not.toMatch(/ConnectionOpenOk/);
    // Retrying cannot help, so it fails long before connectTimeoutMs.
    expect(ms).toBeLessThan(10_000);
  });

  it('wrong credentials: names the user, never the password', async () => {
    const url = new URL(AMQP_URL);
    url.password = 'wr0ng-Passw0rd';
    const { error, ms } = await failedOpen(url.toString());
    expect(error).toMatchObject({ reason: 'credentials' });
    expect((error as Error).message).toMatch(/refused the credentials of user 'guest' \(ACCESS_REFUSED\)\. Check the user name and password in the URL/);
    expect((error as Error).message).not.toContain('wr0ng-Passw0rd');
    expect(ms).toBeLessThan(10_000);
  });

  it('a server that does not speak AMQP: says to check that the port is an AMQP port', async () => {
    const server = createServer((_req, res) => res.end('not AMQP'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      const { error } = await failedOpen(`amqp://guest:guest@127.0.0.1:${port}`);
      expect(error).toMatchObject({ reason: 'not-amqp' });
      expect((error as Error).message).toMatch(new RegExp(`does not speak AMQP .*Check that port ${port} in the URL is RabbitMQ's AMQP port .*15672 is the management API's HTTP port`));
    } finally {
      server.close();
    }
  });
});
