import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** One charge request the API received. */
export interface ChargeCall {
  readonly orderId: string;
  readonly idempotencyKey: string;
  readonly status: number;
}

/**
 * A stand-in for the payment provider, over real HTTP: answers 201 with a charge id made
 * from the idempotency key, or the statuses a test scripted for an order, in turn; can
 * hold requests unanswered until released (a slow provider).
 */
export class PaymentsApi {
  readonly calls: ChargeCall[] = [];
  private readonly scripts = new Map<string, number[]>();
  private holding = false;
  private held: Array<() => void> = [];

  private constructor(private readonly server: http.Server) {}

  static async start(): Promise<PaymentsApi> {
    const server = http.createServer();
    const api = new PaymentsApi(server);
    server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => void api.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return api;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** The statuses to answer this order's next requests with, in turn; 201 after them. */
  answer(orderId: string, ...statuses: number[]): void {
    this.scripts.set(orderId, statuses);
  }

  /** Requests from now on wait, unanswered, until {@link release}. */
  hold(): void {
    this.holding = true;
  }

  /** Requests waiting now (received, not answered). */
  get waiting(): number {
    return this.held.length;
  }

  /** Answers the held requests and stops holding. */
  release(): void {
    this.holding = false;
    for (const go of this.held.splice(0)) go();
  }

  callsFor(orderId: string): ChargeCall[] {
    return this.calls.filter((c) => c.orderId === orderId);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    if (this.holding) await new Promise<void>((resolve) => this.held.push(resolve));
    const { orderId } = JSON.parse(body) as { orderId: string };
    const idempotencyKey = String(req.headers['idempotency-key']);
    const status = this.scripts.get(orderId)?.shift() ?? 201;
    this.calls.push({ orderId, idempotencyKey, status });
    const answer = status === 201 ? { chargeId: `ch_${idempotencyKey}` } : { error: status === 402 ? 'card declined' : 'try again later' };
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
  }

  async close(): Promise<void> {
    this.release();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
