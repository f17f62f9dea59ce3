import { parseArgs } from 'node:util';
import { UsageError } from './errors.js';

/** A flag as `node:util` parseArgs takes it, with its help line. */
export interface FlagSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  readonly multiple?: boolean;
  /** Shown in help, e.g. `--limit N`. */
  readonly label: string;
  readonly help: string;
}

export type FlagSpecs = Readonly<Record<string, FlagSpec>>;

/** Flags every command takes. */
export const GLOBAL_FLAGS = {
  topology: { type: 'string', short: 't', label: '--topology PATH', help: 'module that exports the topology (`topology` or default export); env WARREN_TOPOLOGY' },
  url: { type: 'string', label: '--url URL[,URL...]', help: 'AMQP URL, or a cluster\'s nodes separated by commas, tried in order (host:port takes the first URL\'s user and vhost); env WARREN_AMQP_URL; default amqp://guest:guest@127.0.0.1:5672' },
  username: { type: 'string', label: '--username NAME', help: 'AMQP user, kept out of the URL (with --password-env); env WARREN_AMQP_USERNAME' },
  'password-env': { type: 'string', label: '--password-env NAME', help: 'the environment variable that holds the AMQP password (never printed); default WARREN_AMQP_PASSWORD' },
  'tls-ca': { type: 'string', label: '--tls-ca FILE', help: 'PEM file of the CA that signed the broker\'s certificate (amqps://); env WARREN_TLS_CA; default Node\'s public CAs' },
  'tls-cert': { type: 'string', label: '--tls-cert FILE', help: 'PEM file of this client\'s certificate, for a broker that asks for one; env WARREN_TLS_CERT' },
  'tls-key': { type: 'string', label: '--tls-key FILE', help: 'PEM file of the private key of --tls-cert; env WARREN_TLS_KEY' },
  'tls-passphrase-env': { type: 'string', label: '--tls-passphrase-env NAME', help: 'the environment variable that holds the passphrase of --tls-key; default WARREN_TLS_PASSPHRASE' },
  'tls-servername': { type: 'string', label: '--tls-servername NAME', help: 'the name the broker\'s certificate must carry, when the URL\'s host is not in it; env WARREN_TLS_SERVERNAME' },
  'tls-insecure': { type: 'boolean', label: '--tls-insecure', help: 'do not verify the broker\'s certificate (anyone on the path can read the password and the messages)' },
  'management-url': { type: 'string', label: '--management-url URL[,URL...]', help: 'management API URL, or a cluster\'s nodes separated by commas, tried in order (host:port takes the first URL\'s user and password); env WARREN_MANAGEMENT_URL; default http://guest:guest@127.0.0.1:15672' },
  'connect-timeout': { type: 'string', label: '--connect-timeout DURATION', help: 'how long to wait for the broker (each node of --url, and of --management-url up to 5s) or the database (e.g. 5s, 500ms); default 5s' },
  json: { type: 'boolean', label: '--json', help: 'print JSON on stdout, for scripts' },
  help: { type: 'boolean', short: 'h', label: '--help, -h', help: 'show help' },
} as const satisfies FlagSpecs;

/** Flags that select parked messages. */
export const FILTER_FLAGS = {
  error: { type: 'string', label: '--error TEXT|/RE/', help: 'error message contains TEXT (any case), or matches /RE/ or /RE/i (a linear-time subset of regular expressions; see docs/cli.md)' },
  'error-class': { type: 'string', label: '--error-class NAME', help: 'error class is NAME, e.g. HttpError' },
  since: { type: 'string', label: '--since TIME', help: 'failed at or after TIME: 2026-03-01, 2026-03-01T12:00Z, or 30m / 2h / 7d ago' },
  until: { type: 'string', label: '--until TIME', help: 'failed before TIME (same forms)' },
  id: { type: 'string', multiple: true, label: '--id ID[,ID]', help: 'message id is one of these (repeatable)' },
  'routing-key': { type: 'string', label: '--routing-key PATTERN', help: 'original routing key matches PATTERN (topic syntax: * one word, # any)' },
  fingerprint: { type: 'string', label: '--fingerprint TEXT', help: 'failure fingerprint is exactly TEXT (one group of `parked list --group`)' },
} as const satisfies FlagSpecs;

/** Flags that say which database holds the retry table. */
export const DB_FLAGS = {
  db: { type: 'string', label: '--db URL', help: 'the application\'s database: sqlite:PATH (or a path ending in .db, .sqlite) or postgres://user:password@host/db; env WARREN_DB' },
  'table-prefix': { type: 'string', label: '--table-prefix PREFIX', help: "prefix of warren's table names, as the store's tablePrefix; default warren_" },
  schema: { type: 'string', label: '--schema NAME', help: "PostgreSQL schema of warren's tables, as the store's schema; default the connection's search_path" },
} as const satisfies FlagSpecs;

/** Flags that select retry-table rows; a row must match all that are given. */
export const RETRY_FILTER_FLAGS = {
  consumer: { type: 'string', label: '--consumer NAME', help: 'rows of this consumer' },
  dependency: { type: 'string', label: '--dependency NAME', help: 'rows waiting for this dependency, e.g. carrier' },
  tenant: { type: 'string', label: '--tenant ID', help: 'rows of this tenant' },
  'error-class': { type: 'string', label: '--error-class NAME', help: 'rows whose last error class is NAME (exact), e.g. CarrierDownError' },
  id: { type: 'string', multiple: true, label: '--id ID[,ID]', help: 'rows with these row ids (repeatable), as `warren retry list` shows them' },
  paused: { type: 'boolean', label: '--paused', help: 'only paused rows' },
  unpaused: { type: 'boolean', label: '--unpaused', help: 'only rows that are not paused' },
  due: { type: 'boolean', label: '--due', help: 'only rows whose next attempt has come (paused or not)' },
  'not-due': { type: 'boolean', label: '--not-due', help: 'only rows whose next attempt is later, or not set' },
} as const satisfies FlagSpecs;

export const MAX_HELD_FLAG = {
  'max-held': { type: 'string', label: '--max-held N', help: 'hold at most N messages that stay parked while scanning (classic queues); default 10000' },
} as const satisfies FlagSpecs;

export type ParsedValues = Record<string, string | boolean | string[] | undefined>;

/** The result of parsing: flag values and positional arguments. */
export interface Parsed {
  readonly values: ParsedValues;
  readonly positionals: readonly string[];
}

function toParseArgsOptions(specs: FlagSpecs) {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {};
  for (const [name, s] of Object.entries(specs)) {
    options[name] = { type: s.type, ...(s.short ? { short: s.short } : {}), ...(s.multiple ? { multiple: true } : {}) };
  }
  return options;
}

/** Positional words, with every flag of `specs` skipped together with its value. Never throws. */
export function positionalsOf(argv: readonly string[], specs: FlagSpecs): string[] {
  const { positionals } = parseArgs({ args: [...argv], options: toParseArgsOptions(specs), strict: false, allowPositionals: true });
  return positionals;
}

/** Parses strictly: an unknown flag or a missing value is a usage error naming the flag. */
export function parseStrict(argv: readonly string[], specs: FlagSpecs, command: string): Parsed {
  try {
    const { values, positionals } = parseArgs({ args: [...argv], options: toParseArgsOptions(specs), strict: true, allowPositionals: true });
    return { values: values as ParsedValues, positionals };
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const code = (error as { code?: string }).code;
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
      const flag = /'([^']+)'/.exec(message)?.[1] ?? message;
      throw new UsageError(`Unknown flag ${flag} for \`warren ${command}\`. See \`warren ${command} --help\`.`);
    }
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      const flag = /--?[\w-]+/.exec(message)?.[0] ?? 'a flag';
      const problem = /argument missing/.test(message) ? 'needs a value' : /does not take an argument/.test(message) ? 'takes no value' : message;
      throw new UsageError(`${flag} ${problem}. See \`warren ${command} --help\`.`);
    }
    throw new UsageError(`${message} See \`warren ${command} --help\`.`);
  }
}

/** A string flag's value, or undefined. */
export function str(values: ParsedValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

/** A repeatable string flag's values. */
export function list(values: ParsedValues, name: string): string[] | undefined {
  const v = values[name];
  if (Array.isArray(v)) return v;
  return typeof v === 'string' ? [v] : undefined;
}

/** A whole number of at least `min`, or a usage error naming the flag. */
export function wholeNumber(values: ParsedValues, name: string, min = 1, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const raw = str(values, name);
  if (raw === undefined) return undefined;
  if (!/^\s*\d+\s*$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new UsageError(`--${name}: ${JSON.stringify(raw)} is not a whole number${max === Number.MAX_SAFE_INTEGER ? ` of at least ${min}` : ` from ${min} to ${max}`}.`);
  }
  return Number(raw);
}

/** A number above 0, or a usage error naming the flag. */
export function positiveNumber(values: ParsedValues, name: string, max: number): number | undefined {
  const raw = str(values, name);
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n) || n <= 0 || n > max) throw new UsageError(`--${name}: ${JSON.stringify(raw)} is not a number above 0 and at most ${max}.`);
  return n;
}

const DURATION_MS = { ms: 1, s: 1000, m: 60_000 } as const;

/** A duration such as `5s`, `500ms`, `1m` or plain milliseconds, or a usage error naming the flag. */
export function duration(values: ParsedValues, name: string): number | undefined {
  const raw = str(values, name);
  if (raw === undefined) return undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$/.exec(raw);
  const ms = m ? Math.round(Number(m[1]) * DURATION_MS[(m[2] ?? 'ms') as keyof typeof DURATION_MS]) : NaN;
  if (!Number.isFinite(ms) || ms < 1 || ms > 600_000) throw new UsageError(`--${name}: ${JSON.stringify(raw)} is not a duration from 1ms to 10m (e.g. 5s, 500ms).`);
  return ms;
}
