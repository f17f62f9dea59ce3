import { Logger as NestLogger } from '@nestjs/common';
import type { Logger } from '../logger.js';

function fieldsText(fields: Record<string, unknown> | undefined): string {
  if (fields === undefined || Object.keys(fields).length === 0) return '';
  try {
    return ` ${JSON.stringify(fields, (_, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Error ? `${v.name}: ${v.message}` : v))}`;
  } catch {
    return ` ${Object.keys(fields).join(', ')} (not serializable)`;
  }
}

/**
 * warren's logger on Nest's `Logger`: `info` goes to `log`, the others to the level of
 * the same name, with warren's fields as JSON after the message. Whatever logger the
 * application gave Nest (`app.useLogger()`, `bufferLogs`) receives the lines.
 *
 * @example
 * WarrenModule.forRoot({ url, topology, logger: nestLogger('Billing') })
 */
export function nestLogger(context = 'Warren'): Logger {
  const nest = new NestLogger(context);
  return {
    debug: (message, fields) => nest.debug(message + fieldsText(fields)),
    info: (message, fields) => nest.log(message + fieldsText(fields)),
    warn: (message, fields) => nest.warn(message + fieldsText(fields)),
    error: (message, fields) => nest.error(message + fieldsText(fields)),
  };
}
