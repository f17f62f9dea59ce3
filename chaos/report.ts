/**
 * The end of a chaos run: what each message was meant to do, against what the database
 * and the broker hold; the table printed, and every violation with its message ids and
 * the evidence. Pure: facts in, verdict and text out.
 */
import { HELD_TENANT, type ChaosEvent } from './plan.js';
import type { ArchiveRowState, ExpectedRow, OutboxState, RetryRowState } from './db.js';

/** One copy of a message in the parked queue. */
export interface ParkedCopy {
  readonly messageId: string;
  readonly reason: string;
  readonly errorClass: string;
  readonly errorMessage: string;
  readonly attempts: number;
}

export interface BrokerState {
  readonly queues: ReadonlyArray<{ name: string; messages: number; unacked: number; consumers: number }>;
  readonly parked: readonly ParkedCopy[];
}

/** One cluster node out, and how each consumer went through it (times in ms). */
export interface Failover {
  readonly what: string;
  readonly node: string;
  readonly how: 'stop' | 'kill';
  /** How long the clean stop took (0 for kill -9), and the start until the node was a running member again. */
  readonly stopMs: number;
  readonly startMs: number;
  readonly consumers: ReadonlyArray<{
    readonly name: string;
    /** The node its connection was on when the fault began. */
    readonly node: string;
    readonly onStopped: boolean;
    /** The run also SIGKILLed it while the node was out. */
    readonly restartedByRun: boolean;
    /** From the fault to the consumer seeing its connection go; absent when it kept it. */
    readonly lostAfterMs: number | undefined;
    /** From the loss to being attached on another node, and to its first handler run there. */
    readonly attachMs: number | undefined;
    readonly attachedTo: string | undefined;
    readonly resumeMs: number | undefined;
    /** The longest gap between two handler runs while the node was out. */
    readonly longestPauseMs: number | undefined;
  }>;
}

/** The failure archive: what it held once the pipeline was at rest, the replay of it, and after. */
export interface ArchiveFacts {
  /** Every row when the pipeline first came to rest: the parked copies, one row per parking. */
  readonly rows: readonly ArchiveRowState[];
  /** Committed handler runs per message id before the replay (`effects` of the run are after it). */
  readonly effectsBefore: ReadonlyMap<string, number>;
  /** The replay of every open row; undefined when it could not be started (`replayError`). */
  readonly replay: { readonly matched: number; readonly replayed: number; readonly alreadyDone: number; readonly stopReason: string; readonly error: string | undefined } | undefined;
  readonly replayError?: string;
  /** The pipeline came to rest again after the replay. */
  readonly replaySettled: boolean;
  /** Every row after the replay. */
  readonly after: readonly ArchiveRowState[];
  /** The ingester's counters, summed over its processes (archived, duplicates, batches), and `midBatchKills`: its deaths between a commit and the ack. */
  readonly ingesterTotals: Readonly<Record<string, number>>;
}

/** Everything the run saw, for the check and the table. */
export interface RunFacts {
  readonly seed: number;
  readonly messages: number;
  readonly brokerLabel: string;
  readonly storeLabel: string;
  readonly expected: readonly ExpectedRow[];
  /** Committed handler runs per message id (a table without a unique constraint). */
  readonly effects: ReadonlyMap<string, number>;
  /** Idempotency markers present. */
  readonly markers: ReadonlySet<string>;
  readonly retryRows: readonly RetryRowState[];
  readonly outbox: readonly OutboxState[];
  readonly outboxLag: { readonly pending: number; readonly failed: number };
  /** The parked queue at the end: with the archive (`archive`), every copy should have left it. */
  readonly broker: BrokerState;
  /**
   * With the failure archive: the parked copies are its rows, the parked queue must be
   * empty, and every permanent failure, replayed from the archive, must be handled once.
   */
  readonly archive?: ArchiveFacts;
  readonly produced: { readonly outbox: number; readonly publisher: number } | undefined;
  readonly settled: boolean;
  readonly faults: ReadonlyArray<{ kind: ChaosEvent['kind']; ok: boolean; detail: string; tookMs: number; at: string }>;
  readonly unexpectedExits: readonly string[];
  readonly restarts: Readonly<Record<string, number>>;
  readonly consumerTotals: Readonly<Record<string, number>>;
  readonly relayTotals: Readonly<Record<string, number>>;
  readonly schedulerTotals: Readonly<Record<string, number>>;
  /** Cluster runs: the node faults, with each consumer's resume time. */
  readonly failovers?: readonly Failover[];
  /**
   * Cluster runs: quorum queues that held dead-lettered messages without moving them for
   * 30 s, and whose leader replica the run restarted to free them.
   */
  readonly heldDeadLetters?: ReadonlyArray<{ queue: string; leader: string; messages: number; heldMs: number }>;
  /** `replayMs`: the archive's replay and the wait for its copies to be handled. */
  readonly timings: { readonly faultsMs: number; readonly settleMs: number; readonly replayMs?: number; readonly totalMs: number };
}

/** What went wrong with one message. */
export interface Violation {
  readonly what: string;
  readonly seq: number | null;
  readonly messageId: string;
  readonly evidence: string;
}

export interface CheckResult {
  readonly rows: ReadonlyArray<{ check: string; expected: string; found: string; ok: boolean }>;
  readonly violations: readonly Violation[];
  /** Not violations, but worth a look: duplicates the design allows. */
  readonly notes: readonly Violation[];
}

/** Compares what each message was meant to do with what happened to it. */
export function check(f: RunFacts): CheckResult {
  const violations: Violation[] = [];
  const a = f.archive;
  // The parked copies: the archive's rows when there is one (the parked queue is only passed through), else the queue's.
  const copies: readonly ParkedCopy[] = a ? a.rows : f.broker.parked;
  const parkedBy = new Map<string, ParkedCopy[]>();
  for (const p of copies) parkedBy.set(p.messageId, [...(parkedBy.get(p.messageId) ?? []), p]);
  // One parking stored in two rows: the archive keys rows by identity, unique per consumer,
  // so that column cannot show it; the identity computed again from each row's stored
  // headers and body (message id, park and failure times, replays, body) does.
  const rowsByParking = new Map<string, ArchiveRowState[]>();
  for (const r of a?.rows ?? []) {
    const key = `${r.consumer} ${r.recomputedIdentity}`;
    rowsByParking.set(key, [...(rowsByParking.get(key) ?? []), r]);
  }
  const doubledRows = new Map<string, number>();
  for (const rs of rowsByParking.values()) if (rs.length > 1) doubledRows.set(rs[0]?.messageId ?? '', (doubledRows.get(rs[0]?.messageId ?? '') ?? 0) + rs.length - 1);
  const distinctParkings = (id: string) => new Set((parkedBy.get(id) ?? []).map((p) => ('recomputedIdentity' in p ? String(p.recomputedIdentity) : JSON.stringify(p)))).size;
  const inQueue = new Map<string, number>();
  if (a) for (const p of f.broker.parked) inQueue.set(p.messageId, (inQueue.get(p.messageId) ?? 0) + 1);
  const afterBy = new Map((a?.after ?? []).map((r) => [r.id, r] as const));
  const beforeIds = new Set((a?.rows ?? []).map((r) => r.id));
  const rowBy = new Map<string, RetryRowState[]>();
  for (const r of f.retryRows) rowBy.set(r.message_id, [...(rowBy.get(r.message_id) ?? []), r]);
  const outboxBy = new Map<string, OutboxState[]>();
  for (const o of f.outbox) outboxBy.set(o.message_id, [...(outboxBy.get(o.message_id) ?? []), o]);
  const known = new Set(f.expected.map((e) => e.message_id));

  const evidence = (e: ExpectedRow): string => {
    const parts = [`kind ${e.kind}`, `via ${e.via}`, `side effects ${f.effects.get(e.message_id) ?? 0}`, `marker ${f.markers.has(e.message_id) ? 'yes' : 'no'}`];
    const parked = parkedBy.get(e.message_id) ?? [];
    parts.push(parked.length ? `${a ? 'archived' : 'parked'} ×${parked.length} (${parked.map((p) => `${p.reason}: ${p.errorClass} ${JSON.stringify(p.errorMessage.slice(0, 80))}`).join('; ')})` : a ? 'not archived' : 'not parked');
    if (a) {
      const rows = a.rows.filter((r) => r.messageId === e.message_id);
      if (rows.length) parts.push(`archive rows ${rows.map((r) => `#${r.id} ${r.state} → ${afterBy.get(r.id)?.state ?? 'gone'}, parked at ${r.parkedAt || '?'}${r.identity === r.recomputedIdentity ? '' : ', identity differs from its bytes'}`).join('; ')}`);
      const again = a.after.filter((r) => r.messageId === e.message_id && !beforeIds.has(r.id));
      if (again.length) parts.push(`parked again after the replay ×${again.length} (${again.map((r) => `${r.reason}: ${r.errorClass}`).join('; ')})`);
      if (inQueue.has(e.message_id)) parts.push(`left in the parked queue ×${inQueue.get(e.message_id)}`);
      if (a.effectsBefore.has(e.message_id) || e.kind === 'permanent') parts.push(`side effects before the replay ${a.effectsBefore.get(e.message_id) ?? 0}`);
    }
    const rows = rowBy.get(e.message_id) ?? [];
    parts.push(rows.length ? `retry table ${rows.map((r) => `${r.paused ? 'paused' : 'unpaused'} ${r.dependency}/${r.tenant ?? '-'} waits ${r.waits}`).join('; ')}` : 'no retry-table row');
    const ob = outboxBy.get(e.message_id) ?? [];
    parts.push(ob.length ? `outbox ${ob.map((o) => (o.failed ? 'flagged' : o.sent ? 'sent' : 'pending') + ` after ${o.attempts} attempts`).join('; ')}` : 'no outbox row');
    return parts.join(', ');
  };
  const add = (what: string, e: ExpectedRow) => violations.push({ what, seq: e.seq, messageId: e.message_id, evidence: evidence(e) });

  let once = 0;
  let lost = 0;
  let doubled = 0;
  let parkedRight = 0;
  let parkedWrong = 0;
  let heldRight = 0;
  let shouldPark = 0;
  let shouldHold = 0;
  let shouldRun = 0;
  let extraCopies = 0;
  let archivedTwice = 0;
  let replayedOnce = 0;
  let parkedAgain = 0;
  const notes: Violation[] = [];
  const againBy = new Map<string, number>();
  for (const r of a?.after ?? []) if (!beforeIds.has(r.id)) againBy.set(r.messageId, (againBy.get(r.messageId) ?? 0) + 1);
  for (const e of f.expected) {
    const effects = f.effects.get(e.message_id) ?? 0;
    const parked = parkedBy.get(e.message_id) ?? [];
    const rows = rowBy.get(e.message_id) ?? [];
    if (effects > 1) {
      doubled++;
      add(`doubled: the handler committed ${effects} times`, e);
    }
    if (effects > 0 && !f.markers.has(e.message_id)) add('side effect without an idempotency marker', e);
    const again = againBy.get(e.message_id) ?? 0;
    if (again > 0) {
      parkedAgain += again;
      add(`parked again after its replay from the archive (${again} new row${again > 1 ? 's' : ''})`, e);
    }
    if (e.kind === 'permanent') {
      shouldPark++;
      // With the archive, a permanent failure is replayed at the end and succeeds then: before that, no side effect.
      const effectsParked = a ? (a.effectsBefore.get(e.message_id) ?? 0) : effects;
      if (effectsParked > 0) add(a ? 'a permanent failure had a side effect before its replay' : 'a permanent failure had a side effect', e);
      if (parked.length === 0 && (inQueue.get(e.message_id) ?? 0) > 0) add('parked, never archived: left in the parked queue', e);
      else if (parked.length === 0 && rows.length === 0 && effectsParked === 0) {
        lost++;
        add(a ? 'lost: meant to be parked and archived, but is nowhere' : 'lost: meant to be parked, but is nowhere', e);
      } else if (parked.length === 0) add(a ? 'meant to be parked and archived, not archived' : 'meant to be parked, not parked', e);
      else if (parked.some((p) => p.reason !== 'permanent-error' || p.errorClass !== 'PermanentError' || !p.errorMessage.includes(`message ${e.seq} fails for good`))) {
        add('parked without its failure (reason, error class or message wrong)', e);
      } else {
        parkedRight++;
        // A move is publish-with-confirm, then ack: when the confirm is lost (the channel
        // closed, the broker restarted), the original comes back and is parked again.
        // DESIGN invariant 6 allows that duplicate; it is shown, not failed.
        // With the archive, each parking is one row: copies of one parking in two rows are a violation (below), not a note.
        const parkings = a ? distinctParkings(e.message_id) : parked.length;
        if (parkings > 1) {
          extraCopies += parkings - 1;
          notes.push({ what: `parked ${parkings} times (identical copies: a move whose confirm was lost, see invariant 6)`, seq: e.seq, messageId: e.message_id, evidence: evidence(e) });
        }
      }
      const twice = doubledRows.get(e.message_id) ?? 0;
      if (twice > 0) {
        archivedTwice += twice;
        add(`archived twice: one parking (the same stored headers and body) in ${twice + 1} archive rows`, e);
      }
      if (rows.length > 0) add('meant to be parked, left in the retry table', e);
      if (a && parked.length > 0) {
        if (effects === 1) replayedOnce++;
        else if (effects === 0) add('replayed from the archive, never handled', e);
        const open = a.rows.filter((r) => r.messageId === e.message_id && afterBy.get(r.id)?.state !== 'replayed' && afterBy.get(r.id)?.state !== 'resolved');
        if (open.length > 0) add('an archive row not replayed (still open after the replay)', e);
      }
      continue;
    }
    if (parked.length > 0) {
      parkedWrong++;
      add(`parked but not meant to be (${parked.map((p) => p.reason).join(', ')})`, e);
    }
    if (e.kind === 'held') {
      shouldHold++;
      if (effects > 0) add('ran although its tenant is held', e);
      if (rows.length === 1 && rows[0]?.paused && rows[0].tenant === HELD_TENANT) heldRight++;
      else if (rows.length === 0 && parked.length === 0 && effects === 0) {
        lost++;
        add('lost: meant to stay paused in the retry table, but is nowhere', e);
      } else add('meant to stay paused in the retry table, is not there as such', e);
      continue;
    }
    shouldRun++;
    if (effects === 1) once++;
    if (rows.length > 0) add('left in the retry table', e);
    if (effects === 0 && parked.length === 0) {
      lost++;
      add(rows.length > 0 ? 'wedged: never ran, still in the retry table' : 'lost: no side effect, not parked, not waiting', e);
    }
  }

  // Anything the run did not publish.
  const strangers = new Set<string>();
  for (const id of f.effects.keys()) if (!known.has(id)) strangers.add(id);
  for (const p of [...copies, ...(a ? f.broker.parked : [])]) if (!known.has(p.messageId)) strangers.add(p.messageId);
  for (const r of a?.after ?? []) if (!known.has(r.messageId)) strangers.add(r.messageId);
  for (const r of f.retryRows) if (!known.has(r.message_id)) strangers.add(r.message_id);
  for (const id of strangers) violations.push({ what: 'a message id the producer never recorded', seq: null, messageId: id, evidence: `side effects ${f.effects.get(id) ?? 0}, parked ×${parkedBy.get(id)?.length ?? 0}, retry rows ${rowBy.get(id)?.length ?? 0}` });

  const expectedCount = f.messages;
  if (f.expected.length !== expectedCount) violations.push({ what: `the producer recorded ${f.expected.length} of ${expectedCount} messages`, seq: null, messageId: '-', evidence: 'see producer.log' });
  if (!f.settled) violations.push({ what: 'the pipeline did not come to rest before the timeout', seq: null, messageId: '-', evidence: 'see the last progress line above' });
  if (a) {
    for (const r of a.rows) {
      if (r.identity !== r.recomputedIdentity) violations.push({ what: "an archive row whose identity is not its stored message's", seq: null, messageId: r.messageId, evidence: `row #${r.id}: identity ${r.identity}, computed again from its headers and body ${r.recomputedIdentity}` });
    }
    const open = a.rows.filter((r) => r.state === 'open').length;
    if (a.replay === undefined) violations.push({ what: 'the replay from the archive could not be run', seq: null, messageId: '-', evidence: a.replayError ?? 'unknown' });
    else if (a.replay.stopReason !== 'done' || a.replay.replayed + a.replay.alreadyDone !== open) {
      violations.push({ what: `the replay from the archive sent ${a.replay.replayed} and skipped ${a.replay.alreadyDone} of ${open} open rows (${a.replay.stopReason})`, seq: null, messageId: '-', evidence: a.replay.error ?? 'replay result' });
    }
    if (!a.replaySettled) violations.push({ what: 'the pipeline did not come to rest after the replay', seq: null, messageId: '-', evidence: 'see the last progress line above' });
  }

  const queueRows = f.broker.queues.map((q) => {
    const isParked = q.name.endsWith('.parked');
    // With the archive, the parked queue is passed through: everything in it is ingested.
    const want = isParked && !a ? shouldPark + extraCopies : 0;
    return { name: q.name, messages: q.messages, want, label: isParked && !a && extraCopies > 0 ? `${shouldPark} + ${extraCopies} duplicate` : undefined };
  });
  for (const q of queueRows) if (q.messages !== q.want) violations.push({ what: `queue ${q.name} holds ${q.messages} messages, expected ${q.want}`, seq: null, messageId: '-', evidence: 'management API' });
  const unheldRows = f.retryRows.filter((r) => r.tenant !== HELD_TENANT || !r.paused).length;
  if (f.outboxLag.pending !== 0 || f.outboxLag.failed !== 0) violations.push({ what: `outbox not drained: ${f.outboxLag.pending} pending, ${f.outboxLag.failed} flagged`, seq: null, messageId: '-', evidence: 'outbox lag()' });
  for (const x of f.unexpectedExits) violations.push({ what: 'a process died on its own', seq: null, messageId: '-', evidence: x });

  const n = (x: number) => x.toLocaleString('en-US');
  const rows = [
    { check: 'messages recorded by the producer (outbox / publisher)', expected: n(expectedCount), found: `${n(f.expected.length)} (${n(f.expected.filter((e) => e.via === 'outbox').length)} / ${n(f.expected.filter((e) => e.via === 'publisher').length)})`, ok: f.expected.length === expectedCount },
    { check: 'side effect exactly once', expected: n(shouldRun), found: n(once), ok: once === shouldRun },
    { check: 'lost (no side effect, not parked, not waiting)', expected: '0', found: n(lost), ok: lost === 0 },
    { check: 'doubled (handler committed twice, counted without a unique key)', expected: '0', found: n(doubled), ok: doubled === 0 },
    { check: a ? 'parked with their failure (permanent), in the archive' : 'parked with their failure (permanent)', expected: n(shouldPark), found: n(parkedRight), ok: parkedRight === shouldPark },
    ...(a
      ? [
          { check: 'archive rows (one per parking)', expected: extraCopies > 0 ? `${n(shouldPark)} + ${n(extraCopies)} duplicate` : n(shouldPark), found: n(a.rows.length), ok: a.rows.length === shouldPark + extraCopies },
          { check: 'archived twice (identity computed again from headers and body)', expected: '0', found: n(archivedTwice), ok: archivedTwice === 0 },
          { check: 'replayed from the archive, then handled exactly once', expected: n(shouldPark), found: n(replayedOnce), ok: replayedOnce === shouldPark },
          { check: 'parked again after the replay', expected: '0', found: n(parkedAgain), ok: parkedAgain === 0 },
        ]
      : []),
    { check: 'parked, not meant to be', expected: '0', found: n(parkedWrong), ok: parkedWrong === 0 },
    { check: `left paused in the retry table (tenant ${HELD_TENANT})`, expected: n(shouldHold), found: n(heldRight), ok: heldRight === shouldHold },
    { check: 'retry table, any other row', expected: '0', found: n(unheldRows), ok: unheldRows === 0 },
    { check: 'outbox pending / flagged', expected: '0 / 0', found: `${n(f.outboxLag.pending)} / ${n(f.outboxLag.failed)}`, ok: f.outboxLag.pending === 0 && f.outboxLag.failed === 0 },
    ...queueRows.map((q) => ({ check: `queue ${q.name}`, expected: q.label ?? n(q.want), found: n(q.messages), ok: q.messages === q.want })),
    { check: 'duplicate parked copies (allowed, see below)', expected: '-', found: n(extraCopies), ok: true },
    ...(a ? [{ check: 'copies the ingester found archived already (a kill between insert and ack)', expected: '-', found: n(a.ingesterTotals['duplicates'] ?? 0), ok: true }] : []),
    { check: 'messages of unknown id', expected: '0', found: n(strangers.size), ok: strangers.size === 0 },
    { check: 'processes that died on their own', expected: '0', found: n(f.unexpectedExits.length), ok: f.unexpectedExits.length === 0 },
    ...(f.heldDeadLetters
      ? [{ check: 'dead-lettered messages held by the broker until a replica restart (see below)', expected: '-', found: n(f.heldDeadLetters.reduce((k, h) => k + h.messages, 0)), ok: true }]
      : []),
    { check: 'pipeline at rest before the timeout', expected: 'yes', found: f.settled ? 'yes' : 'no', ok: f.settled },
  ];
  return { rows, violations, notes };
}

function table(header: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

/** The table, the faults injected, the counters, and every violation with its evidence. */
export function renderReport(f: RunFacts, r: CheckResult): string {
  const count = (kind: ChaosEvent['kind']) => {
    const all = f.faults.filter((x) => x.kind === kind);
    const ok = all.filter((x) => x.ok);
    return `${ok.length}${all.length > ok.length ? ` (${all.length - ok.length} not done: ${all.filter((x) => !x.ok).map((x) => x.detail).join('; ')})` : ''}`;
  };
  const took = (kind: ChaosEvent['kind']) => {
    const x = f.faults.filter((y) => y.kind === kind && y.ok);
    return x.length ? `, ${x.map((y) => `${(y.tookMs / 1000).toFixed(0)} s`).join(', ')} down` : '';
  };
  const s = (ms: number) => `${Math.round(ms / 1000)} s`;
  const c = f.consumerTotals;
  const out: string[] = [];
  out.push(`Chaos run, seed ${f.seed}: ${f.messages.toLocaleString('en-US')} messages, ${f.brokerLabel}, ${f.storeLabel} store — ${r.violations.length === 0 ? 'PASS' : `FAIL (${r.violations.length} violations)`}`);
  out.push('');
  out.push(table(['check', 'expected', 'found', ''], r.rows.map((x) => [x.check, x.expected, x.found, x.ok ? 'ok' : 'FAIL'])));
  out.push('');
  const cluster = f.faults.some((x) => x.kind.endsWith('-node'));
  const brokerFaults = cluster
    ? `node of consumer-1 stopped ${count('stop-consumer-node')}, work queue's leader node stopped ${count('stop-leader-node')}, leader node killed (kill -9) ${count('kill-node')}${took('kill-node')}`
    : `broker restarts ${count('restart-broker')}${took('restart-broker')}, broker killed (kill -9) and started ${count('kill-broker')}${took('kill-broker')}`;
  out.push(
    `Faults: consumers SIGKILLed ${count('kill-consumer')}, connections closed ${count('close-connection')}, ${brokerFaults}, ` +
      `PostgreSQL restarts ${f.faults.some((x) => x.kind === 'restart-postgres') ? count('restart-postgres') + took('restart-postgres') : 'none (SQLite store)'}, relay SIGKILLed ${count('kill-relay')}, scheduler SIGKILLed ${count('kill-scheduler')}, ${f.archive ? `archive ingester SIGKILLed ${count('kill-ingester')}, killed between a committed batch and its ack ${f.archive.ingesterTotals['midBatchKills'] ?? 0} of ${count('kill-ingester-mid-batch')}, ` : ''}inventory outages ${count('inventory-down')}.`,
  );
  out.push(`Process starts after the first: ${Object.entries(f.restarts).map(([k, v]) => `${k} ${v}`).join(', ')}.`);
  out.push(
    `Consumers (summed over every process; a killed one's last half second is not counted): handler runs ${c['runs'] ?? 0}, committed ${c['committed'] ?? 0}, acked ${c['acked'] ?? 0}, duplicates skipped ${c['duplicate'] ?? 0}, ` +
      `retried ${c['retried'] ?? 0}, parked ${c['parked'] ?? 0}, to the retry table ${c['waiting'] ?? 0}, redeliveries moved ${c['redelivery-moved'] ?? 0}, requeued ${c['requeued'] ?? 0}.`,
  );
  out.push(`Relay published ${f.relayTotals['published'] ?? 0} rows; scheduler moved ${f.schedulerTotals['moved'] ?? 0} rows back, health check paused inventory ${f.schedulerTotals['health_paused'] ?? 0} and resumed it ${f.schedulerTotals['health_resumed'] ?? 0} times.`);
  if (f.archive) {
    const t = f.archive.ingesterTotals;
    const r = f.archive.replay;
    out.push(
      `Archive (summed over every ingester process; a killed one's last half second is not counted): stored ${t['archived'] ?? 0} parkings in ${t['batches'] ?? 0} transactions, found ${t['duplicates'] ?? 0} copies archived already; ` +
        (r ? `the replay of ${r.matched} rows sent ${r.replayed}, skipped ${r.alreadyDone} as done (${r.stopReason}${r.error ? `: ${r.error}` : ''}).` : `no replay (${f.archive.replayError ?? 'not run'}).`),
    );
  }
  for (const fo of f.failovers ?? []) {
    out.push(`Failover, ${fo.what} (${fo.how === 'stop' ? `stop ${s(fo.stopMs)}, ` : ''}back as a member after ${s(fo.startMs)}):`);
    for (const c of fo.consumers) {
      out.push(
        `  ${c.name} on ${c.node}${c.onStopped ? ' (the node out)' : ''}: ` +
          (c.lostAfterMs === undefined ? 'kept its connection' : `lost its connection after ${c.lostAfterMs} ms, attached on ${c.attachedTo ?? '?'} ${c.attachMs ?? '?'} ms later, resumed (first handler run there) ${c.resumeMs === undefined ? '(not seen)' : `${c.resumeMs} ms`} after the loss`) +
          `; longest pause in handling ${c.longestPauseMs === undefined ? '-' : `${c.longestPauseMs} ms`}${c.restartedByRun ? ' (also SIGKILLed by the run meanwhile)' : ''}`,
      );
    }
  }
  if (f.heldDeadLetters && f.heldDeadLetters.length > 0) {
    out.push(
      `Dead-lettered messages held by the broker: ${f.heldDeadLetters.map((h) => `${h.queue} held ${h.messages} for ${s(h.heldMs)} (leader ${h.leader})`).join('; ')}. ` +
        `The queue kept them (at-least-once dead-lettering: nothing was lost) but did not move them on until the run restarted its leader replica; every message was then checked like the rest.`,
    );
  }
  out.push(`Time: faults ${s(f.timings.faultsMs)}, coming to rest ${s(f.timings.settleMs)}, ${f.timings.replayMs === undefined ? '' : `replay from the archive ${s(f.timings.replayMs)}, `}whole run ${s(f.timings.totalMs)} (services included).`);
  if (r.notes.length > 0) {
    out.push('');
    out.push('Notes (allowed by the design, shown so they can be looked at):');
    for (const v of r.notes.slice(0, 20)) out.push(`  - ${v.what} — message #${v.seq ?? '-'} ${v.messageId}: ${v.evidence}`);
    if (r.notes.length > 20) out.push(`  ... and ${r.notes.length - 20} more in report.json`);
  }
  if (r.violations.length > 0) {
    out.push('');
    out.push(`Violations (${r.violations.length}; repeat with --seed ${f.seed}):`);
    const shown = r.violations.slice(0, 40);
    for (const v of shown) out.push(`  - ${v.what}${v.seq === null ? '' : ` — message #${v.seq} ${v.messageId}`}: ${v.evidence}`);
    if (r.violations.length > shown.length) out.push(`  ... and ${r.violations.length - shown.length} more in report.json`);
  }
  return out.join('\n');
}
