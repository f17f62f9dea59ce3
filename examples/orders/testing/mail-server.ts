/**
 * A mail provider for the walkthrough and the tests: a real HTTP server that accepts
 * `POST /messages` once per `idempotency-key`, can be taken down (503) and brought back,
 * and refuses a template it does not have (422). Run it on its own with
 * `node --import tsx examples/orders/testing/mail-server.ts` (port 4020, or PORT), and
 * drive it with curl:
 *
 *   curl -X POST localhost:4020/_down       # every send answers 503 until /_up
 *   curl -X POST localhost:4020/_up
 *   curl -X DELETE localhost:4020/templates/order-confirmation   # sends answer 422
 *   curl -X PUT localhost:4020/templates/order-confirmation      # the fix
 *   curl localhost:4020/messages            # what was sent
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

/** One message the provider accepted. */
export interface SentMail {
  readonly key: string;
  readonly to: string;
  readonly template: string;
  readonly data: Record<string, unknown>;
}

function body(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => resolve(text));
    req.on('error', reject);
  });
}

export class MailServer {
  /** Accepted messages, one per idempotency key, in order. */
  readonly sent: SentMail[] = [];
  /** Every `POST /messages`, answered or not. */
  attempts = 0;
  down = false;
  readonly templates = new Set(['order-confirmation']);

  private readonly server: Server = createServer((req, res) => {
    void this.handle(req).then(({ status, json }) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json)));
  });

  static async start(port = 0): Promise<MailServer> {
    const mail = new MailServer();
    await new Promise<void>((r) => mail.server.listen(port, '127.0.0.1', () => r()));
    return mail;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Messages accepted for `to`. */
  to(to: string): SentMail[] {
    return this.sent.filter((m) => m.to === to);
  }

  private async handle(req: IncomingMessage): Promise<{ status: number; json: unknown }> {
    const path = new URL(req.url ?? '/', 'http://mail').pathname;
    const template = /^\/templates\/([\w-]+)$/.exec(path)?.[1];
    if (req.method === 'POST' && path === '/_down') return { status: 200, json: { down: (this.down = true) } };
    if (req.method === 'POST' && path === '/_up') return { status: 200, json: { down: (this.down = false) } };
    if (req.method === 'PUT' && template) return { status: 200, json: { templates: [...this.templates.add(template)] } };
    if (req.method === 'DELETE' && template) return { status: 200, json: { deleted: this.templates.delete(template) } };
    if (req.method === 'GET' && path === '/messages') return { status: 200, json: this.sent };
    if (req.method !== 'POST' || path !== '/messages') return { status: 404, json: { error: `no ${req.method} ${path}` } };
    this.attempts += 1;
    const text = await body(req);
    if (this.down) return { status: 503, json: { error: 'the mail provider is down for maintenance' } };
    const message = JSON.parse(text) as Omit<SentMail, 'key'>;
    if (!this.templates.has(message.template)) return { status: 422, json: { error: `no template named ${message.template}` } };
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key === '') return { status: 400, json: { error: 'an idempotency-key header is required' } };
    if (!this.sent.some((m) => m.key === key)) this.sent.push({ key, ...message });
    return { status: 202, json: { accepted: key } };
  }

  close(): Promise<void> {
    return new Promise((r) => {
      this.server.closeAllConnections();
      this.server.close(() => r());
    });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const mail = await MailServer.start(Number(process.env['PORT'] ?? 4020));
  console.log(`mail provider listening on ${mail.url}`);
}
