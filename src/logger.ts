/** The logger warren writes to. Pass pino, console, or anything with these four methods. */
export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

/** Drops everything: the default, so a library stays quiet unless asked. */
export const silentLogger: Logger = Object.freeze({ debug() {}, info() {}, warn() {}, error() {} });

/** Writes one line per entry to the console, for demos and scripts. */
export function consoleLogger(level: 'debug' | 'info' | 'warn' | 'error' = 'info'): Logger {
  const order = ['debug', 'info', 'warn', 'error'] as const;
  const min = order.indexOf(level);
  const write = (at: (typeof order)[number]) => (message: string, fields?: Record<string, unknown>) => {
    if (order.indexOf(at) < min) return;
    const extra = fields && Object.keys(fields).length ? ` ${JSON.stringify(fields)}` : '';
    (at === 'error' || at === 'warn' ? console.error : console.log)(`[warren] ${at} ${message}${extra}`);
  };
  return { debug: write('debug'), info: write('info'), warn: write('warn'), error: write('error') };
}
