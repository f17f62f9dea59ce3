import * as amqp from 'amqplib';
import { randomBytes } from 'node:crypto';
import { InvalidOptionError } from '../errors.js';
import { ManagementClient } from '../management/client.js';
import type { Archive } from '../archive/archive.js';
import type { ArchiveIngestState } from '../archive/types.js';
import type { Store } from '../store/index.js';
import type { Topology } from '../topology/declaration.js';
import type { Warren } from '../warren.js';
import type { Authorize } from './auth.js';
import { memoryActionLog, type ActionLog } from './record.js';
import { redactText, redactUrl } from './redact.js';
import { coalesceWrites } from '../connection/writes.js';

/** Options of {@link warrenConsole}. */
export interface ConsoleOptions {
  /**
   * Who may use the console, and as what: called for every request; `null` answers 401.
   * Required: an application decides who its operators are. `() => ({ user: 'local', role: 'operator' })`
   * opens it to anyone who can reach it.
   */
  authorize: Authorize;
  /** A running warren: its topology, connection and management API. Give this, or `topology` with `url` or `connection`. */
  warren?: Warren;
  /** The topology whose queues the console shows. @default `warren.topology` */
  topology?: Topology;
  /** AMQP URL the console connects with (one connection, opened on first use). @default process.env.WARREN_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672' */
  url?: string;
  /** The connection to use instead of opening one. @default `warren`'s, else one opened on `url` */
  connection?: () => Promise<amqp.ChannelModel>;
  /**
   * The management API (unacknowledged counts, redelivery rates, bindings), or `false` to
   * read depths by passive declares only.
   * @default a client on process.env.WARREN_MANAGEMENT_URL ?? 'http://guest:guest@127.0.0.1:15672', on the AMQP URL's vhost
   */
  management?: ManagementClient | false;
  /**
   * How the broker is named on the page: a text, or a function asked at each page (for
   * a connection that may move between a cluster's nodes, the node it is on now). A URL's
   * password is masked.
   * @default the URL's, password masked; with `connection` or `warren`, the node that connection is on (`host:port (RabbitMQ 3.10.8)`)
   */
  brokerName?: string | (() => string);
  /** The application's store: adds the retry table and the outbox. @default none */
  store?: Store<unknown>;
  /**
   * The failure archive: the parked pages read it (exact groups and counts over every row,
   * filters, pages) and act on its rows by id, the message page shows each message's
   * history, and the overview's parked signal counts its open failures. `new Archive(store)`.
   * @default none: the parked pages read the parked queues
   */
  archive?: Archive;
  /**
   * What ingests the parked queues into `archive`, asked whether it keeps up (the pages say
   * "archive behind" when it does not): an `ArchiveIngester`.
   * @default `warren.archive` (the `archive` option of `Warren.connect`), else none
   */
  ingester?: {
    /** Per consumer: whether ingestion keeps up, and what it holds. */
    state(): readonly ArchiveIngestState[];
  };
  /** How the database is named on the page (a URL is shown with its password masked). @default the store's backend */
  databaseName?: string;
  /** The path the console is mounted under, e.g. `/ops/warren`. @default '' (the root) */
  basePath?: string;
  /** The `WWW-Authenticate` value sent with a 401, e.g. `Basic realm="warren"` so browsers ask. @default none */
  challenge?: string;
  /**
   * The key CSRF tokens are made with. Give the same one to every instance behind a load
   * balancer. @default random per process
   */
  csrfSecret?: string;
  /**
   * Host header values accepted (e.g. `127.0.0.1:8080`); others get 403. Stops a DNS
   * rebinding page from reaching a console on loopback. @default any host
   */
  allowedHosts?: readonly string[];
  /** Where actions are recorded (see `src/audit`). @default the store's action record (`store.actions`) when a store is given, else the last 1000 in memory */
  actionLog?: ActionLog;
  /** How long a broker or database reading is reused. @default 2000 */
  cacheMs?: number;
  /** How often the console samples the figures for its charts. @default 15000 */
  sampleIntervalMs?: number;
  /** How much sampled history the charts keep, in memory. @default 3600000 (1 hour) */
  historyMs?: number;
  /** A due retry-table row older than this is a problem, as in `warren status`. @default 300000 (5 min) */
  maxDueAgeMs?: number;
  /** Parked messages a page reads at most (a browse holds them unacknowledged meanwhile). @default 10000 */
  maxParkedRead?: number;
  /**
   * The largest request body accepted, in bytes; a larger one is refused with 413 before
   * it is read whole (and before the CSRF check). The console's own forms send a few KB.
   * @default 65536
   */
  maxBodyBytes?: number;
}

/** Options after defaults and checks. */
export interface ResolvedOptions {
  readonly authorize: Authorize;
  readonly topology: Topology;
  readonly connection: () => Promise<amqp.ChannelModel>;
  readonly closeConnection: () => Promise<void>;
  readonly management: ManagementClient | undefined;
  readonly store: Store<unknown> | undefined;
  readonly archive: Archive | undefined;
  readonly ingester:
    | {
        /** Per consumer: whether ingestion keeps up, and what it holds. */
        state(): readonly ArchiveIngestState[];
      }
    | undefined;
  /** How the broker is named on the page now, password masked. */
  readonly brokerName: () => string;
  readonly databaseName: string | null;
  readonly basePath: string;
  readonly challenge: string | undefined;
  readonly csrfSecret: Buffer;
  readonly allowedHosts: ReadonlySet<string> | undefined;
  readonly actionLog: ActionLog;
  readonly cacheMs: number;
  readonly sampleIntervalMs: number;
  readonly historyMs: number;
  readonly maxDueAgeMs: number;
  readonly maxParkedRead: number;
  readonly maxBodyBytes: number;
}

function ms(name: string, value: number | undefined, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value < min) throw new InvalidOptionError(name, `${value} is not a number of milliseconds of at least ${min}`);
  return value;
}

/** One lazily opened connection, opened again after it closes. */
function ownConnection(url: string): { get: () => Promise<amqp.ChannelModel>; close: () => Promise<void> } {
  let model: Promise<amqp.ChannelModel> | undefined;
  let closed = false;
  return {
    get() {
      if (closed) return Promise.reject(new Error('the console is closed'));
      model ??= amqp.connect(url, { noDelay: true, clientProperties: { connection_name: 'warren-console' } }).then(
        (m) => {
          m.on('error', () => undefined);
          coalesceWrites(m);
          m.on('close', () => {
            model = undefined;
          });
          return m;
        },
        (error: unknown) => {
          model = undefined;
          throw error;
        },
      );
      return model;
    },
    async close() {
      closed = true;
      const m = await model?.catch(() => undefined);
      await m?.close().catch(() => undefined);
    },
  };
}

function vhostOf(url: string): string {
  try {
    const path = new URL(url).pathname;
    return path.length > 1 ? decodeURIComponent(path.slice(1)) : '/';
  } catch {
    return '/';
  }
}

/** A node as the footer names it: `host:port (RabbitMQ 3.10.8)`; never a password. */
function nodeText(address: string, server: string | undefined): string {
  return `${address}${server ? ` (${server})` : ''}`;
}

/** The node an amqplib connection is on, from its socket and the server's properties. */
function nodeOfModel(model: amqp.ChannelModel | undefined): string | undefined {
  const c = model?.connection as (amqp.Connection & { stream?: { remoteAddress?: string; remotePort?: number }; serverProperties?: Record<string, unknown> }) | undefined;
  const host = c?.stream?.remoteAddress;
  if (!c || host === undefined) return undefined;
  const p = c.serverProperties ?? {};
  const server = typeof p['product'] === 'string' ? `${p['product']}${typeof p['version'] === 'string' ? ` ${p['version']}` : ''}` : undefined;
  return nodeText(`${host.includes(':') ? `[${host}]` : host}:${c.stream?.remotePort ?? ''}`, server);
}

function brokerNameOf(options: ConsoleOptions, url: string, lastModel: () => amqp.ChannelModel | undefined): () => string {
  const given = options.brokerName;
  if (given !== undefined && typeof given !== 'string' && typeof given !== 'function') throw new InvalidOptionError('brokerName', 'expected a string or a function returning one');
  const w = options.warren;
  // Mounted: the node the application's connection is on now (a cluster's node can change).
  const fallback: () => string = w
    ? () => {
        const n = w.connection.node;
        return n ? nodeText(n.address, n.server) : "the application's connection (not connected now)";
      }
    : options.connection
      ? () => nodeOfModel(lastModel()) ?? "the application's connection (not used yet)"
      : () => redactUrl(url);
  if (typeof given === 'function') {
    // A page is never lost to its footer: a function that fails names the broker as by default.
    return () => {
      try {
        const name = given();
        return typeof name === 'string' && name !== '' ? redactText(name) : fallback();
      } catch {
        return fallback();
      }
    };
  }
  if (given !== undefined) {
    const fixed = redactText(given);
    return () => fixed;
  }
  return fallback;
}

/** Applies defaults and checks the options once. */
export function resolveOptions(options: ConsoleOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError('options', 'expected an object');
  if (typeof options.authorize !== 'function') {
    throw new InvalidOptionError('authorize', 'is required', "Pass a function (request) => ({ user, role }) | null; `() => ({ user: 'local', role: 'operator' })` lets in anyone who can reach the console.");
  }
  const topology = options.topology ?? options.warren?.topology;
  if (!topology) throw new InvalidOptionError('topology', 'is required', 'Pass `warren` (a running Warren) or `topology` (from defineTopology).');
  const url = options.url ?? process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
  let connection: () => Promise<amqp.ChannelModel>;
  let closeConnection: () => Promise<void> = () => Promise.resolve();
  // The application's connection, as last handed to the console: the footer names its node.
  let lastModel: amqp.ChannelModel | undefined;
  if (options.connection) {
    const given = options.connection;
    connection = async () => {
      const model = await given();
      lastModel = model;
      return model;
    };
  }
  else if (options.warren) {
    const w = options.warren;
    connection = () => w.connection.waitReady(5000);
  } else {
    const own = ownConnection(url);
    connection = own.get;
    closeConnection = own.close;
  }
  const basePath = (options.basePath ?? '').replace(/\/+$/, '');
  if (basePath !== '' && !/^\/[A-Za-z0-9._~\-/]*$/.test(basePath)) throw new InvalidOptionError('basePath', `${JSON.stringify(options.basePath)} is not a path such as /ops/warren`);
  const management =
    options.management === false ? undefined : (options.management ?? new ManagementClient({ url: process.env['WARREN_MANAGEMENT_URL'] ?? 'http://guest:guest@127.0.0.1:15672', vhost: vhostOf(url) }));
  if (options.archive !== undefined && typeof options.archive?.page !== 'function') throw new InvalidOptionError('archive', 'expected an Archive', 'Pass new Archive(store) (from warren) over a store with archive tables.');
  if (options.ingester !== undefined && typeof options.ingester?.state !== 'function') throw new InvalidOptionError('ingester', 'expected an ArchiveIngester (something with state())');
  const maxParkedRead = options.maxParkedRead ?? 10_000;
  if (!Number.isInteger(maxParkedRead) || maxParkedRead < 1) throw new InvalidOptionError('maxParkedRead', `${maxParkedRead} is not a whole number of at least 1`);
  const maxBodyBytes = options.maxBodyBytes ?? 65_536;
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1024) throw new InvalidOptionError('maxBodyBytes', `${maxBodyBytes} is not a whole number of bytes of at least 1024`);
  return {
    authorize: options.authorize,
    topology,
    connection,
    closeConnection,
    management,
    store: options.store,
    archive: options.archive,
    ingester: options.ingester ?? options.warren?.archive,
    brokerName: brokerNameOf(options, url, () => lastModel),
    databaseName: options.databaseName !== undefined ? redactUrl(options.databaseName) : options.store ? options.store.backend : null,
    basePath,
    challenge: options.challenge,
    csrfSecret: options.csrfSecret !== undefined ? Buffer.from(options.csrfSecret, 'utf8') : randomBytes(32),
    allowedHosts: options.allowedHosts ? new Set(options.allowedHosts.map((h) => h.toLowerCase())) : undefined,
    actionLog: options.actionLog ?? options.store?.actions ?? memoryActionLog(),
    cacheMs: ms('cacheMs', options.cacheMs, 2000, 0),
    sampleIntervalMs: ms('sampleIntervalMs', options.sampleIntervalMs, 15_000, 100),
    historyMs: ms('historyMs', options.historyMs, 3_600_000, 1000),
    maxDueAgeMs: ms('maxDueAgeMs', options.maxDueAgeMs, 300_000, 1),
    maxParkedRead,
    maxBodyBytes,
  };
}
