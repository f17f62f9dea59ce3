import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { InvalidOptionError } from '../errors.js';

/** Options of {@link serveMetrics}. */
export interface ServeOptions {
  /**
   * Address to listen on. Metrics can name queues and dependencies: keep it on a private
   * interface.
   * @default '127.0.0.1'
   */
  host?: string;
  /**
   * Port; 0 picks a free one (see `port` on the result).
   * @default 9464
   */
  port?: number;
  /**
   * Path the metrics are served on.
   * @default '/metrics'
   */
  path?: string;
}

/** A running metrics endpoint. */
export interface MetricsServer {
  readonly host: string;
  readonly port: number;
  /** The URL of the metrics, e.g. `http://127.0.0.1:9464/metrics`. */
  readonly url: string;
  /** Stops listening; resolves once the server is closed. */
  close(): Promise<void>;
}

/**
 * Serves a registry over HTTP: GET `path` answers the metrics, anything else 404. A
 * failed collection answers 500 with the reason, so Prometheus marks the scrape down.
 */
export async function serveMetrics(registry: Registry, options: ServeOptions = {}): Promise<MetricsServer> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 9464;
  const path = options.path ?? '/metrics';
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new InvalidOptionError('port', `${port} is not a port number from 0 to 65535`);
  if (!path.startsWith('/')) throw new InvalidOptionError('path', `${JSON.stringify(path)} does not start with /`);
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (url.pathname !== path) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end(`Not found; the metrics are at ${path}\n`);
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(req.method === 'HEAD' ? undefined : text),
      (error: unknown) => res.writeHead(500, { 'content-type': 'text/plain' }).end(`collecting the metrics failed: ${error instanceof Error ? error.message : String(error)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    host: address.address,
    port: address.port,
    url: `http://${shownHost}:${address.port}${path}`,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}
