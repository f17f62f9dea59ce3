import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { plainWire } from './publisher.js';
import { stampProperties, NO_OPTIONS } from './stamp.js';

// amqplib's own encoder and argument mapping: what ConfirmChannel.publish writes.
// Not exported by the package: loaded by path, beside its entry.
const require = createRequire(createRequire(import.meta.url).resolve('amqplib'));
const defs = require('./lib/defs.js') as { BasicPublish: number; BasicProperties: number; encodeMethod(id: number, channel: number, fields: unknown): Buffer; encodeProperties(id: number, channel: number, size: number, fields: unknown): Buffer };
const Args = require('./lib/api_args.js') as { publish(exchange: string, routingKey: string, options: unknown): unknown };

describe('a plain publish written without Args.publish', () => {
  it('is, frame for frame, what ConfirmChannel.publish writes for the same message', () => {
    for (const [exchange, routingKey] of [['shop.events', 'order.created'], ['', 'a.queue'], ['é-x', 'ключ.1']] as const) {
      const at = Date.now();
      const messageId = '01a22e32-74b7-76bf-acf1-cd9cbaf3f88b';
      const theirs = Args.publish(exchange, routingKey, { ...stampProperties(messageId, at, NO_OPTIONS), mandatory: true });
      const ours = plainWire(exchange, routingKey, messageId, at);
      expect(defs.encodeMethod(defs.BasicPublish, 3, ours)).toEqual(defs.encodeMethod(defs.BasicPublish, 3, theirs));
      expect(defs.encodeProperties(defs.BasicProperties, 3, 120, ours)).toEqual(defs.encodeProperties(defs.BasicProperties, 3, 120, theirs));
    }
  });
});
