import { stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { redactUrl } from '../connection/url.js';
import { InvalidOptionError } from '../errors.js';
import { ManagementClient } from '../management/client.js';
import { defineTopology, type Topology, type TopologyOptions } from '../topology/declaration.js';
import { CliError, EXIT, UsageError } from './errors.js';

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

/** Secrets that must never be printed: the passwords of both URLs. */
export function secretsOf(...urls: readonly (string | undefined)[]): string[] {
  const out: string[] = [];
  for (const url of urls) {
    if (!url) continue;
    try {
      const u = new URL(url);
      // A password equal to the user name (guest:guest) is no secret, and masking it would hide the user.
      if (u.password && u.password !== u.username) out.push(u.password, decodeURIComponent(u.password));
    } catch {
      const m = /\/\/[^:@/]*:([^@/]*)@/.exec(url);
      if (m?.[1]) out.push(m[1]);
    }
  }
  return [...new Set(out)].filter((s) => s.length >= 3);
}

/** Replaces every secret in `text` with `***`. */
export function scrub(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join('***');
  // Any URL with credentials that slipped through.
  return out.replace(/([a-z][a-z0-9+.-]*:\/\/[^:@/\s]+):[^@/\s]+@/gi, '$1:***@');
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

/** Connection settings from flags, then the environment, then defaults. */
export interface BrokerSettings {
  readonly url: string;
  readonly managementUrl: string;
  readonly connectTimeoutMs: number;
}

/** Explains a failed connect in one line, without the password. */
export function describeConnectError(error: unknown, url: string, timeoutMs: number): string {
  const where = redactUrl(url);
  const e = error as { code?: string; message?: string };
  const message = e?.message ?? String(error);
  if (e?.code === 'ECONNREFUSED') return `Cannot reach RabbitMQ at ${where}: connection refused. Check that the broker runs and the host and port in --url (or WARREN_AMQP_URL).`;
  if (e?.code === 'ENOTFOUND' || e?.code === 'EAI_AGAIN') return `Cannot reach RabbitMQ at ${where}: host not found. Check the host in --url (or WARREN_AMQP_URL).`;
  if (e?.code === 'ETIMEDOUT' || /ETIMEDOUT|timeout|timed out/i.test(message)) return `Cannot reach RabbitMQ at ${where}: no answer within ${timeoutMs} ms. Check the host and port, or raise --connect-timeout.`;
  if (/ACCESS.REFUSED|403/.test(message)) {
    let user = 'guest';
    try {
      user = decodeURIComponent(new URL(url).username) || 'guest';
    } catch {
      // keep the default
    }
    return `RabbitMQ at ${where} refused the credentials of user '${user}' (ACCESS_REFUSED). Check the user and password in --url (or WARREN_AMQP_URL).`;
  }
  if (/NOT_ALLOWED|vhost/i.test(message)) return `RabbitMQ at ${where} refused the virtual host (${message.replace(/^.*?NOT_ALLOWED - /, '').split('"')[0]?.trim() ?? 'NOT_ALLOWED'}). Check the vhost in --url.`;
  if (/Socket closed abruptly|ECONNRESET|Unexpected close|handshake/i.test(message)) return `Cannot talk to RabbitMQ at ${where}: the connection closed during the handshake (is this an AMQP port?).`;
  if (/Expected amqp|Invalid URL|protocol/i.test(message)) return `--url: ${where} is not an AMQP URL (amqp://user:password@host:5672/vhost).`;
  return `Cannot reach RabbitMQ at ${where}: ${message.split('\n')[0]}`;
}

/** Opens one AMQP connection (Nagle off), mapping failures to exit 3 with one clear line. */
export async function connect(s: BrokerSettings): Promise<amqp.ChannelModel> {
  let parsed: URL;
  try {
    parsed = new URL(s.url);
  } catch {
    throw new UsageError(`--url: ${redactUrl(s.url)} is not a URL (amqp://user:password@host:5672/vhost).`);
  }
  if (parsed.protocol !== 'amqp:' && parsed.protocol !== 'amqps:') throw new UsageError(`--url: ${redactUrl(s.url)} is not an AMQP URL (amqp://user:password@host:5672/vhost).`);
  let model: amqp.ChannelModel;
  try {
    model = await amqp.connect(s.url, { noDelay: true, timeout: s.connectTimeoutMs, clientProperties: { connection_name: 'warren-cli' } });
  } catch (error) {
    throw new CliError(describeConnectError(error, s.url, s.connectTimeoutMs), EXIT.unreachable);
  }
  // A connection error after this point is reported by the operation that hits it.
  model.on('error', () => undefined);
  return model;
}

/** The management API client for these settings, on the AMQP URL's virtual host. */
export function management(s: BrokerSettings): ManagementClient {
  let vhost = '/';
  try {
    const path = new URL(s.url).pathname;
    if (path.length > 1) vhost = decodeURIComponent(path.slice(1));
  } catch {
    // connect() reports a bad URL
  }
  try {
    return new ManagementClient({ url: s.managementUrl, vhost, timeoutMs: Math.min(s.connectTimeoutMs, 5000) });
  } catch {
    throw new UsageError(`--management-url: ${redactUrl(s.managementUrl)} is not a URL (http://user:password@host:15672).`);
  }
}
