import { Inject, Injectable } from '@nestjs/common';
import { PermanentError } from '../../src/index.js';
import { OrdersConfig } from './config.js';

/** The mail provider refused the message as it is: sending it again will not help. */
export class MailRejectedError extends PermanentError {}

/** What {@link EmailHandlers} needs of a mail provider: send one message, once per key. */
export interface Mailer {
  send(message: { to: string; template: string; data: Record<string, unknown> }, idempotencyKey: string, signal: AbortSignal): Promise<void>;
}

/**
 * The mail provider's HTTP API, a dependency that goes down now and then. A refusal (4xx)
 * is a {@link MailRejectedError}, parked at once; anything else (a 503, a timeout, a
 * refused connection) is thrown as it is, and warren retries it on the delay ladder.
 */
@Injectable()
export class MailClient implements Mailer {
  constructor(@Inject(OrdersConfig) private readonly config: OrdersConfig) {}

  async send(message: { to: string; template: string; data: Record<string, unknown> }, idempotencyKey: string, signal: AbortSignal): Promise<void> {
    const res = await fetch(`${this.config.mailUrl}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(message),
      signal: AbortSignal.any([signal, AbortSignal.timeout(10_000)]),
    });
    const text = await res.text();
    if (res.status >= 400 && res.status < 500) throw new MailRejectedError(`the mail provider refused ${message.template} to ${message.to}: ${res.status} ${text}`);
    if (!res.ok) throw new Error(`the mail provider answered ${res.status}: ${text}`);
  }
}
