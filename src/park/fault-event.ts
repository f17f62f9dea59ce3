/**
 * The fault event: a small JSON message warren publishes, when a topology asks for it,
 * each time a message is parked, so a notifier, a ticket bot or another service can
 * subscribe to failures without reading the parked queues. Bounded in size; the body is
 * never in it unless asked for. Publishing it never changes the parked message's fate.
 */
import { randomUUID } from 'node:crypto';
import type * as amqp from 'amqplib';
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import { failureFingerprint, type FailureInfo } from './failure.js';

/**
 * Where and how fault events are published (the topology's `faults` option).
 *
 * @example
 * defineTopology({
 *   exchange: 'shop.events',
 *   faults: { exchange: 'shop.faults', consoleUrl: 'https://warren.internal.example' },
 *   consumers: { billing: { bindings: ['order.created'] } },
 * });
 */
export interface FaultEventOptions {
  /**
   * The topic exchange the events go to, declared with the topology. Each event's
   * routing key is `<consumer>.<reason>`, e.g. `billing.permanent-error`.
   */
  exchange: string;
  /**
   * Put the message body in the event (base64, cut to `maxBodyBytes`). Bodies hold
   * customer data: leave this off unless every subscriber may read them.
   * @default false
   */
  includeBody?: boolean;
  /** The console's address: each event then links to the message's page there. @default none */
  consoleUrl?: string;
  /** The error message in the event is cut to this many UTF-8 bytes (64 to 16,384). @default 1024 */
  maxErrorBytes?: number;
  /** With `includeBody`, the body is cut to this many bytes (0 to 65,536). @default 4096 */
  maxBodyBytes?: number;
}

/** The `faults` option after validation and defaults. */
export interface FaultsTopology {
  readonly exchange: string;
  readonly includeBody: boolean;
  readonly consoleUrl: string | undefined;
  readonly maxErrorBytes: number;
  readonly maxBodyBytes: number;
}

/** What a fault event says, as JSON. */
export interface FaultEvent {
  /** Always `warren.fault`, so a queue bound to several exchanges can tell it apart. */
  readonly type: 'warren.fault';
  /** Where the message went: `parked` (the parked queue) or `archived` (the failure archive). */
  readonly stage: 'parked' | 'archived';
  readonly consumer: string;
  readonly messageId: string | null;
  /** The park reason, e.g. `permanent-error`, `max-attempts`, `crash-loop`. */
  readonly reason: string;
  readonly errorClass: string;
  /** Cut to `maxErrorBytes`; `errorTruncated` says whether it was. */
  readonly errorMessage: string;
  readonly errorTruncated: boolean;
  /** The failure group, as `warren parked list --group` shows it. */
  readonly fingerprint: string;
  /** ISO time. */
  readonly parkedAt: string;
  readonly attempts: number;
  /** The console's page for the message, when `consoleUrl` is set. */
  readonly link?: string;
  /** Only with `includeBody`. */
  readonly body?: { readonly base64: string; readonly bytes: number; readonly truncated: boolean };
}

/** What {@link faultEvent} is made from. */
export interface FaultFacts {
  readonly stage: FaultEvent['stage'];
  readonly consumer: string;
  readonly messageId: string | undefined;
  readonly reason: string;
  readonly failure: FailureInfo;
  readonly parkedAt: Date;
  readonly attempts: number;
  readonly body?: Buffer;
  /** The failure group as already computed (an archive row's); else made from `failure`. */
  readonly fingerprint?: string;
}

/** Defaults, in one place. */
export const FAULT_EVENT_DEFAULTS = { includeBody: false, maxErrorBytes: 1024, maxBodyBytes: 4096 } as const;

const KEYS = ['exchange', 'includeBody', 'consoleUrl', 'maxErrorBytes', 'maxBodyBytes'];

/** Validates the topology's `faults` option. `checkName` is the topology's own name rule. */
export function checkFaults(value: unknown, checkName: (name: unknown, option: string) => string): FaultsTopology {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidOptionError('faults', 'expected an object such as { exchange: \'shop.faults\' }');
  const o = value as Record<string, unknown>;
  for (const key of Object.keys(o)) if (!KEYS.includes(key)) throw new InvalidOptionError(`faults.${key}`, `${key} is not an option of faults`, `Known options: ${KEYS.join(', ')}.`);
  const exchange = checkName(o['exchange'], 'faults.exchange');
  const includeBody = o['includeBody'] ?? FAULT_EVENT_DEFAULTS.includeBody;
  if (typeof includeBody !== 'boolean') throw new InvalidOptionError('faults.includeBody', `${JSON.stringify(includeBody)} is not true or false`);
  const url = o['consoleUrl'];
  let consoleUrl: string | undefined;
  if (url !== undefined) {
    const parsed = typeof url === 'string' && url.length <= 2000 && URL.canParse(url) ? new URL(url) : undefined;
    if (typeof url !== 'string' || parsed === undefined || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) throw new InvalidOptionError('faults.consoleUrl', `${JSON.stringify(url)} is not an http or https address of at most 2,000 characters`, "Example: 'https://warren.internal.example'.");
    consoleUrl = url.replace(/\/+$/, '');
  }
  const int = (key: string, fallback: number, min: number, max: number): number => {
    const v = o[key] ?? fallback;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw new InvalidOptionError(`faults.${key}`, `${JSON.stringify(v)} is not a whole number from ${min} to ${max}`);
    return v;
  };
  return Object.freeze({ exchange, includeBody, consoleUrl, maxErrorBytes: int('maxErrorBytes', FAULT_EVENT_DEFAULTS.maxErrorBytes, 64, 16_384), maxBodyBytes: int('maxBodyBytes', FAULT_EVENT_DEFAULTS.maxBodyBytes, 0, 65_536) });
}

/** `text` cut to at most `max` UTF-8 bytes, never inside a character. */
function cutBytes(text: string, max: number): { text: string; cut: boolean } {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= max) return { text, cut: false };
  let end = max;
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) end--; // back to the start of a character
  return { text: bytes.subarray(0, end).toString('utf8'), cut: true };
}

/**
 * The routing key of a consumer's fault event: `<consumer>.<reason>`, e.g.
 * `billing.permanent-error`, so a binding `billing.#` or `#.crash-loop` picks what it
 * wants. A consumer name keeps its dots (`shop.billing.max-attempts`); a reason has none.
 */
export function faultRoutingKey(consumer: string, reason: string): string {
  return `${consumer}.${cutBytes(reason.replace(/[.\s#*]+/g, '_') || '_', 50).text}`;
}

/** The event for a parked (or archived) message, bounded by `faults`. Pure. */
export function faultEvent(faults: FaultsTopology, facts: FaultFacts): FaultEvent {
  const { failure } = facts;
  const error = cutBytes(failure.message, faults.maxErrorBytes);
  const event: { -readonly [K in keyof FaultEvent]: FaultEvent[K] } = {
    type: 'warren.fault',
    stage: facts.stage,
    consumer: facts.consumer,
    messageId: facts.messageId ?? null,
    reason: facts.reason,
    errorClass: cutBytes(failure.errorClass, 200).text,
    errorMessage: error.text,
    errorTruncated: error.cut,
    fingerprint: cutBytes(facts.fingerprint ?? failureFingerprint(failure.errorClass, failure.message, failure.stack), faults.maxErrorBytes).text,
    parkedAt: facts.parkedAt.toISOString(),
    attempts: facts.attempts,
  };
  if (faults.consoleUrl !== undefined && facts.messageId !== undefined) {
    event.link = `${faults.consoleUrl}/parked/${encodeURIComponent(facts.consumer)}/messages/${encodeURIComponent(facts.messageId)}`;
  }
  if (faults.includeBody && facts.body !== undefined) {
    const cut = facts.body.subarray(0, faults.maxBodyBytes);
    event.body = { base64: cut.toString('base64'), bytes: facts.body.length, truncated: cut.length < facts.body.length };
  }
  return event;
}

/** What publishing an event needs: a publish with confirm and `mandatory` (warren's publisher's `send`). */
export interface FaultSender {
  /** Resolves at the broker's confirm; rejects when the event is unroutable, refused or cannot be sent. */
  send(message: { exchange: string; routingKey: string; content: Buffer; properties: Record<string, unknown> }): Promise<void>;
}

/** Where publishing an event reports (a failed publish is logged and counted, nothing more). */
export interface FaultReporting {
  readonly logger: Logger;
  /** Called once for each event that could not be published. */
  failed(): void;
}

/**
 * Publishes the event with confirm; resolves true when confirmed, false when it could
 * not be (unroutable, refused, no connection), which is logged and counted. Never rejects:
 * the parked message is already settled, and its fate does not hang on its event.
 */
export async function publishFaultEvent(sender: FaultSender, faults: FaultsTopology, event: FaultEvent, report: FaultReporting): Promise<boolean> {
  try {
    await sender.send({
      exchange: faults.exchange,
      routingKey: faultRoutingKey(event.consumer, event.reason),
      content: Buffer.from(JSON.stringify(event), 'utf8'),
      properties: { contentType: 'application/json', type: 'warren.fault', persistent: true, timestamp: Math.floor(Date.now() / 1000) },
    });
    return true;
  } catch (error) {
    try {
      report.failed();
      report.logger.error('could not publish a fault event; the message is parked all the same', { consumer: event.consumer, messageId: event.messageId, exchange: faults.exchange, error: error instanceof Error ? error.message : String(error) });
    } catch {
      // A logger that throws must not turn into an unhandled rejection.
    }
    return false;
  }
}

/** A {@link FaultSender} with a channel of its own. */
export interface ClosableFaultSender extends FaultSender {
  /** Closes its channel (an event still waiting for its confirm then fails, and is counted). */
  close(): Promise<void>;
}

/** How long a fault event waits for its confirm on a channel of its own. */
const CONFIRM_WAIT_MS = 10_000;

/**
 * A {@link FaultSender} on a confirm channel of its own, opened from `connection` when
 * first needed and again after it closes; for a process with no publisher (the archive
 * ingester). An event the broker returns (no queue bound for it) is refused.
 */
export function channelSender(connection: () => Promise<amqp.ChannelModel>): ClosableFaultSender {
  let channel: Promise<amqp.ConfirmChannel> | undefined;
  const returned = new Set<string>();
  const open = (): Promise<amqp.ConfirmChannel> => {
    channel ??= connection().then(async (model) => {
      const ch = await model.createConfirmChannel();
      ch.on('return', (m: amqp.Message) => void returned.add(String(m.properties.messageId)));
      ch.on('error', () => undefined); // its close below is what counts
      ch.on('close', () => void (channel = undefined));
      return ch;
    });
    channel.catch(() => void (channel = undefined));
    return channel;
  };
  return {
    async send(message) {
      const ch = await open();
      const id = `warren-fault-${randomUUID()}`;
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no confirm within ${CONFIRM_WAIT_MS} ms`)), CONFIRM_WAIT_MS);
        const done = (error: unknown): void => {
          clearTimeout(timer);
          // A return comes before its confirm: returned means no queue took the event.
          if (returned.delete(id)) reject(new Error(`unroutable: no queue is bound to '${message.exchange}' for '${message.routingKey}'`));
          else if (error) reject(error instanceof Error ? error : new Error(String(error)));
          else resolve();
        };
        try {
          ch.publish(message.exchange, message.routingKey, message.content, { ...message.properties, messageId: id, mandatory: true }, done);
        } catch (error) {
          done(error);
        }
      });
    },
    async close() {
      const ch = await channel?.catch(() => undefined);
      channel = undefined;
      await ch?.close().catch(() => undefined);
    },
  };
}
