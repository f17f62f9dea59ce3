import { readFile, stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { resolveEndpoints, type Endpoints, type TlsOptions } from '../connection/endpoints.js';
import { diagnoseHandshake } from '../connection/handshake.js';
import { credentialsOf, redactUrl, redactUrls } from '../connection/url.js';
import { coalesceWrites } from '../connection/writes.js';
import { BrokerHandshakeError, InvalidOptionError, StoreSchemaError, StoreUnavailableError } from '../errors.js';
import { ManagementClient } from '../management/client.js';
import type { Store } from '../store/index.js';
import { defineTopology, type Topology, type TopologyOptions } from '../topology/declaration.js';
import type { ParsedValues } from './args.js';
import { CliError, EXIT, UsageError } from './errors.js';
import { ClusterManagementClient, managementUrls } from './management.js';

/** Where the CLI writes, and what it reads from the environment; tests and embedders pass their own. */
export interface Io {
  readonly stdout: NodeJS.WriteStream;
  readonly stderr: NodeJS.WriteStream;
  readonly stdin: NodeJS.ReadStream;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly cwd: string;
}

export const DEFAULT_AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
export const DEFAULT_MANAGEMENT_URL = 'http://guest:guest@127.0.0.1:15672';

/** Secrets that must never be printed: the passwords of the broker, management and database URLs. */
export function secretsOf(...urls: readonly (string | undefined)[]): string[] {
  const out: string[] = [];
  // A list of URLs (--url a,b) holds the secrets of each.
  const each = urls.flatMap((url) => (url && url.includes(',') ? url.split(',') : [url]));
  for (const url of each) {
    if (!url) continue;
    // Read from the text, not parsed: a password with a raw / # or @ is still found whole.
    const c = credentialsOf(url.trim());
    // A password equal to the user name (guest:guest) is no secret, and masking it would hide the user.
    if (c && c.password !== '' && c.password !== c.user) {
      out.push(c.password);
      try {
        out.push(decodeURIComponent(c.password));
      } catch {
        // Not percent-encoded: the password as written is the one.
      }
    }
    // libpq also takes the password as a parameter: postgres://app@db/shop?password=…
    const param = /[?&]password=([^&#\s]*)/i.exec(url)?.[1];
    if (param) {
      try {
        out.push(decodeURIComponent(param));
      } catch {
        // Not percent-encoded: as written only.
      }
      out.push(param);
    }
  }
  return [...new Set(out)].filter((s) => s.length >= 3);
}

/** Replaces every secret in `text` with `***`. */
export function scrub(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join('***');
  // Any URL with credentials that slipped through.
  return redactUrls(out);
}

function looksLikeTopology(value: unknown): value is Topology {
  return typeof value === 'object' && value !== null && typeof (value as Topology).consumer === 'function' && (value as Topology).consumers instanceof Map;
}

/**
 * Loads the topology module: `--topology PATH` or WARREN_TOPOLOGY. It may export a
 * {@link Topology} (from defineTopology) or plain {@link TopologyOptions}, as
 * `topology` or as the default export.
 */
export async function loadTopology(flag: string | undefined, io: Io): Promise<Topology> {
  const given = flag ?? io.env['WARREN_TOPOLOGY'];
  const from = flag !== undefined ? '--topology' : 'WARREN_TOPOLOGY';
  if (given === undefined || given.trim() === '') {
    throw new UsageError('No topology given: pass --topology PATH or set WARREN_TOPOLOGY to the module that declares it (a .js or .mjs file exporting `topology` or a default export).');
  }
  const path = isAbsolute(given) ? given : resolve(io.cwd, given);
  try {
    const s = await stat(path);
    if (!s.isFile()) throw new Error('not a file');
  } catch {
    throw new UsageError(`${from}: ${given} is not a file (looked for ${path}).`);
  }
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    if (/\.[mc]?ts$/i.test(path)) {
      throw new UsageError(
        `${from}: ${given} is TypeScript, which plain node cannot load (${message.split('\n')[0]}). Compile it to .js (tsc), or run the CLI under tsx: NODE_OPTIONS='--import tsx' warren …`,
      );
    }
    throw new UsageError(`${from}: loading ${given} failed: ${message.split('\n')[0]}`);
  }
  let candidate: unknown = mod['topology'] ?? mod['default'];
  // A CommonJS module's exports arrive as the default export.
  if (typeof candidate === 'object' && candidate !== null && !looksLikeTopology(candidate) && !('consumers' in candidate) && 'topology' in candidate) {
    candidate = (candidate as { topology: unknown }).topology;
  }
  if (candidate === undefined) {
    const names = Object.keys(mod);
    throw new UsageError(`${from}: ${given} exports neither \`topology\` nor a default export${names.length ? ` (it exports: ${names.join(', ')})` : ''}.`);
  }
  if (looksLikeTopology(candidate)) return candidate;
  if (typeof candidate === 'object' && candidate !== null && 'consumers' in candidate) {
    try {
      return defineTopology(candidate as TopologyOptions);
    } catch (error) {
      if (error instanceof InvalidOptionError) throw new UsageError(`${from}: ${given}: ${error.message}`);
      throw error;
    }
  }
  throw new UsageError(`${from}: the export of ${given} is not a topology: expected defineTopology(...) or an object with \`consumers\`.`);
}

/** TLS settings as the CLI takes them: files to read, and the names of env vars holding secrets. */
export interface CliTlsSettings {
  readonly ca: string | undefined;
  readonly cert: string | undefined;
  readonly key: string | undefined;
  /** The passphrase of `key`, read from the environment. */
  readonly passphrase: string | undefined;
  readonly servername: string | undefined;
  /** `--tls-insecure`: the broker's certificate is not verified. */
  readonly insecure: boolean;
}

/** Connection settings from flags, then the environment, then defaults. */
export interface BrokerSettings {
  /** The AMQP URL, or several separated by commas (a cluster's nodes, tried in order). */
  readonly url: string;
  /** The management API's URL, or several separated by commas (a cluster's nodes, tried in order). */
  readonly managementUrl: string;
  readonly connectTimeoutMs: number;
  /** User name given apart from the URL (`--username` or WARREN_AMQP_USERNAME). */
  readonly username?: string | undefined;
  /** Password given apart from the URL, read from the environment; never printed. */
  readonly password?: string | undefined;
  readonly tls?: CliTlsSettings | undefined;
}

/** Where each broker setting may come from, for messages. */
const FROM = {
  url: '--url (or WARREN_AMQP_URL)',
  credentials: '--username and --password-env (or WARREN_AMQP_USERNAME and WARREN_AMQP_PASSWORD)',
} as const;

function fromEnvNamedBy(values: ParsedValues, flag: string, io: Io, fallback: string): string | undefined {
  const name = typeof values[flag] === 'string' ? values[flag] : undefined;
  if (name === undefined) return io.env[fallback] === '' ? undefined : io.env[fallback];
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new UsageError(`--${flag}: ${JSON.stringify(name)} is not the name of an environment variable (e.g. ${fallback}); it names the variable, it is not the secret itself.`);
  const value = io.env[name];
  if (value === undefined || value === '') throw new UsageError(`--${flag} ${name}: the environment variable ${name} is not set.`);
  return value;
}

/** Reads the broker flags: `--url`, credentials and TLS, each with its environment variable. */
export function brokerSettings(values: ParsedValues, io: Io, connectTimeoutMs: number): BrokerSettings {
  const flag = (name: string): string | undefined => (typeof values[name] === 'string' ? (values[name] as string) : undefined);
  const env = (name: string): string | undefined => (io.env[name] === '' ? undefined : io.env[name]);
  const ca = flag('tls-ca') ?? env('WARREN_TLS_CA');
  const cert = flag('tls-cert') ?? env('WARREN_TLS_CERT');
  const key = flag('tls-key') ?? env('WARREN_TLS_KEY');
  const passphrase = fromEnvNamedBy(values, 'tls-passphrase-env', io, 'WARREN_TLS_PASSPHRASE');
  const servername = flag('tls-servername') ?? env('WARREN_TLS_SERVERNAME');
  const insecure = values['tls-insecure'] === true;
  const anyTls = [ca, cert, key, passphrase, servername].some((v) => v !== undefined) || insecure;
  return {
    url: flag('url') ?? io.env['WARREN_AMQP_URL'] ?? DEFAULT_AMQP_URL,
    managementUrl: flag('management-url') ?? io.env['WARREN_MANAGEMENT_URL'] ?? DEFAULT_MANAGEMENT_URL,
    connectTimeoutMs,
    username: flag('username') ?? env('WARREN_AMQP_USERNAME'),
    password: fromEnvNamedBy(values, 'password-env', io, 'WARREN_AMQP_PASSWORD'),
    tls: anyTls ? { ca, cert, key, passphrase, servername, insecure } : undefined,
  };
}

/** Secrets of these settings that are not in a URL: the password and the key's passphrase. */
export function settingSecrets(s: BrokerSettings): string[] {
  // As in secretsOf: a password equal to the user name (guest:guest) is no secret.
  const password = s.password !== s.username ? s.password : undefined;
  return [password, s.tls?.passphrase].filter((v): v is string => v !== undefined && v.length >= 3);
}

/** Reads a PEM file named by a TLS flag, or a usage error naming the flag. */
async function pemFile(path: string, flag: string, env: string, what: string, cwd: string): Promise<Buffer> {
  const full = isAbsolute(path) ? path : resolve(cwd, path);
  let data: Buffer;
  try {
    data = await readFile(full);
  } catch (error) {
    const code = (error as { code?: string }).code;
    throw new UsageError(`${flag} (or ${env}): cannot read ${path}${code === 'ENOENT' ? ': no such file' : code === 'EACCES' ? ': permission denied' : code === 'EISDIR' ? ': it is a directory' : ''}. Give the PEM file of ${what}.`);
  }
  if (!data.includes('-----BEGIN')) throw new UsageError(`${flag} (or ${env}): ${path} holds no PEM block (no '-----BEGIN' line). Give the PEM file of ${what}.`);
  return data;
}

/** The library's connection targets for these settings: URL list, credentials and TLS, checked. */
export async function endpointsOf(s: BrokerSettings, cwd: string): Promise<Endpoints> {
  let tls: TlsOptions | undefined;
  if (s.tls) {
    const t = s.tls;
    tls = {
      ...(t.ca !== undefined ? { ca: await pemFile(t.ca, '--tls-ca', 'WARREN_TLS_CA', 'the CA that signed the broker\'s certificate', cwd) } : {}),
      ...(t.cert !== undefined ? { cert: await pemFile(t.cert, '--tls-cert', 'WARREN_TLS_CERT', 'this client\'s certificate', cwd) } : {}),
      ...(t.key !== undefined ? { key: await pemFile(t.key, '--tls-key', 'WARREN_TLS_KEY', 'the private key of --tls-cert', cwd) } : {}),
      ...(t.passphrase !== undefined ? { passphrase: t.passphrase } : {}),
      ...(t.servername !== undefined ? { servername: t.servername } : {}),
      ...(t.insecure ? { rejectUnauthorized: false } : {}),
    };
    if (t.passphrase !== undefined && t.key === undefined) throw new UsageError('--tls-passphrase-env (or WARREN_TLS_PASSPHRASE) is the passphrase of --tls-key: give --tls-key too.');
  }
  try {
    return resolveEndpoints({ url: s.url, username: s.username, password: s.password, tls }, {});
  } catch (error) {
    if (!(error instanceof InvalidOptionError)) throw error;
    throw new UsageError(inFlagTerms(error.message.replace(/^Invalid option `([^`]+)`/, (_m, o: string) => OPTION_FLAGS[o] ?? `--${o}`)));
  }
}

/** The CLI's flag for each option of the library's connection. */
const OPTION_FLAGS: Record<string, string> = {
  url: '--url (or WARREN_AMQP_URL)',
  WARREN_AMQP_URL: 'WARREN_AMQP_URL',
  username: '--username (or WARREN_AMQP_USERNAME)',
  password: '--password-env (or WARREN_AMQP_PASSWORD)',
  tls: 'The --tls-* flags (or WARREN_TLS_*)',
  'tls.ca': '--tls-ca',
  'tls.cert': '--tls-cert',
  'tls.key': '--tls-key',
  'tls.servername': '--tls-servername',
};

/** Rewrites the library's TLS advice (option names, PEM text) into the CLI's flags. */
export function inFlagTerms(message: string): string {
  return message
    .replace("as tls.ca (its PEM text, e.g. readFileSync('ca.pem')); without tls.ca only", 'with --tls-ca FILE (or WARREN_TLS_CA); without it only')
    .replace('Do not turn tls.rejectUnauthorized off:', 'Do not use --tls-insecure:')
    .replace('Set tls.cert and tls.key (PEM text)', 'Give --tls-cert FILE and --tls-key FILE (or WARREN_TLS_CERT and WARREN_TLS_KEY)')
    .replace('tls.passphrase is missing or wrong', 'the passphrase is missing or wrong (--tls-passphrase-env NAME, or WARREN_TLS_PASSPHRASE)')
    .replace('set both username and password, or neither', 'set both --username and --password-env (or WARREN_AMQP_USERNAME and WARREN_AMQP_PASSWORD), or neither')
    .replace(/\btls\.rejectUnauthorized\b/g, '--tls-insecure')
    .replace(/\btls\.(ca|cert|key|servername)\b/g, '--tls-$1')
    .replace(/\btls\.passphrase\b/g, '--tls-passphrase-env');
}

/** Explains a failed connect in one line, without the password. */
export function describeConnectError(error: unknown, url: string, timeoutMs: number): string {
  const where = redactUrl(url);
  const e = error as { code?: string; message?: string };
  const message = e?.message ?? String(error);
  const handshake = diagnoseHandshake(error, url, FROM.url);
  if (handshake) return inFlagTerms(handshake.message);
  if (e?.code === 'ECONNREFUSED') return `Cannot reach RabbitMQ at ${where}: connection refused. Check that the broker runs and the host and port in --url (or WARREN_AMQP_URL).`;
  if (e?.code === 'ENOTFOUND' || e?.code === 'EAI_AGAIN') return `Cannot reach RabbitMQ at ${where}: host not found. Check the host in --url (or WARREN_AMQP_URL).`;
  if (e?.code === 'ETIMEDOUT' || /ETIMEDOUT|timeout|timed out/i.test(message)) {
    let port = '';
    try {
      port = new URL(url).port;
    } catch {
      // no port to name
    }
    // RabbitMQ's HTTP listeners accept the connection and then wait for a request that never comes.
    if (['15672', '15671', '15692'].includes(port)) {
      return `Cannot talk to RabbitMQ at ${where}: port ${port} is an HTTP port of RabbitMQ (the management API or metrics), not AMQP, so the handshake got no answer within ${timeoutMs} ms. Use the AMQP port in --url (or WARREN_AMQP_URL): 5672 by default, 5671 for amqps://.`;
    }
    return `Cannot reach RabbitMQ at ${where}: no answer within ${timeoutMs} ms. Check the host, and that the port is RabbitMQ's AMQP port (5672 by default; 15672 is the management API's HTTP port), or raise --connect-timeout.`;
  }
  if (/Socket closed abruptly|ECONNRESET|Unexpected close|handshake/i.test(message)) {
    return `Cannot talk to RabbitMQ at ${where}: the connection closed during the handshake. Check that the port is RabbitMQ's AMQP port (5672 by default, 5671 for amqps://; 15672 is the management API's HTTP port).`;
  }
  if (/Expected amqp|Invalid URL|protocol/i.test(message)) return `--url: ${where} is not an AMQP URL (amqp://user:password@host:5672/vhost).`;
  return `Cannot reach RabbitMQ at ${where}: ${message.split('\n')[0]}`;
}

/** Why one node of a list did not answer, in a few words. */
function shortReason(error: unknown, timeoutMs: number): string {
  const e = error as { code?: string; message?: string };
  const message = e?.message ?? String(error);
  if (e?.code === 'ECONNREFUSED') return 'connection refused';
  if (e?.code === 'ENOTFOUND' || e?.code === 'EAI_AGAIN') return 'host not found';
  if (e?.code === 'ETIMEDOUT' || /ETIMEDOUT|timeout|timed out/i.test(message)) return `no answer within ${timeoutMs} ms`;
  if (/Socket closed abruptly|ECONNRESET|Unexpected close/i.test(message)) return 'the connection closed during the handshake';
  return message.split('\n')[0] ?? message;
}

/** The node a CLI connection is on. */
export interface CliNode {
  /** The URL connected to, password masked; with --username, that user. */
  readonly url: string;
  /** `host:port`. */
  readonly address: string;
  /** The server's product and version, e.g. `RabbitMQ 3.10.8`. */
  readonly server: string | undefined;
  readonly tls: boolean;
  /** 1-based position in the list given, and its length. */
  readonly position: number;
  readonly of: number;
}

const nodes = new WeakMap<amqp.ChannelModel, CliNode>();

/** Where a connection opened by {@link connect} went. */
export function nodeOfConnection(model: amqp.ChannelModel): CliNode | undefined {
  return nodes.get(model);
}

/** A node for one line: `amqp://guest:***@127.0.0.1:5702/ (RabbitMQ 3.10.8, node 2 of 3 in --url)`. */
export function describeNode(node: CliNode): string {
  const extra = [node.server, node.of > 1 ? `node ${node.position} of ${node.of} in --url` : undefined].filter((x) => x !== undefined);
  return `${node.url}${extra.length ? ` (${extra.join(', ')})` : ''}`;
}

/** The URL as messages show it: with credentials given apart, their user and no password. */
function shownUrl(url: string, credentials: Endpoints['credentials']): string {
  if (!credentials) return url;
  const u = new URL(url);
  u.username = encodeURIComponent(credentials.username);
  u.password = '';
  return u.toString();
}

/**
 * Opens one AMQP connection (Nagle off) on the first node of the list that answers,
 * mapping failures to exit 3 with one clear line. A refusal that no other node would
 * answer differently (credentials, vhost, TLS, not AMQP) stops at once, as the library's
 * connection does. `note` hears about nodes that did not answer and an unverified TLS.
 */
export async function connect(s: BrokerSettings, cwd = process.cwd(), note: (line: string) => void = () => undefined): Promise<amqp.ChannelModel> {
  for (const part of s.url.split(',').map((u) => u.trim()).filter((u) => u.includes('://'))) {
    let parsed: URL;
    try {
      parsed = new URL(part);
    } catch {
      throw new UsageError(`--url: ${redactUrl(part)} is not a URL (amqp://user:password@host:5672/vhost).`);
    }
    if (parsed.protocol !== 'amqp:' && parsed.protocol !== 'amqps:') throw new UsageError(`--url: ${redactUrl(part)} is not an AMQP URL (amqp://user:password@host:5672/vhost).`);
  }
  const { urls, credentials, tls } = await endpointsOf(s, cwd);
  if (tls['rejectUnauthorized'] === false) note('warning: --tls-insecure: the broker\'s TLS certificate is not verified; anyone on the path can read the password and the messages.');
  const failed: string[] = [];
  for (const [i, url] of urls.entries()) {
    let model: amqp.ChannelModel;
    try {
      model = await amqp.connect(url, {
        noDelay: true,
        timeout: s.connectTimeoutMs,
        clientProperties: { connection_name: 'warren-cli' },
        ...(url.startsWith('amqps:') ? tls : {}),
        ...(credentials ? { credentials: amqp.credentials.plain(credentials.username, credentials.password) } : {}),
      });
      coalesceWrites(model);
    } catch (error) {
      const shown = shownUrl(url, credentials);
      let refused = diagnoseHandshake(error, shown, FROM.url);
      if (refused?.reason === 'credentials' && credentials) refused = diagnoseHandshake(error, shown, FROM.credentials);
      if (refused) throw new BrokerHandshakeError(redactUrl(shown), refused.reason, inFlagTerms(refused.message), { cause: error });
      if (urls.length === 1) throw new CliError(describeConnectError(error, url, s.connectTimeoutMs), EXIT.unreachable);
      const reason = `${redactUrl(shown)} (${shortReason(error, s.connectTimeoutMs)})`;
      failed.push(reason);
      if (i < urls.length - 1) note(`note: ${reason}; trying the next node in --url`);
      continue;
    }
    // A connection error after this point is reported by the operation that hits it.
    model.on('error', () => undefined);
    const props = (model as unknown as { connection?: { serverProperties?: Record<string, unknown> } }).connection?.serverProperties ?? {};
    const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : Buffer.isBuffer(v) ? v.toString('utf8') : undefined);
    const server = [text(props['product']), text(props['version'])].filter((x) => x !== undefined).join(' ');
    const u = new URL(url);
    nodes.set(model, {
      url: redactUrl(shownUrl(url, credentials)),
      address: `${u.hostname}:${u.port || (u.protocol === 'amqps:' ? '5671' : '5672')}`,
      server: server || undefined,
      tls: u.protocol === 'amqps:',
      position: i + 1,
      of: urls.length,
    });
    return model;
  }
  throw new CliError(
    `Cannot reach RabbitMQ at any of the ${urls.length} nodes in --url (or WARREN_AMQP_URL): ${failed.join('; ')}. Check that the brokers run and the hosts and ports in the list.`,
    EXIT.unreachable,
  );
}

/**
 * The management API client for these settings, on the AMQP URL's virtual host. Several
 * URLs (a cluster's nodes, separated by commas) give a client that goes on to the next
 * node when one does not answer; `note` hears about those nodes.
 */
export function management(s: BrokerSettings, note: (line: string) => void = () => undefined): ManagementClient {
  let vhost = '/';
  try {
    const path = new URL(s.url.split(',')[0]!.trim()).pathname;
    if (path.length > 1) vhost = decodeURIComponent(path.slice(1));
  } catch {
    // connect() reports a bad URL
  }
  const timeoutMs = Math.min(s.connectTimeoutMs, 5000);
  const urls = managementUrls(s.managementUrl);
  if (urls.length > 1) return new ClusterManagementClient(urls, vhost, timeoutMs, note);
  return new ManagementClient({ url: urls[0] as string, vhost, timeoutMs });
}

/** Where the retry table lives, from `--db` (or WARREN_DB), `--table-prefix` and `--schema`. */
export type DatabaseSettings =
  | {
      readonly backend: 'sqlite';
      /** Where the database was given: `--db` or `WARREN_DB`. */
      readonly from: string;
      /** Absolute path of the database file. */
      readonly filename: string;
      /** How messages name the database. */
      readonly shown: string;
      readonly tablePrefix: string;
    }
  | {
      readonly backend: 'postgres';
      readonly from: string;
      readonly connectionString: string;
      /** The URL with its password masked. */
      readonly shown: string;
      readonly tablePrefix: string;
      readonly schema: string | undefined;
      readonly connectTimeoutMs: number;
    };

/** The store's default table prefix; the CLI passes it explicitly so messages can name it. */
export const DEFAULT_TABLE_PREFIX = 'warren_';

const DB_EXAMPLES = '--db sqlite:data/warren.db, or --db postgres://app@db.internal:5432/shop';

/** A database URL safe to print: the password masked, in the user part and in a `password` parameter. */
export function redactDbUrl(url: string): string {
  return redactUrl(url);
}

/**
 * Reads the database flags: `--db` (or WARREN_DB) as `sqlite:PATH` (relative to `cwd`),
 * a path ending in `.db`, `.sqlite` or `.sqlite3`, or a `postgres://` URL.
 */
export function databaseSettings(values: ParsedValues, io: Io, connectTimeoutMs: number): DatabaseSettings {
  const flag = typeof values['db'] === 'string' ? values['db'] : undefined;
  const given = flag ?? io.env['WARREN_DB'];
  const from = flag !== undefined ? '--db' : 'WARREN_DB';
  if (given === undefined || given.trim() === '') {
    throw new UsageError(`No database given: pass --db URL or set WARREN_DB to the database the application's store uses, e.g. ${DB_EXAMPLES}.`);
  }
  const prefix = typeof values['table-prefix'] === 'string' ? values['table-prefix'] : DEFAULT_TABLE_PREFIX;
  const schema = typeof values['schema'] === 'string' ? values['schema'] : undefined;
  const text = given.trim();
  if (/^postgres(ql)?:\/\//i.test(text)) {
    try {
      new URL(text);
    } catch {
      throw new UsageError(`${from}: ${redactDbUrl(text)} is not a URL (postgres://user:password@host:5432/database).`);
    }
    return { backend: 'postgres', from, connectionString: text, shown: redactDbUrl(text), tablePrefix: prefix, schema, connectTimeoutMs };
  }
  let path: string | undefined;
  const sqlite = /^sqlite:(?:\/\/)?(.*)$/i.exec(text);
  if (sqlite) path = sqlite[1];
  else if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(text) && /\.(db|sqlite3?)$/i.test(text)) path = text;
  if (path === undefined) {
    throw new UsageError(`${from}: ${redactDbUrl(text)} is neither sqlite:PATH, a path ending in .db or .sqlite, nor a postgres:// URL. Examples: ${DB_EXAMPLES}.`);
  }
  if (path === '') throw new UsageError(`${from}: sqlite: needs a file path, e.g. sqlite:data/warren.db.`);
  if (schema !== undefined) throw new UsageError('--schema is for PostgreSQL only; a SQLite database has no schemas (use --table-prefix).');
  const filename = isAbsolute(path) ? path : resolve(io.cwd, path);
  return { backend: 'sqlite', from, filename, shown: `sqlite:${path}`, tablePrefix: prefix };
}

/** Rewrites a store option error to name the flag it came from. */
function flagError(error: unknown): unknown {
  if (!(error instanceof InvalidOptionError)) return error;
  const flag = error.option === 'tablePrefix' ? '--table-prefix' : error.option === 'schema' ? '--schema' : undefined;
  return flag === undefined ? error : new UsageError(error.message.replace(/^Invalid option `[^`]+`/, flag));
}

/**
 * Opens the application's store on these settings without migrating it (the CLI never
 * changes a schema) and without its pruning schedule. Loads only the backend it needs.
 */
export async function openDatabase(s: DatabaseSettings): Promise<Store<unknown>> {
  if (s.backend === 'sqlite') {
    try {
      const st = await stat(s.filename);
      if (!st.isFile()) throw new Error('not a file');
    } catch {
      // Opening would create an empty file: refuse instead, the path is most likely wrong.
      throw new UsageError(`${s.from}: there is no SQLite database at ${s.filename} (from ${s.shown}). Give the file the application's store uses; a relative path is taken from the current directory.`);
    }
    const { sqliteStore } = await import('../store/sqlite/index.js');
    try {
      return sqliteStore({ filename: s.filename, tablePrefix: s.tablePrefix, migrate: false, pruneIntervalMs: 0 }) as unknown as Store<unknown>;
    } catch (error) {
      throw flagError(error);
    }
  }
  const { postgresStore } = await import('../store/postgres/index.js');
  try {
    return postgresStore({
      connectionString: s.connectionString,
      tablePrefix: s.tablePrefix,
      ...(s.schema === undefined ? {} : { schema: s.schema }),
      migrate: false,
      pruneIntervalMs: 0,
      poolSize: 2,
      connectTimeoutMs: s.connectTimeoutMs,
    }) as unknown as Store<unknown>;
  } catch (error) {
    throw flagError(error);
  }
}

/** Where warren's tables were looked for, in words. */
function tablesWhere(s: DatabaseSettings): string {
  return `with prefix ${s.tablePrefix}${s.backend === 'postgres' && s.schema !== undefined ? ` in schema ${s.schema}` : ''}`;
}

/**
 * Explains a database failure in one line with the exit code it deserves, or returns
 * undefined for an error that is not about reaching or reading the database.
 */
export function describeDatabaseError(error: unknown, s: DatabaseSettings): CliError | undefined {
  if (error instanceof StoreSchemaError) {
    const check = s.backend === 'postgres' ? '--table-prefix and --schema' : '--table-prefix';
    if (error.applied === 0) {
      return new CliError(
        `${s.shown} has no warren tables ${tablesWhere(s)}. Start the application once (its store creates them on first use) or run its migrate step (\`await store.migrate()\`), then try again; or check ${check}.`,
        EXIT.failed,
      );
    }
    if (error.applied < error.expected) {
      return new CliError(
        `warren's tables in ${s.shown} (${tablesWhere(s)}) are at migration ${error.applied}; this warren needs ${error.expected}. Start the application on this version of warren (its store migrates on first use) or run its migrate step (\`await store.migrate()\`), then try again.`,
        EXIT.failed,
      );
    }
    return new CliError(`warren's tables in ${s.shown} are at migration ${error.applied}, newer than this warren knows (${error.expected}). Run the warren CLI of the version the application uses.`, EXIT.failed);
  }
  if (error instanceof StoreUnavailableError) {
    const detail = error.message.replace(/^The database is unavailable: /, '').replace(/\.$/, '');
    return new CliError(`Cannot reach the database at ${s.shown} (${s.from}): ${detail}.`, EXIT.unreachable);
  }
  const e = error as { code?: unknown; message?: unknown };
  const code = typeof e?.code === 'string' ? e.code : undefined;
  const message = typeof e?.message === 'string' ? e.message.split('\n')[0] : '';
  if (s.backend === 'postgres' && code !== undefined && /^28/.test(code)) {
    let user = '';
    try {
      user = decodeURIComponent(new URL(s.connectionString).username);
    } catch {
      // keep it unnamed
    }
    return new CliError(`PostgreSQL at ${s.shown} refused the credentials${user ? ` of user '${user}'` : ''} (${code}: ${message}). Check the user and password in ${s.from}.`, EXIT.unreachable);
  }
  if (s.backend === 'postgres' && code === '3D000') return new CliError(`PostgreSQL at ${s.shown}: ${message} (3D000). Check the database name in ${s.from}.`, EXIT.unreachable);
  return undefined;
}
