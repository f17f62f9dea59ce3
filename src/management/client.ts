import { WarrenError } from '../errors.js';
import type { BrokerBinding } from '../topology/plan.js';

/** Options of the management API client. */
export interface ManagementOptions {
  /**
   * Base URL of the management API, credentials included.
   * @default process.env.WARREN_MANAGEMENT_URL ?? 'http://guest:guest@127.0.0.1:15672'
   */
  url?: string;
  /** @default '/' */
  vhost?: string;
  /** @default 5000 */
  timeoutMs?: number;
}

/** What the management API reports of one queue (the fields warren reads). */
export interface QueueInfo {
  readonly name: string;
  readonly durable: boolean;
  readonly arguments: Readonly<Record<string, unknown>>;
  readonly type?: string;
  readonly messages_ready?: number;
  readonly messages_unacknowledged?: number;
  /** Messages set aside by a quorum queue's delayed retry, waiting for their time (RabbitMQ 4.3). */
  readonly messages_delayed?: number;
  readonly messages?: number;
  readonly consumers?: number;
  readonly message_stats?: {
    /** Redeliveries since the queue's stats began (a counter). */
    readonly redeliver?: number;
    /** Messages published into the queue since its stats began (a counter). */
    readonly publish?: number;
    readonly redeliver_details?: { readonly rate?: number };
    readonly deliver_get_details?: { readonly rate?: number };
    readonly publish_details?: { readonly rate?: number };
  };
}

/** A small client of RabbitMQ's HTTP management API (plugin `rabbitmq_management`). */
export class ManagementClient {
  private readonly base: string;
  private readonly auth: string;
  readonly vhost: string;
  private readonly timeoutMs: number;

  constructor(options: ManagementOptions = {}) {
    const raw = options.url ?? process.env['WARREN_MANAGEMENT_URL'] ?? 'http://guest:guest@127.0.0.1:15672';
    const u = new URL(raw);
    this.auth = 'Basic ' + Buffer.from(`${decodeURIComponent(u.username || 'guest')}:${decodeURIComponent(u.password || 'guest')}`).toString('base64');
    u.username = '';
    u.password = '';
    this.base = u.toString().replace(/\/$/, '');
    this.vhost = options.vhost ?? '/';
    this.timeoutMs = options.timeoutMs ?? 5000;
  }

  /** Where the API is, without credentials. */
  get location(): string {
    return this.base;
  }

  private async get<T>(path: string): Promise<T | undefined> {
    let res: Response;
    try {
      res = await fetch(`${this.base}/api${path}`, { headers: { authorization: this.auth }, signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (error) {
      throw new WarrenError('BROKER_UNREACHABLE', `The management API at ${this.base} did not answer (${error instanceof Error ? error.message : String(error)}). Enable it with \`rabbitmq-plugins enable rabbitmq_management\`.`, { cause: error });
    }
    if (res.status === 404) return undefined;
    if (res.status === 401) throw new WarrenError('BROKER_UNREACHABLE', `The management API at ${this.base} refused the credentials (401). Check the user and password in the management URL.`);
    if (!res.ok) throw new WarrenError('BROKER_UNREACHABLE', `The management API at ${this.base} answered ${res.status} for ${path}.`);
    return (await res.json()) as T;
  }

  /** True when the API answers with these credentials. */
  async available(): Promise<boolean> {
    try {
      return (await this.get<unknown>('/overview')) !== undefined;
    } catch {
      return false;
    }
  }

  /** One queue, or `undefined` when it does not exist. */
  async queue(name: string): Promise<QueueInfo | undefined> {
    return this.get<QueueInfo>(`/queues/${encodeURIComponent(this.vhost)}/${encodeURIComponent(name)}`);
  }

  /**
   * Every queue of the vhost. `columns` limits what the broker sends to these fields
   * (dotted for nested ones, e.g. `message_stats.publish`): much less to read on a busy vhost.
   */
  async queues(columns?: readonly string[]): Promise<QueueInfo[]> {
    const query = columns && columns.length > 0 ? `?columns=${columns.map(encodeURIComponent).join(',')}` : '';
    return (await this.get<QueueInfo[]>(`/queues/${encodeURIComponent(this.vhost)}${query}`)) ?? [];
  }

  /** The bindings whose source is this exchange, or `undefined` when the exchange does not exist. */
  async exchangeBindings(name: string): Promise<BrokerBinding[] | undefined> {
    return this.get<BrokerBinding[]>(`/exchanges/${encodeURIComponent(this.vhost)}/${encodeURIComponent(name)}/bindings/source`);
  }

  /** One exchange's type, durability and arguments, or `undefined` when it does not exist. */
  async exchange(name: string): Promise<{ name: string; type: string; durable: boolean; arguments?: Readonly<Record<string, unknown>> } | undefined> {
    return this.get(`/exchanges/${encodeURIComponent(this.vhost)}/${encodeURIComponent(name)}`);
  }
}
