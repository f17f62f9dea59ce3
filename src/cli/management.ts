import { redactUrl } from '../connection/url.js';
import { WarrenError } from '../errors.js';
import { ManagementClient, type QueueInfo } from '../management/client.js';
import type { BrokerBinding } from '../topology/plan.js';
import { UsageError } from './errors.js';

/** Where the management URL may come from, for messages. */
const FROM = '--management-url (or WARREN_MANAGEMENT_URL)';

/** A list item as given, its password masked. */
function masked(item: string): string {
  return redactUrl(item);
}

/**
 * The URLs of a `--management-url` list, in order. An item without a scheme (`host:port`)
 * takes the scheme, user and password of the first, as in `--url`. Throws a usage error
 * naming the item that is not a URL.
 */
export function managementUrls(list: string): string[] {
  const items = list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) throw new UsageError(`${FROM} is empty: give the management API's URL, e.g. http://user:password@host:15672, or several separated by commas.`);
  const urls: string[] = [];
  let first: URL | undefined;
  for (const item of items) {
    let url: URL;
    try {
      if (item.includes('://')) url = new URL(item);
      else if (first !== undefined) {
        url = new URL(`${first.protocol}//${item}`);
        url.username = first.username;
        url.password = first.password;
      } else throw new Error('no scheme');
    } catch {
      throw new UsageError(`${FROM}: ${masked(item)} is not a URL of the management API, e.g. http://rabbit-1.internal:15672 with the user and password before the host (after the first URL, host:port is enough).`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${FROM}: ${masked(item)} is not an http:// or https:// URL of the management API, e.g. http://rabbit-1.internal:15672.`);
    first ??= url;
    urls.push(url.toString());
  }
  return urls;
}

/**
 * Why a node did not answer at all, in a few words, or undefined when it answered (a
 * refusal such as 401 or an HTTP error is an answer: another node would most likely
 * give the same). The client wraps a failed fetch with the fetch's error as the cause.
 */
export function unreachableReason(error: unknown, timeoutMs: number): string | undefined {
  if (!(error instanceof WarrenError) || error.code !== 'BROKER_UNREACHABLE' || error.cause === undefined) return undefined;
  const fetchError = error.cause as { name?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } };
  if (fetchError?.name === 'TimeoutError' || fetchError?.name === 'AbortError') return `no answer within ${timeoutMs} ms`;
  const code = fetchError?.cause?.code;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT') return `no answer within ${timeoutMs} ms`;
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'the connection closed';
  const detail = typeof fetchError?.cause?.message === 'string' ? fetchError.cause.message : typeof fetchError?.message === 'string' ? fetchError.message : String(error.cause);
  return detail.split('\n')[0] ?? detail;
}

/**
 * The management API of a cluster, given as several URLs: each request goes to the node
 * that answered last (the first at the start) and on to the next when a node does not
 * answer (connection refused, no answer in time). When none answers, the error names
 * every node tried and why. A node that answers with an error (401, 500) is not skipped.
 */
export class ClusterManagementClient extends ManagementClient {
  private readonly nodes: readonly ManagementClient[];
  private current = 0;
  private readonly noted = new Set<number>();

  constructor(
    urls: readonly string[],
    vhost: string,
    private readonly nodeTimeoutMs: number,
    private readonly note: (line: string) => void = () => undefined,
  ) {
    super({ url: urls[0] as string, vhost, timeoutMs: nodeTimeoutMs });
    this.nodes = urls.map((url) => new ManagementClient({ url, vhost, timeoutMs: nodeTimeoutMs }));
  }

  /** Where the API is, without credentials: the node that answered last. */
  override get location(): string {
    return (this.nodes[this.current] as ManagementClient).location;
  }

  /** Runs `call` on the node that answered last, then on each other node in turn while they do not answer. */
  private async onAnyNode<T>(call: (node: ManagementClient) => Promise<T>): Promise<T> {
    const tried: string[] = [];
    let last: unknown;
    const start = this.current;
    for (let k = 0; k < this.nodes.length; k++) {
      const i = (start + k) % this.nodes.length;
      const node = this.nodes[i] as ManagementClient;
      try {
        const result = await call(node);
        this.current = i;
        return result;
      } catch (error) {
        const why = unreachableReason(error, this.nodeTimeoutMs);
        if (why === undefined) throw error;
        last = error;
        tried.push(`${node.location} (${why})`);
        if (k < this.nodes.length - 1 && !this.noted.has(i)) {
          this.noted.add(i);
          this.note(`note: the management API at ${node.location} did not answer (${why}); trying the next node in --management-url`);
        }
      }
    }
    throw new WarrenError(
      'BROKER_UNREACHABLE',
      `The management API answered at none of the ${this.nodes.length} nodes in ${FROM}: ${tried.join('; ')}. Check that the brokers run with the management plugin (\`rabbitmq-plugins enable rabbitmq_management\`) and the hosts and ports in the list.`,
      { cause: last },
    );
  }

  /** True when a node answers with these credentials. */
  override async available(): Promise<boolean> {
    for (let k = 0; k < this.nodes.length; k++) {
      const i = (this.current + k) % this.nodes.length;
      if (await (this.nodes[i] as ManagementClient).available()) {
        this.current = i;
        return true;
      }
    }
    return false;
  }

  override queue(name: string): Promise<QueueInfo | undefined> {
    return this.onAnyNode((node) => node.queue(name));
  }

  override queues(columns?: readonly string[]): Promise<QueueInfo[]> {
    return this.onAnyNode((node) => node.queues(columns));
  }

  override exchangeBindings(name: string): Promise<BrokerBinding[] | undefined> {
    return this.onAnyNode((node) => node.exchangeBindings(name));
  }

  override exchange(name: string): ReturnType<ManagementClient['exchange']> {
    return this.onAnyNode((node) => node.exchange(name));
  }
}
