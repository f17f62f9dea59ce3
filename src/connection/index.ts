import { EventEmitter } from 'node:events';
import * as amqp from 'amqplib';
import { BrokerHandshakeError, BrokerUnreachableError, ClosedError, InvalidOptionError } from '../errors.js';
import { diagnoseHandshake } from './handshake.js';
import { toLogger, type Logger } from '../logger.js';
import { redactUrl } from './url.js';
import { nextIndex, resolveEndpoints, type Endpoints, type TlsOptions } from './endpoints.js';
import { coalesceWrites } from './writes.js';

export { redactUrl };
export type { TlsOptions };

/** Options of a broker connection. */
export interface ConnectionOptions {
  /**
   * AMQP URL, or the URLs of a cluster's nodes (an array, or one string with the URLs
   * separated by commas). After a full URL, an entry may be a bare `host` or `host:port`
   * that takes that URL's scheme, credentials and vhost:
   * `amqp://app:secret@rabbit-1:5672/orders,rabbit-2,rabbit-3`.
   * `amqps://` connects over TLS (see `tls`). With several, the
   * first is tried first; when a connection is lost (or an attempt fails), the next one
   * in the list is tried, wrapping around, and topology, publishers and consumers come
   * back on whichever node answers.
   * @default process.env.WARREN_AMQP_URL (a URL, or URLs separated by commas) ?? 'amqp://guest:guest@127.0.0.1:5672'
   */
  url?: string | readonly string[];
  /**
   * User name, for credentials kept out of the URL. Set it with `password`; together
   * they win over the URL's user and password.
   * @default the URL's user ('guest' when the URL has none)
   */
  username?: string;
  /**
   * Password, for credentials kept out of the URL. It is never logged, nor put in an
   * error message (URLs are printed with the password as `***`).
   * @default the URL's password ('guest' when the URL has none)
   */
  password?: string;
  /**
   * TLS settings for `amqps://` URLs: the CA to trust, a client certificate, the name to
   * check. The broker's certificate is always verified unless `rejectUnauthorized` is false.
   * @default Node's defaults: public CAs, no client certificate, verification on
   */
  tls?: TlsOptions;
  /**
   * How long the first connection may take (with retries) before `open()` fails.
   * @default 10000
   */
  connectTimeoutMs?: number;
  /**
   * First and longest wait between reconnect attempts; the wait doubles, with jitter.
   * @default { initialDelayMs: 100, maxDelayMs: 10000 }
   */
  reconnect?: { initialDelayMs?: number; maxDelayMs?: number };
  /** AMQP heartbeat in seconds. @default 10 */
  heartbeatSeconds?: number;
  /** Name shown in the management UI's connection list. @default 'warren' */
  connectionName?: string;
  /** @default a logger that drops everything */
  logger?: Logger;
}

/**
 * The broker node a connection is on, from the URL it connected to and the properties
 * the server sent in `connection.start`. RabbitMQ sends a `cluster_name` there, not a
 * node name: the URL's host and port are what always tell the nodes of one cluster apart.
 */
export interface BrokerNode {
  /** The URL connected to, with the password replaced by `***`. */
  readonly url: string;
  /** `host:port` of that URL. */
  readonly address: string;
  /**
   * The server's `cluster_name`. Until a name is set (`rabbitmqctl set_cluster_name`),
   * RabbitMQ 3.10 sends each node's own name with the host's full name, e.g. `rabbit@host.example`.
   */
  readonly clusterName: string | undefined;
  /** The server's `product` and `version`, e.g. `RabbitMQ 3.10.8`. */
  readonly server: string | undefined;
  /** Whether the connection is TLS. */
  readonly tls: boolean;
}

function nodeOf(url: string, model: amqp.ChannelModel): BrokerNode {
  const props = (model as unknown as { connection?: { serverProperties?: Record<string, unknown> } }).connection?.serverProperties ?? {};
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : Buffer.isBuffer(v) ? v.toString('utf8') : undefined);
  const u = new URL(url);
  const tls = u.protocol === 'amqps:';
  const product = text(props['product']);
  const version = text(props['version']);
  return Object.freeze({
    url: redactUrl(url),
    address: `${u.hostname}:${u.port || (tls ? '5671' : '5672')}`,
    clusterName: text(props['cluster_name']),
    server: product !== undefined || version !== undefined ? [product, version].filter((x) => x !== undefined).join(' ') : undefined,
    tls,
  });
}

/** A function run on every (re)connect, in registration order. */
export type ReadyHook = (model: amqp.ChannelModel) => Promise<void>;

/** Adds a heartbeat to the URL unless it sets one. */
function withHeartbeat(url: string, seconds: number): string {
  try {
    const u = new URL(url);
    if (!u.searchParams.has('heartbeat')) u.searchParams.set('heartbeat', String(seconds));
    return u.toString();
  } catch {
    return url;
  }
}

/** Wait before reconnect attempt `attempt` (1-based): doubling, capped, with ±20% jitter. */
export function backoffDelay(attempt: number, initialMs: number, maxMs: number, random = Math.random): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(base * (0.8 + 0.4 * random()));
}

/**
 * A socket closed without an error (destroyed by a proxy agent, a TLS layer, a timeout
 * handler) emits only 'close'; amqplib listens for 'end' and 'error', so it would notice
 * only by the heartbeat, two to three intervals later (about 30 s by default). Treat
 * that 'close' as the socket error it is; after a close amqplib began itself, this does
 * nothing (it expects the socket to close).
 */
function noticeSilentClose(model: amqp.ChannelModel): void {
  const connection = (model as unknown as { connection?: { stream?: NodeJS.EventEmitter; onSocketError?: (err: Error) => void } }).connection;
  const stream = connection?.stream;
  if (typeof stream?.once !== 'function' || typeof connection?.onSocketError !== 'function') return;
  stream.once('close', () => connection.onSocketError?.(new Error('Socket closed')));
}

function positive(value: number | undefined, fallback: number, option: string): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0) throw new InvalidOptionError(option, `${v} is not a positive number of milliseconds`);
  return v;
}

/**
 * One AMQP connection that comes back by itself. Publishers, consumers and the
 * topology register {@link ReadyHook}s, which run again after every reconnect so
 * channels are reopened, topology is declared and consumers re-attach.
 *
 * Given several URLs (a cluster's nodes), it moves to the next one in the list when a
 * connection is lost or an attempt fails, and {@link node} says where it is.
 *
 * Events: `connected` (generation, {@link BrokerNode}), `disconnected` (error),
 * `reconnect-scheduled` ({attempt, delayMs, url}), `hook-failed` (error), `blocked` (the
 * broker's reason, e.g. "low on memory"), `unblocked`.
 */
export class BrokerConnection extends EventEmitter {
  /** Every URL this connection may use, in order (print them with {@link redactUrl}). */
  readonly urls: readonly string[];
  private readonly endpoints: Endpoints;
  /** Which of `urls` the next attempt uses, or the live connection is on. */
  private index = 0;
  private currentNode: BrokerNode | undefined;
  private readonly connectTimeoutMs: number;
  private readonly initialDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly heartbeat: number;
  private readonly connectionName: string;
  private readonly logger: Logger;
  private readonly hooks: ReadyHook[] = [];
  private model: amqp.ChannelModel | undefined;
  private closing = false;
  private generation = 0;
  private waiters: Array<() => void> = [];
  private reconnectTimer: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;
  /** A connect under way (from open() or a reconnect), so close() can wait for it. */
  private inFlight: Promise<void> | undefined;
  private blockedReason: string | undefined;
  /** Why the last connect attempt failed; cleared on connect. */
  private lastFailure: string | undefined;
  /** When the connection was lost, or first tried without success (Date.now()); undefined while connected. */
  private downSince: number | undefined = Date.now();

  constructor(options: ConnectionOptions = {}) {
    super();
    this.endpoints = resolveEndpoints(options);
    this.urls = this.endpoints.urls;
    this.connectTimeoutMs = positive(options.connectTimeoutMs, 10_000, 'connectTimeoutMs');
    this.initialDelayMs = positive(options.reconnect?.initialDelayMs, 100, 'reconnect.initialDelayMs');
    this.maxDelayMs = positive(options.reconnect?.maxDelayMs, 10_000, 'reconnect.maxDelayMs');
    this.heartbeat = options.heartbeatSeconds ?? 10;
    this.connectionName = options.connectionName ?? 'warren';
    this.logger = toLogger(options.logger);
    if (this.endpoints.tls['rejectUnauthorized'] === false) {
      this.logger.warn('TLS certificate verification is off (tls.rejectUnauthorized: false): anyone on the path can read the password and the messages');
    }
  }

  /** The URL in use: the one connected to, or the one the next attempt tries. */
  get url(): string {
    return this.urls[this.index] ?? this.urls[0]!;
  }

  /**
   * The node this connection is on (its URL, redacted, and the server's cluster name and
   * version), or `undefined` while it is not connected.
   */
  get node(): BrokerNode | undefined {
    return this.model ? this.currentNode : undefined;
  }

  /**
   * True while a connection is up, its ready hooks run or not. A publish may be written
   * once they have; {@link ready} says when.
   */
  get connected(): boolean {
    return this.model !== undefined;
  }

  /**
   * Why the last attempt to connect failed (e.g. `connect ECONNREFUSED 127.0.0.1:5672`),
   * or `undefined` once connected and before any attempt failed.
   */
  get lastError(): string | undefined {
    return this.lastFailure;
  }

  /** How long this connection has been down, in ms (since it was lost or first tried); 0 while connected. */
  get downForMs(): number {
    return this.model !== undefined || this.downSince === undefined ? 0 : Date.now() - this.downSince;
  }

  /** True while a connection is up and every ready hook has run. */
  get ready(): boolean {
    return this.model !== undefined && this.connecting === undefined;
  }

  /**
   * Why the broker stopped reading this connection's publishes (`connection.blocked`,
   * e.g. "low on memory" or "low on disk"), or `undefined` while it is not blocked.
   * RabbitMQ blocks a connection that publishes while a resource alarm is on; anything
   * written meanwhile waits in the socket buffers until the alarm clears.
   */
  get blocked(): string | undefined {
    return this.blockedReason;
  }

  /** Counts connections made; a channel from an older generation is stale. */
  get currentGeneration(): number {
    return this.generation;
  }

  /**
   * Connects, retrying with backoff until `connectTimeoutMs`; then runs every hook.
   * Refused credentials, a refused virtual host or a server that does not speak AMQP
   * fail at once with a {@link BrokerHandshakeError} saying what to check.
   */
  async open(): Promise<void> {
    if (this.closing) throw new ClosedError('The connection');
    if (this.model) return;
    const deadline = Date.now() + this.connectTimeoutMs;
    let attempt = 0;
    let lastError: unknown;
    while (Date.now() < deadline && !this.closing) {
      attempt += 1;
      try {
        await this.connectOnce();
        return;
      } catch (error) {
        lastError = error;
        this.noteFailure(error);
        const refused = this.diagnose(error);
        if (refused) throw new BrokerHandshakeError(redactUrl(this.url), refused.reason, refused.message, { cause: error });
        this.index = nextIndex(this.index, this.urls.length);
        const delay = Math.min(backoffDelay(attempt, this.initialDelayMs, this.maxDelayMs), Math.max(0, deadline - Date.now()));
        if (delay <= 0) break;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
    const detail = lastError instanceof Error ? lastError.message : String(lastError ?? 'closed while connecting');
    throw new BrokerUnreachableError(this.shownUrls(), `${detail} (gave up after ${attempt} attempts in ${this.connectTimeoutMs} ms)`, { cause: lastError });
  }

  /**
   * Tries each URL once and resolves `true` when one connects (its hooks run, as with
   * {@link open}). When none answers, it resolves `false` at once and goes on trying in
   * the background, with the `reconnect` backoff, for as long as it takes: the hooks run
   * when the broker comes, and {@link waitReady} waits for that. For an application that
   * must start while the broker is away. Refused credentials, a refused virtual host or a
   * server that does not speak AMQP still fail at once with a {@link BrokerHandshakeError}.
   */
  async tryOpen(): Promise<boolean> {
    if (this.closing) throw new ClosedError('The connection');
    if (this.model) return true;
    for (let i = 0; i < this.urls.length && !this.closing; i++) {
      try {
        await this.connectOnce();
        return true;
      } catch (error) {
        this.noteFailure(error);
        const refused = this.diagnose(error);
        if (refused) throw new BrokerHandshakeError(redactUrl(this.url), refused.reason, refused.message, { cause: error });
        this.index = nextIndex(this.index, this.urls.length);
      }
    }
    if (this.closing) return false;
    this.logger.warn('the broker cannot be reached; going on without it and connecting in the background', { urls: this.shownUrls(), error: this.lastFailure });
    this.scheduleReconnect(1);
    return false;
  }

  private noteFailure(error: unknown): void {
    // Shown in health reports: a driver's message may carry the URL it was given.
    this.lastFailure = (error instanceof Error ? error.message : String(error)).replace(/\/\/([^:@/\s]+):[^@/\s]+@/g, '//$1:***@');
  }

  private connectOnce(): Promise<void> {
    const attempt = this.connectModel();
    const tracked = attempt.finally(() => {
      if (this.inFlight === tracked) this.inFlight = undefined;
    });
    this.inFlight = tracked;
    return tracked;
  }

  /** What no retry can fix about a failed attempt on the current URL, or `undefined`. */
  private diagnose(error: unknown): ReturnType<typeof diagnoseHandshake> {
    const credentials = this.endpoints.credentials;
    if (!credentials) return diagnoseHandshake(error, this.url);
    // Named as the broker saw it: the user of the options, not the URL's.
    const u = new URL(this.url);
    u.username = encodeURIComponent(credentials.username);
    u.password = '';
    return diagnoseHandshake(error, u.toString(), 'the username and password options');
  }

  /** The URLs, redacted, for messages: one, or all of them separated by commas. */
  private shownUrls(): string {
    return this.urls.map(redactUrl).join(', ');
  }

  private async connectModel(): Promise<void> {
    const url = this.url;
    const { credentials, tls } = this.endpoints;
    const model = await amqp.connect(withHeartbeat(url, this.heartbeat), {
      noDelay: true,
      clientProperties: { connection_name: this.connectionName },
      timeout: Math.min(this.connectTimeoutMs, 10_000),
      ...(url.startsWith('amqps:') ? tls : {}),
      ...(credentials ? { credentials: amqp.credentials.plain(credentials.username, credentials.password) } : {}),
    });
    // Before anything else: an 'error' with no listener is an uncaught exception that
    // ends the process (a socket that closes while this connection is being closed).
    model.on('error', (err: Error) => this.logger.warn('connection error', { error: err.message }));
    coalesceWrites(model);
    if (this.closing) {
      await this.closeModel(model);
      throw new ClosedError('The connection');
    }
    this.generation += 1;
    const generation = this.generation;
    const node = nodeOf(url, model);
    this.currentNode = node;
    model.on('close', (err?: Error) => this.onClose(generation, err));
    noticeSilentClose(model);
    model.on('blocked', (reason: string) => this.onBlocked(generation, reason));
    model.on('unblocked', () => this.onUnblocked(generation));
    this.model = model;
    this.lastFailure = undefined;
    this.downSince = undefined;
    this.connecting = this.runHooks(model);
    try {
      await this.connecting;
    } finally {
      this.connecting = undefined;
    }
    // close() came while the setup ran, and closed this model: nothing to announce.
    if (this.closing) return;
    this.logger.info('connected', { url: node.url, clusterName: node.clusterName, server: node.server, generation });
    this.emit('connected', generation, node);
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /**
   * Closes a connection, bounded by `connectTimeoutMs`: the close handshake needs a
   * broker that reads, and one under a resource alarm may not.
   */
  private async closeModel(model: amqp.ChannelModel): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (timer = setTimeout(r, this.connectTimeoutMs)));
    // A socket that drops mid-close ends it too (amqplib's close() then never settles).
    const gone = new Promise<void>((r) => model.once('close', () => r()));
    const closed = Promise.race([model.close().then(() => true, () => true), gone.then(() => true)]);
    const inTime = await Promise.race([closed, late.then(() => false)]);
    clearTimeout(timer);
    // The broker did not read the close in time: drop the socket, so that nothing of the
    // connection outlives close() (it would until its heartbeat timed out, or never).
    if (!inTime) (model as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream?.destroy?.();
  }

  private onBlocked(generation: number, reason: string): void {
    if (generation !== this.generation) return;
    this.blockedReason = reason || 'no reason given';
    this.logger.warn('broker blocked publishing on this connection', { reason: this.blockedReason });
    this.emit('blocked', this.blockedReason);
  }

  private onUnblocked(generation: number): void {
    if (generation !== this.generation || this.blockedReason === undefined) return;
    this.blockedReason = undefined;
    this.logger.info('broker unblocked publishing');
    this.emit('unblocked');
  }

  private async runHooks(model: amqp.ChannelModel): Promise<void> {
    // Hooks registered while these run are run too: `onReady` leaves them to this run
    // (a consumer started mid-reconnect would otherwise never attach).
    const ran = new Set<ReadyHook>();
    for (let hook = this.hooks[0]; hook !== undefined; hook = this.hooks.find((h) => !ran.has(h))) {
      ran.add(hook);
      try {
        await hook(model);
      } catch (error) {
        this.logger.error('a setup step failed after connecting', { error: error instanceof Error ? error.message : String(error) });
        this.emit('hook-failed', error);
      }
    }
  }

  private onClose(generation: number, err?: Error): void {
    if (generation !== this.generation) return;
    this.model = undefined;
    this.downSince = Date.now();
    if (err) this.noteFailure(err);
    // A new connection starts unblocked; the broker says so again if the alarm is still on.
    this.onUnblocked(generation);
    if (this.closing) return;
    const lost = this.url;
    // On to the next node; with one URL this is the same one.
    this.index = nextIndex(this.index, this.urls.length);
    this.logger.warn('connection lost; reconnecting', { url: redactUrl(lost), next: redactUrl(this.url), error: err?.message });
    this.emit('disconnected', err);
    this.scheduleReconnect(1);
  }

  private scheduleReconnect(attempt: number): void {
    if (this.closing || this.reconnectTimer) return;
    const delayMs = backoffDelay(attempt, this.initialDelayMs, this.maxDelayMs);
    this.emit('reconnect-scheduled', { attempt, delayMs, url: redactUrl(this.url) });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.connectOnce().catch((error: unknown) => {
        if (this.closing) return;
        this.noteFailure(error);
        this.logger.warn('reconnect failed', { attempt, url: redactUrl(this.url), error: error instanceof Error ? error.message : String(error) });
        this.index = nextIndex(this.index, this.urls.length);
        this.scheduleReconnect(attempt + 1);
      });
    }, delayMs);
  }

  /**
   * Registers a hook that runs on every connect. When already connected it runs
   * now too; while a connect is running its hooks, it runs as part of that connect.
   * Returns a function that unregisters it.
   */
  async onReady(hook: ReadyHook): Promise<() => void> {
    this.hooks.push(hook);
    if (this.model && !this.connecting) await hook(this.model);
    return () => this.offReady(hook);
  }

  /** Removes a hook given to {@link onReady} (also one whose first run threw, which stays registered). */
  offReady(hook: ReadyHook): void {
    const i = this.hooks.indexOf(hook);
    if (i >= 0) this.hooks.splice(i, 1);
  }

  /** The live connection, waiting up to `timeoutMs` for a reconnect. */
  async waitReady(timeoutMs: number): Promise<amqp.ChannelModel> {
    if (this.closing) throw new ClosedError('The connection');
    if (this.model && !this.connecting) return this.model;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== done);
        reject(new BrokerUnreachableError(this.shownUrls(), `not connected within ${timeoutMs} ms`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.push(done);
    });
    if (!this.model) throw new ClosedError('The connection');
    return this.model;
  }

  /** Closes the connection and stops reconnecting. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
    const model = this.model;
    this.model = undefined;
    for (const w of this.waiters) w();
    this.waiters = [];
    if (model) await this.closeModel(model);
    // A connect under way finds `closing` set and closes what it opened; wait for that,
    // so nothing of this connection outlives close(). Bounded: a setup step that waits on
    // the broker must not hold close() for ever.
    const inFlight = this.inFlight;
    if (inFlight) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), this.connectTimeoutMs)));
      const outcome = await Promise.race([inFlight.then(() => 'done', () => 'done'), late]);
      clearTimeout(timer);
      if (outcome === 'late') this.logger.warn(`a connect under way did not end within ${this.connectTimeoutMs} ms of close(); close() goes on`);
    }
  }
}
