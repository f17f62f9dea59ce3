import { describe, expect, it } from 'vitest';
import { HEADER } from '../headers.js';
import { parkedIdentity } from './identity.js';
import { toParkedMessage } from './message.js';

function parked(messageId: string | undefined, headers: Record<string, unknown>, body = '{"n":1}') {
  return toParkedMessage({ content: Buffer.from(body), fields: { routingKey: 'billing.parked', exchange: '' }, properties: { ...(messageId === undefined ? {} : { messageId }), headers } }, 1);
}

const at = { [HEADER.parkedAt]: '2026-03-01T10:00:00.000Z', [HEADER.lastFailedAt]: '2026-03-01T10:00:00.000Z' };

describe('parkedIdentity', () => {
  it('is the same for a message and its copy at the back of a quorum queue', () => {
    const original = parked('a', { ...at, 'x-delivery-count': 3, 'x-death': [{ queue: 'billing', reason: 'rejected', count: 1 }] });
    const copy = parked('a', { ...at });
    expect(parkedIdentity(copy)).toBe(parkedIdentity(original));
    expect(parkedIdentity(original)).toMatch(/^a [0-9a-f]{32}$/);
  });
  it('tells apart the same message id parked again, another body, another id', () => {
    const first = parkedIdentity(parked('a', at));
    expect(parkedIdentity(parked('a', { ...at, [HEADER.parkedAt]: '2026-03-01T11:00:00.000Z' }))).not.toBe(first);
    expect(parkedIdentity(parked('a', { ...at, [HEADER.replays]: 1 }))).not.toBe(first);
    expect(parkedIdentity(parked('a', at, '{"n":2}'))).not.toBe(first);
    expect(parkedIdentity(parked('b', at))).not.toBe(first);
  });
  it('tells apart messages without an id by their body and park time', () => {
    expect(parkedIdentity(parked(undefined, at))).toMatch(/^[0-9a-f]{32}$/);
    expect(parkedIdentity(parked(undefined, at, 'x'))).not.toBe(parkedIdentity(parked(undefined, at, 'y')));
    expect(parkedIdentity(parked(undefined, at, 'x'))).toBe(parkedIdentity(parked(undefined, at, 'x')));
  });
});
