import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { BrokerConnection, InvalidOptionError } from '../index.js';
import { AMQP_URL, onTeardown, waitFor } from '../../test/helpers.js';
import { resolveEndpoints } from './endpoints.js';

describe('resolveEndpoints', () => {
  it('takes one URL, an array, or URLs separated by commas, in order', () => {
    expect(resolveEndpoints({ url: 'amqp://a:5672' }, {}).urls).toEqual(['amqp://a:5672']);
    expect(resolveEndpoints({ url: ['amqp://a:5701', 'amqp://b:5702'] }, {}).urls).toEqual(['amqp://a:5701', 'amqp://b:5702']);
    expect(resolveEndpoints({ url: 'amqp://a:5701, amqps://b:5671' }, {}).urls).toEqual(['amqp://a:5701', 'amqps://b:5671']);
  });

  it('takes bare hosts after a full URL, with its scheme, credentials and vhost', () => {
    expect(resolveEndpoints({ url: 'amqps://app:s3cret@rabbit-1:5671/orders,rabbit-2,rabbit-3:5672' }, {}).urls).toEqual([
      'amqps://app:s3cret@rabbit-1:5671/orders',
      'amqps://app:s3cret@rabbit-2/orders',
      'amqps://app:s3cret@rabbit-3:5672/orders',
    ]);
    expect(() => resolveEndpoints({ url: ['rabbit-1', 'rabbit-2'] }, {})).toThrow(/'rabbit-1' is a host with no URL .*start the list with a full URL/);
    expect(() => resolveEndpoints({ url: ['amqp://a', 'rabbit 2/x'] }, {})).toThrow(/neither a URL nor host\[:port\]/);
  });

  it('reads WARREN_AMQP_URL (a list too) when the option is not set, else the local broker', () => {
    expect(resolveEndpoints({}, { WARREN_AMQP_URL: 'amqp://x:1,amqp://y:2' }).urls).toEqual(['amqp://x:1', 'amqp://y:2']);
    expect(resolveEndpoints({}, {}).urls).toEqual(['amqp://guest:guest@127.0.0.1:5672']);
  });

  it('refuses what is not an AMQP URL, naming the option and never showing the password', () => {
    const err = (() => {
      try {
        resolveEndpoints({}, { WARREN_AMQP_URL: 'http://ops:hunter2@rabbit:15672' });
      } catch (e) {
        return e as InvalidOptionError;
      }
      throw new Error('accepted an http:// URL');
    })();
    expect(err).toBeInstanceOf(InvalidOptionError);
    expect(err.message).toMatch(/WARREN_AMQP_URL.*http:\/\/ops:\*\*\*@rabbit:15672.* is not an AMQP URL; use amqp:\/\//);
    expect(err.message).not.toContain('hunter2');
    expect(() => resolveEndpoints({ url: 'not a url' }, {})).toThrow(/url.*'not a url' is neither a URL nor host\[:port\]/);
    expect(() => resolveEndpoints({ url: 'amqp://a:b@c:notaport' }, {})).toThrow(/url.*amqp:\/\/a:\*\*\*@c:notaport is not a URL/);
    expect(() => resolveEndpoints({ url: [] }, {})).toThrow(/no URL given/);
  });

  it('wants username and password together, and TLS options only with an amqps:// URL', () => {
    expect(() => resolveEndpoints({ url: 'amqp://a', username: 'app' }, {})).toThrow(/password.*set both username and password/);
    expect(resolveEndpoints({ url: 'amqp://a', username: 'app', password: 's3cret' }, {}).credentials).toEqual({ username: 'app', password: 's3cret' });
    expect(() => resolveEndpoints({ url: 'amqp://a', tls: {} }, {})).toThrow(/TLS options are set but no URL is amqps:\/\//);
    expect(resolveEndpoints({ url: 'amqps://a', tls: {} }, {}).tls).toEqual({ rejectUnauthorized: true });
    expect(resolveEndpoints({ url: 'amqps://a', tls: { rejectUnauthorized: false, servername: 'rabbit' } }, {}).tls).toEqual({ rejectUnauthorized: false, servername: 'rabbit' });
  });
});

describe('a connection with several URLs', () => {
  it('opens on the first URL that answers, and says which node it is on', async () => {
    const dead = new URL(AMQP_URL);
    dead.port = '1';
    const conn = new BrokerConnection({ url: [dead.toString(), AMQP_URL], connectTimeoutMs: 5000, reconnect: { initialDelayMs: 10, maxDelayMs: 50 } });
    onTeardown(() => conn.close());
    await conn.open();
    const u = new URL(AMQP_URL);
    expect(conn.node).toMatchObject({ address: `${u.hostname}:${u.port}`, tls: false, server: expect.stringMatching(/^RabbitMQ /) as unknown });
    expect(conn.node?.url).toBe(`amqp://${u.username}:***@${u.host}`);
    expect(conn.url).toBe(AMQP_URL);
  });

  it('moves to the next URL when the connection is lost, wrapping around', async () => {
    // Two names for the one broker under test, so the move shows in the node's address.
    const byName = new URL(AMQP_URL);
    byName.hostname = 'localhost';
    const urls = [AMQP_URL, byName.toString()];
    const conn = new BrokerConnection({ url: urls, connectTimeoutMs: 5000, reconnect: { initialDelayMs: 10, maxDelayMs: 50 } });
    onTeardown(() => conn.close());
    await conn.open();
    const seen = [conn.node!.address];
    for (let i = 0; i < 2; i++) {
      const generation = conn.currentGeneration;
      ((conn as unknown as { model: { connection: { stream: Socket } } }).model.connection.stream).destroy();
      await waitFor(() => conn.currentGeneration > generation && conn.ready, 'the connection to come back');
      seen.push(conn.node!.address);
    }
    const port = new URL(AMQP_URL).port;
    expect(seen).toEqual([`${new URL(AMQP_URL).hostname}:${port}`, `localhost:${port}`, `${new URL(AMQP_URL).hostname}:${port}`]);
  });
});
