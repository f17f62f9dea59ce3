/**
 * Loggers: pino (object first) and console-style loggers (message first) passed as they
 * are, and what a real pino writes when a consumer retries, parks and times out.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError, isPino, pinoLogger, silentLogger, toLogger, type Logger } from './index.js';
import { connectWarren, testTopology, waitFor } from '../test/helpers.js';

interface Line {
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** A real pino writing JSON lines into an array, through a destination stream. */
function capturedPino(bindings: Record<string, unknown> = {}) {
  const lines: Line[] = [];
  const logger = pino({ level: 'debug', base: null }, { write: (chunk: string) => void lines.push(JSON.parse(chunk) as Line) }).child(bindings);
  return { lines, logger };
}

describe('toLogger', () => {
  it('detects pino and its children, and calls them fields first so the fields reach the JSON line', () => {
    const { lines, logger } = capturedPino({ service: 'billing' });
    expect(isPino(logger)).toBe(true);
    toLogger(logger).warn('message parked', { consumer: 'billing', attempts: 3 });
    expect(lines).toEqual([{ level: 40, service: 'billing', consumer: 'billing', attempts: 3, msg: 'message parked', time: expect.any(Number) }]);
  });

  it('passed message first, pino drops the fields: the fault toLogger and pinoLogger exist for', () => {
    const { lines, logger } = capturedPino();
    (logger as unknown as Logger).warn('message parked', { consumer: 'billing' });
    expect(lines[0]).not.toHaveProperty('consumer');
    lines.length = 0;
    pinoLogger(logger).warn('message parked', { consumer: 'billing' });
    expect(lines[0]).toMatchObject({ consumer: 'billing', msg: 'message parked' });
  });

  it('calls console-style loggers message first, leaves a normalised logger as it is, and names a bad option', () => {
    const calls: unknown[][] = [];
    const consoleLike = { debug: (...a: unknown[]) => calls.push(a), info: (...a: unknown[]) => calls.push(a), warn: (...a: unknown[]) => calls.push(a), error: (...a: unknown[]) => calls.push(a) };
    const logger = toLogger(consoleLike);
    logger.error('boom', { consumer: 'c' });
    logger.info('plain');
    expect(calls).toEqual([['boom', { consumer: 'c' }], ['plain']]);
    expect(toLogger(logger)).toBe(logger);
    expect(toLogger(undefined)).toBe(silentLogger);
    expect(isPino(console)).toBe(false);
    expect(() => toLogger({ info() {} } as unknown as Logger)).toThrow(InvalidOptionError);
    expect(() => toLogger({ info() {} } as unknown as Logger)).toThrow(/`logger`.*no debug, warn, error methods/);
  });
});

describe('a consumer logging through pino', () => {
  it('writes a retry, a park and a handler timeout as JSON lines with the consumer, message id, attempts and queue', async () => {
    const topology = testTopology(({ exchange, name }) => ({ exchange, consumers: { [name('logs')]: { bindings: ['x'], retry: { delays: [20], maxAttempts: 2 } } } }));
    const declaration = [...topology.consumers.values()][0]!;
    const { lines, logger } = capturedPino();
    const warren = await connectWarren(topology, { logger });
    const consumer = await warren.consume<{ hang?: boolean }>(
      declaration.name,
      async (payload) => {
        if (payload.hang) await new Promise(() => undefined);
        throw new TypeError('the ledger said no');
      },
      { timeoutMs: 50 },
    );
    await warren.publish('x', { hang: false }, { messageId: 'fails-twice' });
    await warren.publish('x', { hang: true }, { messageId: 'hangs' });
    await waitFor(() => consumer.stats.parked >= 2, 'both messages parked');

    // Each line says what failed (class and message) beside where the message went.
    const retry = lines.find((l) => String(l.msg).startsWith('handler failed') && l['messageId'] === 'fails-twice');
    expect(retry).toMatchObject({ level: 30, consumer: declaration.name, messageId: 'fails-twice', attempts: 1, tier: 0, queue: declaration.retryQueues[0], errorClass: 'TypeError', error: 'the ledger said no' });
    expect(retry!.msg).toBe(`handler failed (TypeError: the ledger said no); retrying in ${declaration.delaysMs[0]} ms`);

    const park = lines.find((l) => String(l.msg).startsWith('message parked') && l['messageId'] === 'fails-twice');
    expect(park).toMatchObject({ level: 40, consumer: declaration.name, messageId: 'fails-twice', attempts: 2, reason: 'max-attempts', queue: declaration.parkedQueue, errorClass: 'TypeError', error: 'the ledger said no' });

    // A handler that does not settle within timeoutMs is a transient failure: retried, then parked.
    const timeoutRetry = lines.find((l) => String(l.msg).startsWith('handler failed') && l['messageId'] === 'hangs');
    expect(timeoutRetry).toMatchObject({ level: 30, consumer: declaration.name, messageId: 'hangs', attempts: 1, queue: declaration.retryQueues[0], errorClass: 'HandlerTimeoutError' });
    const timeoutPark = lines.find((l) => String(l.msg).startsWith('message parked') && l['messageId'] === 'hangs');
    expect(timeoutPark).toMatchObject({ level: 40, consumer: declaration.name, messageId: 'hangs', attempts: 2, errorClass: 'HandlerTimeoutError' });
    expect(String(timeoutPark!['error'])).toMatch(/did not settle within 50 ms/);
  });
});
