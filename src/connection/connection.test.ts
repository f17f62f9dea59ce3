import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { BrokerConnection } from './index.js';
import { TcpProxy } from '../store/testing/tcp-proxy.js';
import { AMQP_URL, onTeardown, waitFor } from '../../test/helpers.js';

/** `connection.close` from the client: frame type 1 on channel 0, class 10, method 50. */
function isConnectionClose(chunk: Buffer): boolean {
  for (let i = 0; i + 11 <= chunk.length; i++) {
    if (chunk[i] === 1 && chunk.readUInt16BE(i + 1) === 0 && chunk.readUInt16BE(i + 7) === 10 && chunk.readUInt16BE(i + 9) === 50) return true;
  }
  return false;
}

/**
 * A forwarder that can hold the broker's bytes to new connections (a handshake that
 * has not finished yet) and that drops a connection the moment its client starts
 * closing it, as a proxy or a network that goes away mid-close does.
 */
async function scriptedProxy() {
  const upstream = new URL(AMQP_URL);
  const links = new Set<{ client: net.Socket; server: net.Socket; held: Buffer[]; holding: boolean }>();
  const state = { holdNew: false, dropOnClose: false };
  const server = net.createServer((client) => {
    const up = net.connect(Number(upstream.port || 5672), upstream.hostname);
    const link = { client, server: up, held: [] as Buffer[], holding: state.holdNew };
    links.add(link);
    const close = () => {
      client.destroy();
      up.destroy();
      links.delete(link);
    };
    client.on('error', close).on('close', close);
    up.on('error', close).on('close', close);
    client.on('data', (chunk: Buffer) => {
      if (state.dropOnClose && isConnectionClose(chunk)) close();
      else up.write(chunk);
    });
    up.on('data', (chunk: Buffer) => {
      if (link.holding) link.held.push(chunk);
      else client.write(chunk);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = new URL(AMQP_URL);
  url.port = String((server.address() as net.AddressInfo).port);
  const proxy = {
    url: url.toString(),
    state,
    links,
    /** Lets held bytes through and stops holding. */
    release() {
      for (const l of links) {
        l.holding = false;
        for (const chunk of l.held.splice(0)) l.client.write(chunk);
      }
    },
    dropAll() {
      for (const l of [...links]) {
        l.client.destroy();
        l.server.destroy();
        links.delete(l);
      }
    },
    async close() {
      proxy.dropAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  onTeardown(() => proxy.close());
  return proxy;
}

describe('broker connection', () => {
  it('closing while a reconnect is mid-handshake leaves no connection behind and no unhandled error, even if the socket drops during that close', async () => {
    const uncaught: unknown[] = [];
    const record = (error: unknown) => void uncaught.push(error);
    process.prependListener('uncaughtException', record);
    onTeardown(async () => void process.off('uncaughtException', record));

    const proxy = await scriptedProxy();
    const conn = new BrokerConnection({ url: proxy.url, connectTimeoutMs: 5000, reconnect: { initialDelayMs: 10, maxDelayMs: 20 } });
    onTeardown(() => conn.close());
    await conn.open();
    // The broker "goes away"; the reconnect's handshake is held half-way.
    proxy.state.holdNew = true;
    proxy.dropAll();
    await waitFor(() => proxy.links.size === 1, 'a reconnect attempt to reach the proxy');
    let closed = false;
    const closing = conn.close().then(() => (closed = true));
    // The handshake completes after close() was called; closing what it opened, the
    // socket drops before the broker's close-ok.
    proxy.state.dropOnClose = true;
    proxy.release();
    await closing;
    expect(closed).toBe(true);
    // Nothing of the connection outlives close(): no socket left at the proxy.
    expect(proxy.links.size).toBe(0);
    await new Promise((r) => setTimeout(r, 100));
    expect(uncaught).toEqual([]);
  });
  it('close() is not held for ever by a setup step that never ends: it gives up on it after connectTimeoutMs', async () => {
    const conn = new BrokerConnection({ url: AMQP_URL, connectTimeoutMs: 500 });
    onTeardown(() => conn.close());
    let started = false;
    await conn.onReady(async () => {
      started = true;
      await new Promise(() => undefined);
    });
    const opening = conn.open().catch(() => undefined);
    await waitFor(() => started, 'the setup step to start');
    const began = Date.now();
    await conn.close();
    expect(Date.now() - began).toBeLessThan(5000);
    void opening;
  });
  it('close() drops the socket when the broker does not answer its close within connectTimeoutMs', async () => {
    const proxy = await TcpProxy.start(Number(new URL(AMQP_URL).port || 5672));
    onTeardown(() => proxy.close());
    const u = new URL(AMQP_URL);
    u.port = String(proxy.port);
    const conn = new BrokerConnection({ url: u.toString(), connectTimeoutMs: 500 });
    await conn.open();
    const model = await conn.waitReady(1000);
    const socket = (model as unknown as { connection: { stream: { destroyed: boolean } } }).connection.stream;
    // Nothing the broker sends gets through: its close-ok never arrives.
    proxy.hold();
    await conn.close();
    // Without the drop, the connection would live on until its heartbeat timed out.
    expect(socket.destroyed).toBe(true);
  });
});
