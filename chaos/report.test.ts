import { describe, expect, it } from 'vitest';
import type { ArchiveRowState, ExpectedRow, RetryRowState } from './db.js';
import { chaosWindowMs, INGESTER_KILLS, planChaos, planMessages } from './plan.js';
import { check, type ArchiveFacts, type ParkedCopy, type RunFacts } from './report.js';

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

// With the failure archive the parked copies are its rows. Its identity column is unique
// per consumer, so a parking stored twice can only show in the identity computed again
// from the stored headers and body (the run fills recomputedIdentity with parkedIdentity).
const archived: ArchiveRowState = {
  id: '1',
  messageId: 'm-permanent',
  consumer: 'chaos.orders',
  state: 'open',
  identity: 'm-permanent 0a1b',
  recomputedIdentity: 'm-permanent 0a1b',
  reason: 'permanent-error',
  errorClass: 'PermanentError',
  errorMessage: 'chaos: message 2 fails for good',
  attempts: 1,
  parkedAt: '2026-12-02T10:00:00.000Z',
  replays: 0,
};

/** A run with the archive: the permanent failure archived, replayed and handled once after. */
function withArchive(change: Partial<ArchiveFacts> = {}, run: Partial<RunFacts> = {}): RunFacts {
  const rows = change.rows ?? [archived];
  const archive: ArchiveFacts = {
    rows,
    effectsBefore: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1]]),
    replay: { matched: rows.length, replayed: rows.length, alreadyDone: 0, stopReason: 'done', error: undefined },
    replaySettled: true,
    after: rows.map((r) => ({ ...r, state: 'replayed' as const })),
    ingesterTotals: { archived: rows.length, duplicates: 0, batches: rows.length },
    ...change,
  };
  const f = facts({
    effects: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1], ['m-permanent', rows.length > 0 ? 1 : 0]]),
    markers: new Set(['m-ok', 'm-transient', 'm-wait', ...(rows.length > 0 ? ['m-permanent'] : [])]),
    ...run,
  });
  // The parked queue passed everything on to the archive.
  return { ...f, archive, broker: run.broker ?? { queues: f.broker.queues.map((q) => ({ ...q, messages: 0 })), parked: [] } };
}

describe('the chaos check with the failure archive', () => {
  it('passes a run whose permanent failure was archived once, then replayed and handled once', () => {
    expect(check(withArchive()).violations).toEqual([]);
  });

  it('fails a parking stored in two rows, though the rows have different identities', () => {
    // What the archive's unique key cannot catch: a copy that came again after a kill of
    // the ingester, stored under a second identity.
    const doubled = { ...archived, id: '2', identity: 'm-permanent 9f9f' };
    const v = whats(withArchive({ rows: [archived, doubled] }));
    expect(v).toContain('archived twice: one parking (the same stored headers and body) in 2 archive rows m-permanent');
    expect(v).toContain("an archive row whose identity is not its stored message's m-permanent");
    expect(check(withArchive({ rows: [archived, doubled] })).rows.find((r) => r.check.startsWith('archive rows'))?.ok).toBe(false);
  });

  it('fails a parking missing from the archive (acked before its insert committed)', () => {
    const v = whats(withArchive({ rows: [], replay: { matched: 0, replayed: 0, alreadyDone: 0, stopReason: 'done', error: undefined } }));
    expect(v).toEqual(['lost: meant to be parked and archived, but is nowhere m-permanent']);
  });

  it('fails a parked copy the ingester left in the parked queue', () => {
    const queues = [{ name: 'chaos.orders', messages: 0, unacked: 0, consumers: 0 }, { name: 'chaos.orders.parked', messages: 1, unacked: 0, consumers: 0 }];
    const v = whats(withArchive({ rows: [], replay: { matched: 0, replayed: 0, alreadyDone: 0, stopReason: 'done', error: undefined } }, { broker: { queues, parked: [parkedCopy] } }));
    expect(v).toEqual(['parked, never archived: left in the parked queue m-permanent', 'queue chaos.orders.parked holds 1 messages, expected 0 -']);
  });

  it('shows two parkings of one message (two park times) as a note, each replayed, the work done once', () => {
    const second = { ...archived, id: '2', identity: 'm-permanent 7c7c', recomputedIdentity: 'm-permanent 7c7c', parkedAt: '2026-12-02T10:00:01.000Z' };
    const result = check(withArchive({ rows: [archived, second] }));
    expect(result.violations).toEqual([]);
    expect(result.notes.map((n) => n.messageId)).toEqual(['m-permanent']);
  });

  it('fails a replayed message handled twice, one never handled, one parked again, and a replay cut short', () => {
    expect(whats(withArchive({}, { effects: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1], ['m-permanent', 2]]) }))).toEqual(['doubled: the handler committed 2 times m-permanent']);
    expect(whats(withArchive({}, { effects: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1]]) }))).toEqual(['replayed from the archive, never handled m-permanent']);
    const again = { ...archived, id: '3', identity: 'm-permanent 5d5d', recomputedIdentity: 'm-permanent 5d5d', replays: 1 };
    expect(whats(withArchive({ after: [{ ...archived, state: 'replayed' }, again] }))).toEqual(['parked again after its replay from the archive (1 new row) m-permanent']);
    expect(whats(withArchive({ replay: { matched: 1, replayed: 0, alreadyDone: 0, stopReason: 'failed', error: 'the broker did not confirm the copies' }, after: [archived] }))).toEqual([
      'an archive row not replayed (still open after the replay) m-permanent',
      'the replay from the archive sent 0 and skipped 0 of 1 open rows (failed) -',
    ]);
  });

  it('fails a permanent failure that had a side effect before its replay', () => {
    expect(whats(withArchive({ effectsBefore: new Map([['m-ok', 1], ['m-transient', 1], ['m-wait', 1], ['m-permanent', 1]]) }))).toEqual(['a permanent failure had a side effect before its replay m-permanent']);
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

  it('kills the archive ingester three times, within the window', () => {
    const kills = planChaos(2000, 42, { postgres: true }).filter((e) => e.kind === 'kill-ingester');
    expect(kills).toHaveLength(INGESTER_KILLS.length);
    for (const k of kills) expect(k.at).toBeGreaterThan(0);
    expect(kills.every((k) => k.at < chaosWindowMs(2000))).toBe(true);
  });
});
