/**
 * warren/testing agrees with the real consumer: each case of one table runs through
 * `runDelivery` and through a Consumer on the broker, and both must reach the same
 * outcome kind, with the same message id, the same retry-table row and the same log
 * lines about the delivery; a copy must land in the same queue with the same reason and
 * attempt headers.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HandlerTimeoutError, HEADER, PermanentError, WaitForConditionError, type Codec, type ConsumerOptions, type ConsumerTopology, type Handler, type Logger, type Outcome, type RetryTablePolicy } from '../index.js';
import type { RetryRow, RetryRowInput } from '../retry-table/types.js';
import { sqliteStore } from '../store/sqlite/index.js';
import { connectWarren, drain, onTeardown, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import { runDelivery, type LogLine, type TestMessage, type TestOptions, type TestOutcome } from './index.js';

class CarrierDown extends Error {}
class Rejected extends Error {}

type Options = Pick<ConsumerOptions<unknown, unknown>, 'schema' | 'classify' | 'timeoutMs' | 'retryTable' | 'messageIdFrom' | 'decoder' | 'idempotency'>;

interface Case {
  readonly name: string;
  readonly handler: Handler<unknown, unknown>;
  /** The options, given the store's retry table and idempotency guard. */
  readonly options?: (s: { retryTable: RetryTablePolicy; idempotency: NonNullable<Options['idempotency']> }) => Options;
  /** `messageId`: the message-id property; `null` for none. @default agree-<index> */
  readonly message: Pick<TestMessage, 'payload' | 'body' | 'attempt' | 'headers'> & { readonly messageId?: string | null };
  /** What the case is about, checked on the harness too, so a case cannot agree by both being wrong the same way. */
  readonly expected: string;
  /** A line both must log. */
  readonly says?: RegExp;
}

const flaky: Handler<unknown, unknown> = () => {
  throw new Error('carrier timed out');
};
const waitForCarrier: Handler<unknown, unknown> = () => {
  throw new WaitForConditionError('carrier', { cause: new CarrierDown('503') });
};
/** A codec whose decode never settles: the consumer's timeoutMs ends it. */
const neverDecodes: Codec = { name: 'never', decode: () => new Promise(() => undefined) };
const MAX_ATTEMPTS = 4;
const REQUEST_ID = { header: 'x-request-id' } as const;

const CASES: readonly Case[] = [
  { name: 'success', handler: () => undefined, message: { payload: { n: 1 } }, expected: 'acked' },
  { name: 'permanent error', handler: () => { throw new PermanentError('no such customer'); }, message: {}, expected: 'parked permanent-error 1' },
  ...[1, 2, 3].map((attempt): Case => ({ name: `transient error, run ${attempt}`, handler: flaky, message: { attempt }, expected: `retried ${attempt - 1} ${attempt}` })),
  { name: `transient error, run ${MAX_ATTEMPTS} (the cap)`, handler: flaky, message: { attempt: MAX_ATTEMPTS }, expected: `parked max-attempts ${MAX_ATTEMPTS}` },
  { name: 'invalid payload (zod)', handler: () => undefined, options: () => ({ schema: z.object({ orderId: z.number() }) }), message: { payload: { orderId: 'seven' } }, expected: 'parked invalid-payload 1' },
  { name: 'body that is not JSON', handler: () => undefined, message: { body: '{"unclosed": ' }, expected: 'parked invalid-json 1' },
  { name: 'classify says permanent', handler: () => { throw new Rejected('bad postcode'); }, options: () => ({ classify: (e) => (e instanceof Rejected ? 'permanent' : undefined) }), message: { attempt: 2 }, expected: 'parked permanent-error 2' },
  { name: 'classify says transient', handler: () => { throw new PermanentError('not really'); }, options: () => ({ classify: () => 'transient' }), message: {}, expected: 'retried 0 1' },
  { name: 'classify throws', handler: () => { throw new PermanentError('gone'); }, options: () => ({ classify: () => { throw new Error('classifier bug'); } }), message: {}, expected: 'parked permanent-error 1' },
  { name: 'asks to wait', handler: waitForCarrier, options: (s) => ({ retryTable: s.retryTable }), message: {}, expected: 'waiting carrier agree-11' },
  { name: 'a retry-table rule', handler: () => { throw new CarrierDown('503'); }, options: (s) => ({ retryTable: { ...s.retryTable, rules: [{ when: CarrierDown, dependency: 'carrier' }] } }), message: {}, expected: 'waiting carrier agree-12' },
  { name: 'asks to wait, no retry table', handler: () => { throw new WaitForConditionError('carrier'); }, message: {}, expected: 'retried 0 1' },
  {
    name: 'timeout',
    handler: (_p, ctx) => new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve())),
    options: () => ({ timeoutMs: 50 }),
    message: {},
    expected: 'retried 0 1',
  },
  {
    name: 'a retry whose headers would not fit the table',
    handler: () => { throw new Error('x'.repeat(1_500)); },
    message: { headers: { big: 'y'.repeat(64_000) } },
    expected: 'parked unencodable-headers 1',
    says: /^the copy's headers cannot be encoded; parking it with minimal metadata instead$/,
  },
  // Messages without a message-id property that ask to wait.
  { name: 'no message id, asks to wait: a row under a made-up id', handler: waitForCarrier, options: (s) => ({ retryTable: s.retryTable }), message: { messageId: null }, expected: 'waiting carrier (made up)' },
  { name: 'messageIdFrom finds the id in a header, asks to wait', handler: waitForCarrier, options: (s) => ({ retryTable: s.retryTable, messageIdFrom: REQUEST_ID }), message: { messageId: null, headers: { 'x-request-id': 'req-a' } }, expected: 'waiting carrier req-a' },
  { name: 'messageIdFrom set, the header absent, asks to wait', handler: waitForCarrier, options: (s) => ({ retryTable: s.retryTable, messageIdFrom: REQUEST_ID }), message: { messageId: null }, expected: 'waiting carrier (made up)', says: /^messageIdFrom found no id \(the header 'x-request-id' is absent\); the message waits in the retry table under a made-up id/ },
  {
    name: 'guard on, a codec that never settles, a rule for timeouts, no message id',
    handler: () => undefined,
    options: (s) => ({ idempotency: s.idempotency, decoder: neverDecodes, timeoutMs: 100, retryTable: { ...s.retryTable, rules: [{ when: HandlerTimeoutError, dependency: 'decoder' }] } }),
    message: { messageId: null },
    expected: 'retried 0 1',
    says: /^the message has no id yet \(its decoder did not finish\), so it cannot wait in the retry table for 'decoder'/,
  },
  {
    name: 'guard on, a codec that never settles, a rule for timeouts, a message id',
    handler: () => undefined,
    options: (s) => ({ idempotency: s.idempotency, decoder: neverDecodes, timeoutMs: 100, retryTable: { ...s.retryTable, rules: [{ when: HandlerTimeoutError, dependency: 'decoder' }] } }),
    message: {},
    expected: 'waiting decoder agree-20',
  },
  {
    name: 'a tenant function reads ctx.messageId (found by messageIdFrom)',
    handler: waitForCarrier,
    options: (s) => ({ messageIdFrom: REQUEST_ID, retryTable: { ...s.retryTable, tenant: (_p, ctx) => `tenant-of-${(ctx.messageId as string).toUpperCase()}` } }),
    message: { messageId: null, headers: { 'x-request-id': 'req-d' } },
    expected: 'waiting carrier req-d tenant-of-REQ-D',
  },
  {
    name: 'a tenant function reads ctx.messageId (the property)',
    handler: waitForCarrier,
    options: (s) => ({ retryTable: { ...s.retryTable, tenant: (_p, ctx) => `tenant-of-${(ctx.messageId as string).toUpperCase()}` } }),
    message: {},
    expected: 'waiting carrier agree-22 tenant-of-AGREE-22',
  },
];

/** A logger that keeps every line. */
function keeper(lines: LogLine[]): Logger {
  const at = (level: keyof Logger) => (message: string, fields: Record<string, unknown> = {}) => void lines.push({ level, message, fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** An id the case did not give (a fresh UUIDv7) shows as `(made up)`: two made-up ids agree. */
function id(value: unknown, given: ReadonlySet<string>): unknown {
  return typeof value === 'string' && !given.has(value) && UUID_V7.test(value) ? '(made up)' : value;
}

/** A retry-table row in the terms both sides can say (times, the stack's frames and the row's own id left out). */
function rowView(row: RetryRow | RetryRowInput | undefined, given: ReadonlySet<string>) {
  if (row === undefined) return undefined;
  const headers = 'headers' in row ? row.headers : ((JSON.parse(row.properties) as { headers: Record<string, unknown> }).headers);
  const kept = Object.fromEntries(Object.entries(headers).filter(([k]) => k !== HEADER.firstFailedAt && k !== HEADER.lastFailedAt).map(([k, v]) => [k, k === HEADER.errorStack ? typeof v : v]));
  return {
    messageId: id(row.messageId, given), consumer: row.consumer, queue: row.queue, parkedQueue: row.parkedQueue, exchange: row.exchange, routingKey: row.routingKey, content: row.content,
    attempt: row.attempt, waitsForAPerson: row.nextAttemptAt === null, lastError: row.lastError, errorClass: row.errorClass, dependency: row.dependency, tenant: row.tenant, correlationId: row.correlationId,
    headers: kept,
  };
}

/** A field of a log line, but for what differs by the call stack (a header table's size holds the stack's frames). */
function fieldView(key: string, value: unknown, given: ReadonlySet<string>): unknown {
  if (key === 'messageId') return id(value, given);
  if (key === 'why' && typeof value === 'string') return value.replace(/^\d+ bytes of headers/, '(n) bytes of headers');
  return value;
}

/** A log line about the delivery, without what only the database or the clock knows (the row's id, a pause, a duration). */
function lineView(line: LogLine, given: ReadonlySet<string>) {
  const fields = Object.fromEntries(Object.entries(line.fields).filter(([k]) => k !== 'row' && k !== 'paused').map(([k, v]) => [k, fieldView(k, v, given)]));
  return { level: line.level, message: line.message, fields };
}

/** Where a copy landed, in the terms both sides can say. */
function landing(queue: string | undefined, headers: Readonly<Record<string, unknown>> | undefined, c: ConsumerTopology) {
  return {
    queue: queue === undefined ? undefined : queue === c.parkedQueue ? 'parked' : queue === c.queue ? 'work' : `tier ${c.retryQueues.indexOf(queue)}`,
    reason: headers?.[HEADER.parkedReason],
    attempts: headers?.[HEADER.attempts],
    errorClass: headers?.[HEADER.errorClass],
  };
}

function summary(o: TestOutcome, given: ReadonlySet<string>): string {
  if (o.kind === 'parked') return `parked ${o.reason} ${o.attempts}`;
  if (o.kind === 'retried') return `retried ${o.tier} ${o.attempts}`;
  if (o.kind === 'waiting') return [`waiting ${o.row?.dependency} ${String(id(o.row?.messageId, given))}`, ...(o.row?.tenant ? [o.row.tenant] : [])].join(' ');
  return o.kind;
}

describe('warren/testing agrees with the consumer on the broker', () => {
  it('reaches the outcome the real consumer reaches, case by case: kind, message id, retry-table row, log lines and the copy', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-agree-'));
    const store = sqliteStore({ filename: join(dir, 'warren.db'), pruneIntervalMs: 0 });
    onTeardown(async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    });
    const shared = { retryTable: { table: store.retryTable }, idempotency: store.idempotency() };
    const options = CASES.map((k) => k.options?.(shared) ?? {});
    // Long tiers: a retried copy stays in its tier queue to be looked at.
    const topology = testTopology(({ exchange, name }) => ({
      exchange,
      retry: { delays: ['10m', '20m', '30m'], maxAttempts: MAX_ATTEMPTS },
      consumers: Object.fromEntries(CASES.map((_k, i) => [name(`agree${i}`), { bindings: [`agree.${i}`] }])),
    }));
    const consumers = [...topology.consumers.values()];
    const ids = CASES.map((k, i) => (k.message.messageId === null ? undefined : (k.message.messageId ?? `agree-${i}`)));
    const given = new Set([...ids.filter((m) => m !== undefined), 'req-a', 'req-d']);
    const messages = CASES.map((k, i): TestMessage => ({ ...k.message, messageId: ids[i] ?? null, routingKey: `agree.${i}`, exchange: topology.exchange }));

    // The harness first: no broker involved.
    const predicted: TestOutcome[] = [];
    for (const [i, k] of CASES.entries()) predicted.push(await runDelivery(consumers[i]!, k.handler as Handler<unknown, undefined>, messages[i], options[i] as TestOptions));

    // Then the real consumer.
    const warren = await connectWarren(topology);
    const outcomes = new Map<string, Outcome>();
    const logs = CASES.map((): LogLine[] => []);
    for (const [i, k] of CASES.entries()) {
      const c = consumers[i]!;
      await warren.consume(c.name, k.handler as Handler<unknown, undefined>, { ...(options[i] as TestOptions), logger: keeper(logs[i]!), onOutcome: (o) => outcomes.set(c.name, o) });
    }
    const raw = await rawConnection();
    const ch = await raw.createConfirmChannel();
    for (const [i, k] of CASES.entries()) {
      const body = k.message.body !== undefined ? Buffer.from(k.message.body) : Buffer.from(JSON.stringify(k.message.payload ?? {}));
      const headers = { ...k.message.headers, ...((k.message.attempt ?? 1) > 1 ? { [HEADER.attempts]: (k.message.attempt ?? 1) - 1 } : {}) };
      ch.publish(topology.exchange, `agree.${i}`, body, { ...(ids[i] === undefined ? {} : { messageId: ids[i] }), headers, contentType: 'application/json', persistent: true });
    }
    await ch.waitForConfirms();
    await waitFor(() => outcomes.size === CASES.length, () => `an outcome for each of the ${CASES.length} cases (${outcomes.size} so far)`, 45_000);

    const rows = await store.retryTable.list();
    const disagreements: string[] = [];
    for (const [i, k] of CASES.entries()) {
      const c = consumers[i]!;
      const real = outcomes.get(c.name)!;
      let queue: string | undefined;
      let headers: Readonly<Record<string, unknown>> | undefined;
      for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) {
        const got = await drain(raw, q);
        if (got.length === 0) continue;
        expect(got, `${k.name}: one copy, in ${q}`).toHaveLength(1);
        expect(queue, `${k.name}: in one queue only`).toBeUndefined();
        queue = q;
        headers = got[0]!.properties.headers ?? {};
      }
      const p = predicted[i]!;
      const side = (kind: string, messageId: unknown, row: RetryRow | RetryRowInput | undefined, lines: readonly LogLine[], copy: ReturnType<typeof landing>) => ({ kind, messageId: id(messageId, given), row: rowView(row, given), lines: lines.map((l) => lineView(l, given)), copy });
      // The consumer's lines about the delivery (not its attaching or closing).
      const consumerSide = side(real.kind, real.messageId, rows.find((r) => r.consumer === c.name), logs[i]!.filter((l) => 'messageId' in l.fields), landing(queue, headers, c));
      const harnessSide = side(p.kind, p.messageId, p.row, p.log, landing(p.queue, p.headers, c));
      try {
        expect(summary(p, given), 'the harness, against what the case is about').toBe(k.expected);
        if (k.says !== undefined) expect(p.log.map((l) => l.message), 'the harness, against the line the case says').toContainEqual(expect.stringMatching(k.says));
        expect(harnessSide).toEqual(consumerSide);
      } catch (error) {
        disagreements.push(k.name);
        console.info(`${k.name}: the harness and the consumer disagree\n${(error as Error).message}\nharness:  ${JSON.stringify(harnessSide)}\nconsumer: ${JSON.stringify(consumerSide)}`);
      }
    }
    expect(disagreements, 'the cases where warren/testing and the consumer disagree').toEqual([]);
  }, 120_000);
});
