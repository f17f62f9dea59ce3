/**
 * Where a connection may go and how: the broker URLs (one, or a cluster's nodes in the
 * order to try them), the credentials and the TLS settings, read once from the options
 * and the environment. Pure: nothing here opens a socket.
 */
import { InvalidOptionError } from '../errors.js';
import { redactUrl } from './url.js';

/**
 * TLS settings for `amqps://` URLs, passed to Node's `tls.connect`. The server's
 * certificate is checked against `ca` (or Node's bundled public CAs when `ca` is not
 * given) and against the host name (`servername`, or the URL's host).
 */
export interface TlsOptions {
  /**
   * The certificate authorities to trust, PEM: the CA that signed the broker's certificate.
   * Read the file yourself: `ca: readFileSync('/etc/ssl/rabbit/ca.pem')`.
   * @default Node's bundled public CAs
   */
  ca?: string | Buffer | ReadonlyArray<string | Buffer>;
  /**
   * This client's certificate chain, PEM, for a broker that asks for one
   * (`ssl_options.verify = verify_peer`).
   * @default none
   */
  cert?: string | Buffer;
  /** The private key of `cert`, PEM. @default none */
  key?: string | Buffer;
  /** The passphrase of an encrypted `key`. @default none */
  passphrase?: string;
  /**
   * The name the broker's certificate must carry (and the SNI name sent). Set it when
   * the URL's host is an address or an alias that is not in the certificate.
   * @default the URL's host, when it is a name; an IP address is checked as an address
   */
  servername?: string;
  /**
   * Refuse a broker whose certificate does not verify. Turning this off lets anyone
   * on the path read the password and the messages; warren logs a warning when it is off.
   * @default true
   */
  rejectUnauthorized?: boolean;
}

/** What {@link resolveEndpoints} reads. */
export interface EndpointOptions {
  url?: string | readonly string[] | undefined;
  username?: string | undefined;
  password?: string | undefined;
  tls?: TlsOptions | undefined;
}

/** The resolved, validated connection targets. */
export interface Endpoints {
  /** Every URL in the order to try them; credentials as given (redact before printing). */
  readonly urls: readonly string[];
  /** User and password given apart from the URL, which then win over the URL's. */
  readonly credentials: { readonly username: string; readonly password: string } | undefined;
  /** Socket options for `amqps://` URLs (empty when none is amqps). */
  readonly tls: Readonly<Record<string, unknown>>;
}

/** The broker used when neither the options nor WARREN_AMQP_URL name one. */
export const DEFAULT_AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';

/**
 * Reads the URL option (a string, a comma-separated list, or an array), or else
 * `WARREN_AMQP_URL` (a URL or a comma-separated list), or else the local broker.
 * Every URL must be `amqp://` or `amqps://`; `tls` needs at least one `amqps://`.
 */
export function resolveEndpoints(options: EndpointOptions, env: NodeJS.ProcessEnv = process.env): Endpoints {
  const given = options.url ?? env['WARREN_AMQP_URL'] ?? DEFAULT_AMQP_URL;
  const option = options.url === undefined && env['WARREN_AMQP_URL'] !== undefined ? 'WARREN_AMQP_URL' : 'url';
  const entries = (typeof given === 'string' ? given.split(',') : [...given]).map((u) => u.trim()).filter((u) => u !== '');
  if (entries.length === 0) throw new InvalidOptionError(option, 'no URL given; expected amqp://user:password@host:5672/vhost, or a list of them');
  const list = withHosts(entries, option);
  for (const url of list) {
    let protocol: string;
    try {
      protocol = new URL(url).protocol;
    } catch {
      throw new InvalidOptionError(option, `${redactUrl(url)} is not a URL; expected amqp://user:password@host:5672/vhost (amqps:// for TLS)`);
    }
    if (protocol !== 'amqp:' && protocol !== 'amqps:') throw new InvalidOptionError(option, `${redactUrl(url)} is not an AMQP URL; use amqp:// (or amqps:// for TLS)`);
  }
  const { username, password, tls } = options;
  if ((username === undefined) !== (password === undefined)) {
    throw new InvalidOptionError(username === undefined ? 'username' : 'password', 'set both username and password, or neither (the URL\'s user and password are used then)');
  }
  if (tls !== undefined && !list.some((u) => u.startsWith('amqps:'))) {
    throw new InvalidOptionError('tls', `TLS options are set but no URL is amqps:// (${list.map(redactUrl).join(', ')}); use amqps://host:5671`);
  }
  return Object.freeze({
    urls: Object.freeze(list),
    credentials: username !== undefined && password !== undefined ? Object.freeze({ username, password }) : undefined,
    tls: Object.freeze(tlsSocketOptions(tls ?? {})),
  });
}

/**
 * Entries after a full URL may be a bare `host` or `host:port`: each takes the scheme,
 * credentials, vhost and query of the first full URL, e.g.
 * `amqps://app:secret@rabbit-1:5671/orders,rabbit-2,rabbit-3:5671`.
 */
function withHosts(entries: readonly string[], option: string): string[] {
  const base = entries.find((e) => e.includes('://'));
  return entries.map((entry) => {
    if (entry.includes('://')) return entry;
    const m = /^(\[[^\]]+\]|[^:/@\s]+)(?::(\d+))?$/.exec(entry);
    if (!m) throw new InvalidOptionError(option, `'${redactUrl(entry)}' is neither a URL nor host[:port]; expected amqp://user:password@host:5672/vhost (amqps:// for TLS)`);
    if (base === undefined) throw new InvalidOptionError(option, `'${entry}' is a host with no URL to take the scheme and credentials from; start the list with a full URL (amqp://user:password@${entry}/vhost)`);
    const u = new URL(base);
    u.hostname = m[1]!;
    u.port = m[2] ?? '';
    return u.toString();
  });
}

function tlsSocketOptions(tls: TlsOptions): Record<string, unknown> {
  const out: Record<string, unknown> = { rejectUnauthorized: tls.rejectUnauthorized ?? true };
  if (tls.rejectUnauthorized !== undefined && typeof tls.rejectUnauthorized !== 'boolean') throw new InvalidOptionError('tls.rejectUnauthorized', `expected true or false, got ${String(tls.rejectUnauthorized)}`);
  if (tls.ca !== undefined) {
    const cas = Array.isArray(tls.ca) ? [...(tls.ca as Array<string | Buffer>)] : [tls.ca as string | Buffer];
    for (const ca of cas) pem(ca, 'tls.ca');
    out['ca'] = cas;
  }
  if (tls.cert !== undefined) out['cert'] = pem(tls.cert, 'tls.cert');
  if (tls.key !== undefined) out['key'] = pem(tls.key, 'tls.key');
  if ((tls.cert === undefined) !== (tls.key === undefined)) throw new InvalidOptionError(tls.cert === undefined ? 'tls.cert' : 'tls.key', 'a client certificate needs both cert and key (PEM)');
  if (tls.passphrase !== undefined) out['passphrase'] = tls.passphrase;
  if (tls.servername !== undefined) {
    if (typeof tls.servername !== 'string' || tls.servername === '') throw new InvalidOptionError('tls.servername', 'expected a host name, e.g. rabbit.internal');
    out['servername'] = tls.servername;
  }
  return out;
}

/** Checks that a certificate or key option holds PEM text, not a file name. */
function pem(value: string | Buffer, option: string): string | Buffer {
  const text = typeof value === 'string' ? value : Buffer.isBuffer(value) ? value.subarray(0, 64).toString('latin1') : undefined;
  if (text === undefined) throw new InvalidOptionError(option, `expected PEM text (a string or a Buffer), got ${typeof value}`);
  if (!text.includes('-----BEGIN')) {
    const shown = typeof value === 'string' && value.length < 200 ? ` ('${value}')` : '';
    throw new InvalidOptionError(option, `expected PEM text${shown}; it holds no '-----BEGIN' line. Pass the file's contents, e.g. readFileSync('${option === 'tls.ca' ? 'ca' : option === 'tls.cert' ? 'client' : 'client.key'}.pem'), not its path`);
  }
  return value;
}

/** The URL to try after `index`, wrapping around. */
export function nextIndex(index: number, count: number): number {
  return (index + 1) % count;
}
