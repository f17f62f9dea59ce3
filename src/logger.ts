import { InvalidOptionError } from './errors.js';

/**
 * The logger warren writes to, message first: `warn(message, fields)`. Every `logger`
 * option takes one of these, and also, through {@link toLogger}:
 *
 * - pino (and its children), detected by `levels.values`, `bindings()` and `child()`,
 *   called object first, `warn(fields, message)`, so the fields land in the JSON line;
 * - bunyan, detected by `levels()` and `streams`, called object first the same way;
 * - `console`, and any logger whose methods take `(message, fields)` (winston, log4js).
 *
 * An object-first logger that is not detected (a wrapper around pino, say) goes through
 * {@link pinoLogger} (or {@link objectFirstLogger}) explicitly: called message first,
 * pino reads the fields object as a format argument and drops it.
 *
 * @example
 * import pino from 'pino';
 * const warren = await Warren.connect({ url, topology, logger: pino() });
 */
export interface Logger {
  /** Detail for whoever is chasing a problem. */
  debug(message: string, fields?: Record<string, unknown>): void;
  /** Something worth knowing happened. */
  info(message: string, fields?: Record<string, unknown>): void;
  /** Something went wrong and warren coped (a retry, a reconnect). */
  warn(message: string, fields?: Record<string, unknown>): void;
  /** Something went wrong that a person should look at. */
  error(message: string, fields?: Record<string, unknown>): void;
}

/** A logger whose methods take the fields first: `warn(fields, message)` (pino, bunyan). */
export interface ObjectFirstLogger {
  /** Detail for whoever is chasing a problem. */
  debug(fields: Record<string, unknown>, message: string): void;
  /** Something worth knowing happened. */
  info(fields: Record<string, unknown>, message: string): void;
  /** Something went wrong and warren coped (a retry, a reconnect). */
  warn(fields: Record<string, unknown>, message: string): void;
  /** Something went wrong that a person should look at. */
  error(fields: Record<string, unknown>, message: string): void;
}

const LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/** Loggers already in warren's shape: {@link toLogger} returns them as they are. */
const normalized = new WeakSet<object>();

function mark(logger: Logger): Logger {
  normalized.add(logger);
  return Object.freeze(logger);
}

/** Drops everything: the default, so a library stays quiet unless asked. */
export const silentLogger: Logger = mark({ debug() {}, info() {}, warn() {}, error() {} });

/** Writes one line per entry to the console, for demos and scripts. */
export function consoleLogger(level: 'debug' | 'info' | 'warn' | 'error' = 'info'): Logger {
  const min = LEVELS.indexOf(level);
  const write = (at: (typeof LEVELS)[number]) => (message: string, fields?: Record<string, unknown>) => {
    if (LEVELS.indexOf(at) < min) return;
    const extra = fields && Object.keys(fields).length ? ` ${JSON.stringify(fields)}` : '';
    (at === 'error' || at === 'warn' ? console.error : console.log)(`[warren] ${at} ${message}${extra}`);
  };
  return mark({ debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') });
}

/**
 * Adapts an object-first logger (pino, bunyan): warren's `warn(message, fields)` becomes
 * `logger.warn(fields, message)`. Fields named like the logger's own keys (`msg`, `level`,
 * `time`) are the logger's business; warren's fields never use them.
 */
export function objectFirstLogger(logger: ObjectFirstLogger): Logger {
  checkMethods(logger, 'logger');
  const call = (at: (typeof LEVELS)[number]) => (message: string, fields?: Record<string, unknown>) => logger[at].call(logger, fields ?? {}, message);
  return mark({ debug: call('debug'), info: call('info'), warn: call('warn'), error: call('error') });
}

/**
 * Adapts a pino logger (or a child of one) explicitly. {@link toLogger} detects pino on its
 * own; use this for a wrapper it cannot recognise.
 *
 * @example
 * const logger = pinoLogger(pino({ level: 'info' }).child({ service: 'billing' }));
 */
export function pinoLogger(logger: ObjectFirstLogger): Logger {
  return objectFirstLogger(logger);
}

/** True for a pino logger or child: `levels.values`, `bindings()` and `child()`. */
export function isPino(value: unknown): value is ObjectFirstLogger {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { levels?: { values?: unknown }; bindings?: unknown; child?: unknown };
  return typeof v.levels?.values === 'object' && v.levels.values !== null && typeof v.bindings === 'function' && typeof v.child === 'function';
}

/** True for a bunyan logger or child: `levels()`, `streams` and `child()`. */
export function isBunyan(value: unknown): value is ObjectFirstLogger {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as { levels?: unknown; streams?: unknown; child?: unknown };
  return typeof v.levels === 'function' && Array.isArray(v.streams) && typeof v.child === 'function';
}

function checkMethods(logger: unknown, option: string): void {
  if (typeof logger !== 'object' || logger === null) throw new InvalidOptionError(option, `expected a logger (pino, bunyan, console, or an object with debug/info/warn/error methods), got ${logger === null ? 'null' : typeof logger}`);
  const missing = LEVELS.filter((m) => typeof (logger as Record<string, unknown>)[m] !== 'function');
  if (missing.length > 0) throw new InvalidOptionError(option, `the logger has no ${missing.join(', ')} method${missing.length > 1 ? 's' : ''}; pass pino, bunyan, console, or an object with debug/info/warn/error`);
}

/**
 * Normalises whatever was passed as a `logger` option into warren's {@link Logger}:
 * `undefined` gives {@link silentLogger}; pino and bunyan are called object first;
 * anything else with `debug`, `info`, `warn` and `error` is called message first
 * (`console` included). Throws {@link InvalidOptionError} naming `option` for anything else.
 * Applied wherever warren reads a `logger` option, so passing it twice costs nothing.
 */
export function toLogger(logger: Logger | ObjectFirstLogger | undefined, option = 'logger'): Logger {
  if (logger === undefined) return silentLogger;
  if (typeof logger === 'object' && logger !== null && normalized.has(logger)) return logger as Logger;
  if (isPino(logger) || isBunyan(logger)) return objectFirstLogger(logger);
  checkMethods(logger, option);
  const target = logger as Logger;
  const call = (at: (typeof LEVELS)[number]) => (message: string, fields?: Record<string, unknown>) => (fields === undefined ? target[at](message) : target[at](message, fields));
  return mark({ debug: call('debug'), info: call('info'), warn: call('warn'), error: call('error') });
}
