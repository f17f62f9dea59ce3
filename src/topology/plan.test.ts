import { describe, expect, it } from 'vitest';
import { defineTopology } from './declaration.js';
import { diffArguments, diffBindings, parkedQueueArguments, topologySpec, unbindHint, untypedClassic } from './plan.js';
import { InvalidOptionError, UnknownConsumerError } from '../errors.js';

describe('defineTopology', () => {
  it('applies defaults and names the queues after the consumer', () => {
    const t = defineTopology({ consumers: { billing: { bindings: ['order.created'] } } });
    const c = t.consumer('billing');
    expect(t.exchange).toBe('warren.events');
    expect(c.retryQueues).toEqual(['billing.retry.5s', 'billing.retry.1m', 'billing.retry.10m']);
    expect(c.parkedQueue).toBe('billing.parked');
    expect(c.maxAttempts).toBe(6);
    expect(Object.isFrozen(c)).toBe(true);
  });
  it('names the option that is wrong', () => {
    expect(() => defineTopology({ consumers: {} })).toThrow(/`consumers`/);
    expect(() => defineTopology({ consumers: { a: { bindings: [] } } })).toThrow(/`consumers\.a\.bindings`/);
    expect(() => defineTopology({ consumers: { a: { bindings: ['x'], retry: { maxAttempts: 0 } } } })).toThrow(/`consumers\.a\.retry\.maxAttempts`.*from 1 to 100/);
    expect(() => defineTopology({ consumers: { a: { bindings: ['x'], retry: { delays: ['5s', '5000'] as never } } } })).toThrow(InvalidOptionError);
    expect(() => defineTopology({ consumers: { a: { bindings: ['x'], retry: { delays: [10, 10] } } } })).toThrow(/repeats a delay/);
    expect(() => defineTopology({ exchange: 'amq.topic', consumers: { a: { bindings: ['x'] } } })).toThrow(/reserves/);
    expect(() => defineTopology({ consumers: { a: { bindings: ['x'], queueType: 'stream' as never } } })).toThrow(/'classic' or 'quorum'/);
    expect(() => defineTopology({ consumers: { a: { bindings: ['x'] }, b: { bindings: ['y'], queue: 'a' } } })).toThrow(/also used by consumer 'a'/);
  });
  it('lists the known consumers for an unknown name', () => {
    const t = defineTopology({ consumers: { billing: { bindings: ['x'] }, email: { bindings: ['y'] } } });
    expect(() => t.consumer('bill')).toThrow(UnknownConsumerError);
    expect(() => t.consumer('bill')).toThrow(/billing, email/);
  });
});

describe('topologySpec', () => {
  it('gives each tier its own TTL and dead-letters back to this consumer only', () => {
    const t = defineTopology({ consumers: { billing: { bindings: ['order.*'], retry: { delays: [10, 20] } } } });
    const spec = topologySpec(t);
    const byName = new Map(spec.queues.map((q) => [q.name, q]));
    expect(byName.get('billing.retry.10ms')?.arguments).toEqual({ 'x-queue-type': 'classic', 'x-message-ttl': 10, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': 'billing' });
    expect(byName.get('billing.retry.20ms')?.arguments['x-message-ttl']).toBe(20);
    expect(byName.get('billing')?.arguments['x-dead-letter-routing-key']).toBe('billing.parked');
    expect(spec.bindings).toEqual([{ exchange: 'warren.events', queue: 'billing', pattern: 'order.*' }]);
  });
  it('makes quorum queues dead-letter at least once and bounds deliveries', () => {
    const t = defineTopology({ queueType: 'quorum', crashLimit: 3, consumers: { a: { bindings: ['x'], retry: { delays: [10] } } } });
    const [work, retry, parked] = topologySpec(t).queues;
    expect(work?.arguments).toMatchObject({ 'x-queue-type': 'quorum', 'x-delivery-limit': 5, 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' });
    expect(retry?.arguments).toMatchObject({ 'x-queue-type': 'quorum', 'x-dead-letter-strategy': 'at-least-once' });
    expect(parked?.arguments).toEqual({ 'x-queue-type': 'quorum', 'x-delivery-limit': 1_000_000 });
  });
  it('states the type of every queue, classic ones too (a vhost default must not choose it)', () => {
    const t = defineTopology({ consumers: { a: { bindings: ['x'] }, b: { bindings: ['y'], queueType: 'quorum' } } });
    for (const q of topologySpec(t).queues) expect(q.arguments['x-queue-type'], q.name).toBe(q.consumer === 'b' ? 'quorum' : 'classic');
    expect(parkedQueueArguments('classic')).toEqual({ 'x-queue-type': 'classic' });
  });
  it('uses none of the arguments RabbitMQ 4.3 refuses or ignores (x-queue-mode, x-queue-version)', () => {
    const t = defineTopology({ consumers: { a: { bindings: ['x'] }, b: { bindings: ['y'], queueType: 'quorum' } } });
    for (const q of topologySpec(t).queues) {
      expect(q.arguments, q.name).not.toHaveProperty('x-queue-mode');
      expect(q.arguments, q.name).not.toHaveProperty('x-queue-version');
    }
  });
});

describe('diffArguments', () => {
  it('names each differing argument with both values', () => {
    expect(diffArguments({ 'x-message-ttl': 5000, 'x-dead-letter-exchange': '' }, { 'x-message-ttl': 100, 'x-dead-letter-exchange': '', 'x-max-length': 10 })).toEqual([
      { argument: 'x-max-length', expected: undefined, actual: 10 },
      { argument: 'x-message-ttl', expected: 5000, actual: 100 },
    ]);
    expect(diffArguments({}, { 'x-queue-type': 'classic' })).toEqual([]);
  });
  it('compares the type the queue really has, a queue that stores none being classic', () => {
    // RabbitMQ 3.10 stores no type for a queue declared without one; 4.x stores the type it chose.
    expect(diffArguments({ 'x-queue-type': 'classic' }, {}, 'classic')).toEqual([]);
    expect(diffArguments({ 'x-queue-type': 'classic' }, {})).toEqual([]);
    expect(diffArguments({ 'x-queue-type': 'classic' }, { 'x-queue-type': 'classic' }, 'classic')).toEqual([]);
    // Made quorum by a vhost whose default type is quorum.
    expect(diffArguments({ 'x-queue-type': 'classic' }, { 'x-queue-type': 'quorum' }, 'quorum')).toEqual([{ argument: 'x-queue-type', expected: 'classic', actual: 'quorum' }]);
    expect(diffArguments({ 'x-queue-type': 'classic' }, { 'x-queue-type': 'quorum' })).toEqual([{ argument: 'x-queue-type', expected: 'classic', actual: 'quorum' }]);
    // The real type wins over the stored argument.
    expect(diffArguments({ 'x-queue-type': 'quorum' }, {}, 'stream')).toEqual([{ argument: 'x-queue-type', expected: 'quorum', actual: 'stream' }]);
    // Exchanges have no type argument: nothing is compared.
    expect(diffArguments({ 'alternate-exchange': 'x' }, { 'alternate-exchange': 'x' })).toEqual([]);
  });
  it('takes a refusal for an untyped queue declared classic as the same queue, and no other', () => {
    expect(untypedClassic({ argument: 'x-queue-type', expected: 'classic', actual: undefined })).toBe(true);
    expect(untypedClassic({ argument: 'x-queue-type', expected: 'classic', actual: 'quorum' })).toBe(false);
    expect(untypedClassic({ argument: 'x-queue-type', expected: 'quorum', actual: undefined })).toBe(false);
    expect(untypedClassic({ argument: 'x-message-ttl', expected: 'classic', actual: undefined })).toBe(false);
  });
});

describe('diffBindings', () => {
  const wanted = [
    { exchange: 'ev', queue: 'billing', pattern: 'order.created' },
    { exchange: 'ev', queue: 'billing', pattern: 'order.paid' },
    { exchange: 'ev', queue: 'email', pattern: 'order.*' },
  ];
  const b = (destination: string, routing_key: string, args: Record<string, unknown> = {}) => ({ source: 'ev', destination, destination_type: 'queue', routing_key, arguments: args });
  it('finds missing declared bindings and extra ones on the work queues only', () => {
    const d = diffBindings(wanted, [b('billing', 'order.created'), b('email', 'order.*'), b('email', 'invoice.#'), b('audit', 'order.#'), b('billing', 'order.paid', { 'x-match': 'all' })]);
    expect(d.missing).toEqual([wanted[1]]);
    expect(d.present).toEqual([wanted[0], wanted[2]]);
    // A binding with arguments is not the declared one; a queue outside the topology is none of its business.
    expect(d.extra.map((x) => `${x.destination}:${x.routing_key}`)).toEqual(['email:invoice.#', 'billing:order.paid']);
  });
  it('says how to remove a binding by hand', () => {
    expect(unbindHint({ ...b('email', 'invoice.#'), properties_key: 'invoice.%23' }, 'shop')).toBe(
      'rabbitmqadmin --vhost=shop delete binding source=ev destination_type=queue destination=email properties_key=invoice.%23',
    );
  });
});

describe('defineTopology: unknown keys', () => {
  it('names the key, where it was and the closest known one, at every level', () => {
    const attempt = (options: unknown) => {
      try {
        defineTopology(options as never);
      } catch (error) {
        return error;
      }
      return undefined;
    };
    const retry = attempt({ consumers: { billing: { bindings: ['x'], retry: { maxAtempts: 3 } } } });
    expect(retry).toBeInstanceOf(InvalidOptionError);
    expect(retry).toMatchObject({ option: 'consumers.billing.retry.maxAtempts' });
    expect((retry as Error).message).toMatch(/`consumers\.billing\.retry\.maxAtempts`: maxAtempts is not an option of consumers\.billing\.retry\. Did you mean maxAttempts\?/);
    const misplaced = attempt({ consumers: { billing: { bindings: ['x'], retry: { queueType: 'quorum' } } } });
    expect((misplaced as Error).message).toMatch(/`consumers\.billing\.retry\.queueType`.*queueType belongs to the consumer or the topology, not to retry/);
    expect((attempt({ retry: { delay: ['1s'] }, consumers: { a: { bindings: ['x'] } } }) as Error).message).toMatch(/`retry\.delay`.*Did you mean delays\?/);
    expect((attempt({ exchnage: 'shop', consumers: { a: { bindings: ['x'] } } }) as Error).message).toMatch(/`exchnage`: exchnage is not an option of the topology\. Did you mean exchange\?/);
    expect((attempt({ consumers: { a: { binding: ['x'] } } }) as Error).message).toMatch(/`consumers\.a\.binding`.*Did you mean bindings\?/);
    // Far from every known key: the known ones are listed instead.
    expect((attempt({ consumers: { a: { bindings: ['x'], colour: 'red' } } }) as Error).message).toMatch(/`consumers\.a\.colour`.*Known options: bindings, queue, retry, queueType, crashLimit\./);
  });
});

describe('defineTopology: several exchanges', () => {
  const exchanges = {
    'shop.commands': { type: 'direct' as const },
    'shop.broadcast': { type: 'fanout' as const },
    'shop.docs': { type: 'headers' as const, arguments: { 'alternate-exchange': 'shop.unrouted' } },
    'payments.events': { passive: true },
    'amq.topic': { passive: true },
  };
  it('binds a work queue to any exchange, each binding checked against its exchange type', () => {
    const t = defineTopology({
      exchange: 'shop.events',
      exchanges,
      consumers: {
        billing: {
          bindings: [
            'order.created',
            { exchange: 'shop.commands', keys: ['invoice.send'] },
            { exchange: 'shop.broadcast' },
            { exchange: 'shop.docs', headers: { format: 'pdf', pages: 2 }, match: 'any' },
            { exchange: 'payments.events', keys: ['payment.#'] },
            { exchange: 'shop.events', keys: ['order.paid'] },
          ],
        },
      },
    });
    expect([...t.exchanges.keys()]).toEqual(['shop.events', 'shop.commands', 'shop.broadcast', 'shop.docs', 'payments.events', 'amq.topic']);
    expect(t.exchanges.get('payments.events')).toMatchObject({ passive: true, type: undefined });
    expect(t.consumer('billing').bindings).toEqual(['order.created', 'order.paid']);
    const spec = topologySpec(t);
    expect(spec.exchanges[0]).toEqual({ name: 'shop.events', type: 'topic', durable: true, arguments: {}, passive: false });
    expect(spec.bindings).toEqual([
      { exchange: 'shop.events', queue: 'billing', pattern: 'order.created' },
      { exchange: 'shop.commands', queue: 'billing', pattern: 'invoice.send' },
      { exchange: 'shop.broadcast', queue: 'billing', pattern: '' },
      { exchange: 'shop.docs', queue: 'billing', pattern: '', arguments: { 'x-match': 'any', format: 'pdf', pages: 2 } },
      { exchange: 'payments.events', queue: 'billing', pattern: 'payment.#' },
      { exchange: 'shop.events', queue: 'billing', pattern: 'order.paid' },
    ]);
  });
  it('names what is wrong with a binding or an exchange, and what to write instead', () => {
    const bind = (binding: unknown, more: Record<string, unknown> = {}) => () => defineTopology({ exchanges, ...more, consumers: { a: { bindings: [binding as never] } } });
    expect(bind({ exchange: 'nope', keys: ['x'] })).toThrow(/`consumers\.a\.bindings\[0\]\.exchange`: "nope" is not an exchange of the topology \(known: warren\.events, shop\.commands.*Declare it under `exchanges` \(with `passive: true`/);
    expect(bind({ exchange: 'shop.commands' })).toThrow(/`consumers\.a\.bindings\[0\]\.keys`: the direct exchange 'shop\.commands' routes by key/);
    expect(bind({ exchange: 'shop.broadcast', keys: ['x'] })).toThrow(/fanout exchange 'shop\.broadcast' sends every message to every bound queue/);
    expect(bind({ exchange: 'shop.docs', keys: ['x'] })).toThrow(/`consumers\.a\.bindings\[0\]\.headers`: the headers exchange 'shop\.docs' routes by headers/);
    expect(bind({ exchange: 'shop.docs', headers: { 'x-format': 'pdf' } })).toThrow(/`consumers\.a\.bindings\[0\]\.headers\.x-format`/);
    expect(bind({ exchange: 'shop.docs', headers: { format: 'pdf' }, match: 'some' })).toThrow(/`consumers\.a\.bindings\[0\]\.match`: "some" is not 'all' or 'any'/);
    expect(bind({ exchange: 'shop.commands', key: ['x'] })).toThrow(/`consumers\.a\.bindings\[0\]\.key`.*Did you mean keys\?/);
    expect(bind({ exchange: 'payments.events', keys: ['a', 'a'] })).toThrow(/repeats a binding/);
    expect(bind('x', { exchanges: { 'shop.x': { type: 'stream' } } })).toThrow(/`exchanges\.shop\.x\.type`: "stream" is not an exchange type/);
    expect(bind('x', { exchanges: { 'amq.direct': { type: 'direct' } } })).toThrow(/reserves/);
    expect(bind('x', { exchange: 'shop.events', exchanges: { 'shop.events': { type: 'fanout' } } })).toThrow(/default exchange 'shop\.events' cannot be a fanout exchange/);
    expect(bind('x', { exchanges: { 'shop.x': { durable: 'yes' } } })).toThrow(/`exchanges\.shop\.x\.durable`/);
  });
  it('keeps a single `exchange` declaration as it was: one topic exchange, durable, string bindings on it', () => {
    const t = defineTopology({ exchange: 'shop.events', consumers: { a: { bindings: ['order.*'] } } });
    expect(topologySpec(t).exchanges).toEqual([{ name: 'shop.events', type: 'topic', durable: true, arguments: {}, passive: false }]);
    expect(t.consumer('a').queueBindings).toEqual([{ exchange: 'shop.events', key: 'order.*', arguments: {} }]);
  });
});

describe('diffBindings on several exchanges', () => {
  it('compares the exchange and the arguments (values as text) too', () => {
    const wanted = [
      { exchange: 'a', queue: 'q', pattern: 'k' },
      { exchange: 'docs', queue: 'q', pattern: '', arguments: { 'x-match': 'all', pages: 2 } },
    ];
    const b = (source: string, routing_key: string, args: Record<string, unknown> = {}) => ({ source, destination: 'q', destination_type: 'queue', routing_key, arguments: args });
    const d = diffBindings(wanted, [b('b', 'k'), b('docs', '', { pages: '2', 'x-match': 'all' }), b('docs', '', { 'x-match': 'any', pages: 2 })]);
    expect(d.missing).toEqual([wanted[0]]);
    expect(d.present).toEqual([wanted[1]]);
    expect(d.extra.map((x) => `${x.source}:${JSON.stringify(x.arguments)}`)).toEqual(['b:{}', 'docs:{"x-match":"any","pages":2}']);
  });
});
