import { describe, expect, it } from 'vitest';
import type { ExpectedRow, RetryRowState } from './db.js';
import { planMessages } from './plan.js';
import { check, type ParkedCopy, type RunFacts } from './report.js';

// The check is what makes the chaos run able to fail: each kind of damage must show up
// as a violation naming the message, and a clean run must pass.

const expected: ExpectedRow[] = [
  { seq: 0, message_id: 'm-ok', kind: 'ok', via: 'outbox' },
  { seq: 1, message_id: 'm-transient', kind: 'transient', via: 'publisher' },
  { seq: 2, message_id: 'm-permanent', kind: 'permanent', via: 'outbox' },
  { seq: 3, message_id: 'm-wait', kind: 'wait', via: 'outbox' },
  { seq: 4, message_id: 'm-held', kind: 'held', via: 'outbox' },
];
const parkedCopy: ParkedCopy = { messageId: 'm-permanent', reason: 'permanent-error', errorClass: 'PermanentError', errorMessage: 'chaos: message 2 fails for good', attempts: 1 };
const heldRow: RetryRowState = { message_id: 'm-held', paused: true, tenant: 'held', dependency: 'inventory', waits: 1 };

function facts(change: Partial<RunFacts> = {}): RunFacts {
  const queues = (parked: number) => [
    { name: 'chaos.orders', messages: 0, unacked: 0, consumers: 0 },
    { name: 'chaos.orders.retry.50ms', messages: 0, unacked: 0, consumers: 0 },
    { name: 'chaos.orders.parked', messages: parked, unacked: 0, consumers: 0 },
  ];
  // The broker holds exactly the parked copies the check reads, as it would.
  const parked = change.broker?.parked ?? [parkedCopy];
  return {
    seed: 1,
    messages: expected.length,
    brokerLabel: 'RabbitMQ test',
    storeLabel: 'test',
    expected,
    effects: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1]]),
    markers: new Set(['m-ok', 'm-transient', 'm-wait']),
    retryRows: [heldRow],
    outbox: [],
    outboxLag: { pending: 0, failed: 0 },
    produced: { outbox: 4, publisher: 1 },
    settled: true,
    faults: [],
    unexpectedExits: [],
    restarts: {},
    consumerTotals: {},
    relayTotals: {},
    schedulerTotals: {},
    timings: { faultsMs: 0, settleMs: 0, totalMs: 0 },
    ...change,
    broker: { queues: queues(parked.length), parked },
  };
}

const whats = (f: RunFacts) => check(f).violations.map((v) => `${v.what} ${v.messageId}`);

describe('the chaos check', () => {
  it('passes a run where every message ended where it was meant to', () => {
    expect(check(facts()).violations).toEqual([]);
  });

  it('reports a message with no side effect, not parked and not waiting as lost', () => {
    expect(whats(facts({ effects: new Map([['m-ok', 1], ['m-wait', 1]]), markers: new Set(['m-ok', 'm-wait']) }))).toEqual(['lost: no side effect, not parked, not waiting m-transient']);
  });

  it('reports a handler that committed twice as doubled', () => {
    expect(whats(facts({ effects: new Map([['m-ok', 2], ['m-transient', 1], ['m-wait', 1]]) }))).toEqual(['doubled: the handler committed 2 times m-ok']);
  });

  it('reports a message parked that was meant to succeed, and the parked queue holding one more', () => {
    const wrong: ParkedCopy = { ...parkedCopy, messageId: 'm-wait', reason: 'crash-loop', errorClass: 'CrashLoopError' };
    const v = whats(facts({ effects: new Map([['m-ok', 1], ['m-transient', 1]]), markers: new Set(['m-ok', 'm-transient']), broker: { queues: [], parked: [parkedCopy, wrong] } }));
    expect(v).toContain('parked but not meant to be (crash-loop) m-wait');
    expect(v).toContain('queue chaos.orders.parked holds 2 messages, expected 1 -');
  });

  it('shows identical parked copies of a permanent failure as a note, not a violation', () => {
    const result = check(facts({ broker: { queues: [], parked: [parkedCopy, parkedCopy] } }));
    expect(result.violations).toEqual([]);
    expect(result.notes.map((n) => n.messageId)).toEqual(['m-permanent']);
  });

  it('reports a permanent failure parked without its error, and a held message that ran', () => {
    const v = whats(
      facts({
        effects: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1], ['m-held', 1]]),
        markers: new Set(['m-ok', 'm-transient', 'm-wait', 'm-held']),
        retryRows: [],
        broker: { queues: [], parked: [{ ...parkedCopy, errorMessage: '' }] },
      }),
    );
    expect(v).toEqual(['parked without its failure (reason, error class or message wrong) m-permanent', 'ran although its tenant is held m-held', 'meant to stay paused in the retry table, is not there as such m-held']);
  });

  it('reports rows left in the retry table, an outbox not drained, and a run that never came to rest', () => {
    const v = whats(facts({ retryRows: [heldRow, { ...heldRow, message_id: 'm-wait', paused: false, tenant: null }], outboxLag: { pending: 3, failed: 0 }, settled: false }));
    expect(v).toEqual(['left in the retry table m-wait', 'the pipeline did not come to rest before the timeout -', 'outbox not drained: 3 pending, 0 flagged -']);
  });
});

describe('the plan', () => {
  it('is the same for the same seed, with exact shares of each kind', () => {
    const a = planMessages(2000, 42);
    expect(planMessages(2000, 42)).toEqual(a);
    expect(planMessages(2000, 43)).not.toEqual(a);
    const count = (kind: string) => a.filter((m) => m.kind === kind).length;
    expect([count('transient'), count('permanent'), count('wait'), count('held')]).toEqual([400, 20, 60, 2]);
  });
});
