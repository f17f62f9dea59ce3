import net from 'node:net';

/** AMQP 0-9-1 frame: type (1), channel (2), size (4), payload (size), end octet 0xCE. */
const FRAME_METHOD = 1;
const FRAME_END = 0xce;
const CONNECTION_CLASS = 10;
const CONNECTION_BLOCKED = 60;
const CONNECTION_UNBLOCKED = 61;

function methodFrame(classId: number, methodId: number, args: Buffer): Buffer {
  const payload = Buffer.alloc(4 + args.length);
  payload.writeUInt16BE(classId, 0);
  payload.writeUInt16BE(methodId, 2);
  args.copy(payload, 4);
  const frame = Buffer.alloc(7 + payload.length + 1);
  frame.writeUInt8(FRAME_METHOD, 0);
  frame.writeUInt16BE(0, 1);
  frame.writeUInt32BE(payload.length, 3);
  payload.copy(frame, 7);
  frame.writeUInt8(FRAME_END, 7 + payload.length);
  return frame;
}

/** `connection.blocked` with its reason (a shortstr), as RabbitMQ sends it under a resource alarm. */
export function blockedFrame(reason: string): Buffer {
  const text = Buffer.from(reason, 'utf8').subarray(0, 255);
  return methodFrame(CONNECTION_CLASS, CONNECTION_BLOCKED, Buffer.concat([Buffer.from([text.length]), text]));
}

/** `connection.unblocked`, sent when the alarm clears. */
export function unblockedFrame(): Buffer {
  return methodFrame(CONNECTION_CLASS, CONNECTION_UNBLOCKED, Buffer.alloc(0));
}

/** One client connection through the proxy: the broker's bytes are forwarded whole frames at a time. */
class Link {
  private pending: Buffer = Buffer.alloc(0);
  private reading = true;

  constructor(
    readonly client: net.Socket,
    readonly server: net.Socket,
  ) {
    server.on('data', (chunk: Buffer) => this.fromServer(chunk));
    client.on('data', (chunk: Buffer) => {
      if (!server.write(chunk)) client.pause();
    });
    server.on('drain', () => {
      if (this.reading) client.resume();
    });
  }

  /** Passes complete frames on; keeps a partial frame until the rest arrives, so a frame can be put between two. */
  private fromServer(chunk: Buffer): void {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    let end = 0;
    while (this.pending.length - end >= 7) {
      const size = this.pending.readUInt32BE(end + 3);
      if (this.pending.length - end < 7 + size + 1) break;
      end += 7 + size + 1;
    }
    if (end > 0) {
      this.client.write(this.pending.subarray(0, end));
      this.pending = this.pending.subarray(end);
    }
  }

  /** Stops or resumes reading what the client writes, as a broker under an alarm stops reading a publisher. */
  setReading(on: boolean): void {
    this.reading = on;
    if (on) this.client.resume();
    else this.client.pause();
  }

  inject(frame: Buffer): void {
    // Between frames only: a partial frame held back goes after the injected one.
    this.client.write(frame);
  }

  destroy(): void {
    this.client.destroy();
    this.server.destroy();
  }
}

/**
 * A TCP forwarder to a broker that imitates a RabbitMQ resource alarm for the clients
 * connected through it, without touching the broker other tests share:
 *
 * - `block(reason)` sends each client a `connection.blocked` frame with the broker's
 *   reason and stops reading what the clients write (their socket buffers fill, as they
 *   do when the broker stops reading);
 * - `stall()` only stops reading, without telling the clients (a broker or network that
 *   just stopped answering);
 * - `unblock()` sends `connection.unblocked` (after a `block`) and forwards again.
 *
 * The broker's frames to the clients (confirms of what it already read) keep flowing.
 *
 * @example
 * const proxy = await BlockingProxy.start(5672);
 * const warren = await Warren.connect({ url: `amqp://guest:guest@127.0.0.1:${proxy.port}`, topology });
 * await proxy.block('low on memory');
 */
export class BlockingProxy {
  private readonly links = new Set<Link>();
  private blockedReason: string | undefined;
  private stalled = false;

  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  /** Listens on a free port of 127.0.0.1 and forwards to `targetPort` on `targetHost`. */
  static async start(targetPort: number, targetHost = '127.0.0.1'): Promise<BlockingProxy> {
    const self: { proxy?: BlockingProxy } = {};
    const server = net.createServer((client) => {
      const upstream = net.connect(targetPort, targetHost);
      const link = new Link(client, upstream);
      self.proxy?.links.add(link);
      const close = () => {
        link.destroy();
        self.proxy?.links.delete(link);
      };
      client.on('error', close).on('close', close);
      upstream.on('error', close).on('close', close);
      if (self.proxy?.stalled) link.setReading(false);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    self.proxy = new BlockingProxy(server, (server.address() as net.AddressInfo).port);
    return self.proxy;
  }

  /** Connections open through the proxy. */
  get connections(): number {
    return this.links.size;
  }

  /** Tells every client the broker blocked it (`reason`, e.g. "low on memory") and stops reading from them. */
  block(reason = 'low on memory'): void {
    this.blockedReason = reason;
    for (const link of this.links) link.inject(blockedFrame(reason));
    this.stall();
  }

  /** Stops reading from the clients, without telling them. */
  stall(): void {
    this.stalled = true;
    for (const link of this.links) link.setReading(false);
  }

  /** Reads from the clients again, after telling them `connection.unblocked` if they were blocked. */
  unblock(): void {
    if (this.blockedReason !== undefined) for (const link of this.links) link.inject(unblockedFrame());
    this.blockedReason = undefined;
    this.stalled = false;
    for (const link of this.links) link.setReading(true);
  }

  async close(): Promise<void> {
    for (const link of this.links) link.destroy();
    this.links.clear();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
