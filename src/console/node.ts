/**
 * Serves a fetch-style handler from `node:http` (and so from Express, NestJS or any
 * framework that takes a Node request listener).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { SECURITY_HEADERS } from './headers.js';

/** A fetch-style handler, as `warrenConsole(...).fetch`. */
export type FetchHandler = (request: Request) => Promise<Response>;

/**
 * The body of a request a framework already read (Express's or NestJS's body parsers):
 * put back together from what it parsed, since the stream is spent.
 */
function parsedBody(req: IncomingMessage & { body?: unknown }): string | Buffer | URLSearchParams | undefined {
  const body = req.body;
  if (body === undefined || !req.readableEnded) return undefined;
  if (typeof body === 'string' || Buffer.isBuffer(body)) return body;
  if (typeof body !== 'object' || body === null) return undefined;
  const type = req.headers['content-type'] ?? '';
  if (type.startsWith('application/json')) return JSON.stringify(body);
  const form = new URLSearchParams();
  for (const [k, v] of Object.entries(body as Record<string, unknown>)) for (const one of Array.isArray(v) ? v : [v]) form.append(k, String(one));
  return form;
}

function toRequest(req: IncomingMessage & { originalUrl?: string; body?: unknown }): Request {
  // Express strips the mount path from req.url and keeps the full one in originalUrl.
  const path = req.originalUrl ?? req.url ?? '/';
  const host = req.headers.host ?? 'localhost';
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const one of v) headers.append(k, one);
    else headers.set(k, v);
  }
  const method = req.method ?? 'GET';
  const hasBody = method !== 'GET' && method !== 'HEAD';
  const parsed = hasBody ? parsedBody(req) : undefined;
  if (parsed !== undefined) {
    headers.delete('content-length');
    return new Request(`http://${host}${path}`, { method, headers, body: parsed });
  }
  return new Request(`http://${host}${path}`, {
    method,
    headers,
    ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
  } as RequestInit);
}

/**
 * A `(req, res)` listener that answers with `handler`.
 *
 * @example
 * http.createServer(nodeListener(console.fetch)).listen(8080, '127.0.0.1');
 * expressApp.use('/ops/warren', nodeListener(console.fetch)); // basePath: '/ops/warren'
 */
export function nodeListener(handler: FetchHandler): (req: IncomingMessage, res: ServerResponse) => void {
  /** The adapter's own answer: the console's security headers, a fixed text, never the request's URL. */
  const refuse = (req: IncomingMessage, res: ServerResponse, status: number, text: string, extra: Record<string, string> = {}) => {
    if (!res.headersSent) res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'text/plain; charset=utf-8', connection: 'close', ...extra });
    res.end(req.method === 'HEAD' ? undefined : `warren console: ${text}\n`);
  };
  return (req, res) => {
    void (async () => {
      // Refused here: fetch's Request takes neither, and what it would say echoes the URL.
      if (req.method === 'TRACE' || req.method === 'TRACK' || req.method === 'CONNECT') return refuse(req, res, 405, `the method ${req.method} is not used.`, { allow: 'GET, HEAD, POST' });
      if (!(req.url ?? '/').startsWith('/')) return refuse(req, res, 400, 'the request target must be a path (origin-form), not a full URL.');
      try {
        const response = await handler(toRequest(req));
        const headers: Record<string, string | string[]> = {};
        response.headers.forEach((value, key) => {
          headers[key] = value;
        });
        const cookies = response.headers.getSetCookie();
        if (cookies.length > 0) headers['set-cookie'] = cookies;
        res.writeHead(response.status, headers);
        if (response.body && req.method !== 'HEAD') {
          const reader = response.body.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            res.write(value);
          }
        }
        res.end();
      } catch {
        // An error of the adapter's own (the console's handler answers its errors itself): no detail, which could hold the URL.
        refuse(req, res, 500, 'the request could not be answered.');
      }
    })();
  };
}
