import net from 'node:net';

/**
 * A TCP forwarder a test can cut and restore, to take a server "down" for one client
 * without touching the server other tests share. `cut()` closes every open connection
 * and stops listening (new connections are refused); `restore()` listens again on the
 * same port.
 */
export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  /** Server-to-client streams, so `hold()` can stop what the server sends. */
  private readonly downstreams = new Map<net.Socket, net.Socket>();
  private holding = false;
  private constructor(
    private readonly targetPort: number,
    private readonly targetHost: string,
    private portNumber: number,
  ) {}

  static async start(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
    const proxy = new TcpProxy(targetPort, targetHost, 0);
    await proxy.listen();
    return proxy;
  }

  get port(): number {
    return this.portNumber;
  }

  private listen(): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(this.targetPort, this.targetHost);
      this.sockets.add(client);
      this.sockets.add(upstream);
      const close = () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
        this.downstreams.delete(upstream);
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
      client.pipe(upstream);
      this.downstreams.set(upstream, client);
      if (this.holding) upstream.pause();
      else upstream.pipe(client);
    });
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.portNumber, '127.0.0.1', () => {
        server.off('error', reject);
        this.portNumber = (server.address() as net.AddressInfo).port;
        resolve();
      });
    });
  }

  /**
   * Holds back everything the server sends (confirms, replies, heartbeats) on every
   * connection, open or new, until `release()`; what the client sends still goes through.
   */
  hold(): void {
    if (this.holding) return;
    this.holding = true;
    for (const [upstream, client] of this.downstreams) {
      upstream.unpipe(client);
      upstream.pause();
    }
  }

  /** Forwards what the server sent while held, and everything after. */
  release(): void {
    if (!this.holding) return;
    this.holding = false;
    for (const [upstream, client] of this.downstreams) upstream.pipe(client);
  }

  /** Drops every connection and refuses new ones. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }

  /** Accepts connections again, on the same port. */
  async restore(): Promise<void> {
    if (!this.server) await this.listen();
  }

  async close(): Promise<void> {
    await this.cut();
  }
}
