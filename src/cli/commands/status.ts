import { formatDuration } from '../../retry/ladder.js';
import { readStatus, type QueueState } from '../../status/index.js';
import type { RetrySignals } from '../../retry-table/index.js';
import type { ConsumerPauseRow } from '../../breaker/control.js';
import type { BreakerStateRow } from '../../breaker/share.js';
import type { ArchiveCounts } from '../../store/archive.js';
import type { OutboxLag } from '../../store/index.js';
import { DB_FLAGS, str, type ParsedValues } from '../args.js';
import type { Command, CommandContext } from '../command.js';
import { databaseSettings, describeDatabaseError, describeNode, nodeOfConnection, openDatabase } from '../context.js';
import { EXIT, UsageError } from '../errors.js';
import { count, relative, span, table } from '../format.js';

const DEFAULT_MAX_DUE_AGE_MS = 5 * 60_000;
const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;

/** `--max-due-age`: 90s, 5m, 1h; default 5m. */
export function maxDueAgeOf(values: ParsedValues): number {
  const raw = str(values, 'max-due-age');
  if (raw === undefined) return DEFAULT_MAX_DUE_AGE_MS;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(raw);
  const ms = m ? Math.round(Number(m[1]) * UNIT_MS[(m[2] ?? 'ms') as keyof typeof UNIT_MS]) : NaN;
  if (!Number.isFinite(ms) || ms < 1) throw new UsageError(`--max-due-age: ${JSON.stringify(raw)} is not a duration above 0 (e.g. 90s, 5m, 1h).`);
  return ms;
}

/** What the database adds to the status: the outbox and the retry table. */
export interface DatabaseStatus {
  readonly database: string;
  readonly outbox: OutboxLag;
  readonly retryTable: Omit<RetrySignals, 'byDependency'>;
  readonly maxDueAgeMs: number;
  /** The failure archive's counts per consumer (one query over its per-group counts): open failures wait for a person like parked messages. */
  readonly archive: readonly ArchiveCounts[];
  /** Consumers paused by hand in the database (`warren consumer pause`, the console): every consumer given `control: store.control` follows these. */
  readonly paused: readonly ConsumerPauseRow[];
  /** Breakers shared through the database (`breaker: { share: store.breakers }`) that are open now. */
  readonly breakers: readonly BreakerStateRow[];
  readonly problems: readonly DatabaseProblem[];
}

/** `outbox-flagged`: outbox rows the relay could not publish; `retry-overdue`: a due retry-table row older than --max-due-age. */
export interface DatabaseProblem {
  readonly kind: 'outbox-flagged' | 'retry-overdue';
  readonly message: string;
}

/** Reads the outbox and retry-table figures when --db (or WARREN_DB) is given; undefined otherwise. */
async function readDatabase(ctx: CommandContext): Promise<DatabaseStatus | undefined> {
  const maxDueAgeMs = maxDueAgeOf(ctx.values);
  const given = str(ctx.values, 'db') ?? ctx.io.env['WARREN_DB'];
  if (given === undefined || given.trim() === '') {
    if (str(ctx.values, 'max-due-age') !== undefined) throw new UsageError('--max-due-age applies to the retry table: give the database with --db (or WARREN_DB) too.');
    return undefined;
  }
  const db = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
  const store = await openDatabase(db);
  try {
    const outbox = await store.outbox.lag();
    const { byDependency: _, ...retryTable } = await store.retryTable.signals();
    const archive = await store.archive.counts();
    const paused = (await store.control.read()).filter((r) => r.paused);
    const breakers = (await store.breakers.read()).filter((r) => r.open);
    const problems: DatabaseProblem[] = [];
    if (outbox.failed > 0) problems.push({ kind: 'outbox-flagged', message: `${count(outbox.failed)} outbox row${outbox.failed === 1 ? ' is' : 's are'} flagged: the relay could not publish ${outbox.failed === 1 ? 'it' : 'them'} (see \`warren outbox list\`)` });
    if (retryTable.due > 0 && retryTable.oldestDueAgeMs > maxDueAgeMs) {
      problems.push({ kind: 'retry-overdue', message: `the oldest due retry-table row has been due for ${span(retryTable.oldestDueAgeMs)}, over ${span(maxDueAgeMs)} (--max-due-age): is a scheduler draining the table?` });
    }
    return { database: db.shown, outbox, retryTable, maxDueAgeMs, archive, paused, breakers, problems };
  } catch (error) {
    throw describeDatabaseError(error, db) ?? error;
  } finally {
    await store.close().catch(() => undefined);
  }
}

function n(value: number | undefined): string {
  return value === undefined ? '-' : count(value);
}

function rate(value: number | undefined): string {
  return value === undefined ? '-' : value.toFixed(2);
}

function row(role: string, q: QueueState): string[] {
  if (!q.exists) return [role, q.name, 'missing', '', '', ''];
  return [role, q.name, n(q.ready), n(q.unacked), n(q.consumers), rate(q.redeliverRate)];
}

export const status: Command = {
  path: ['status'],
  usage: '[CONSUMER...]',
  summary: 'queue depths, consumers and parked messages, per consumer',
  description: [
    'Shows a table per consumer: the work queue (ready, unacknowledged, consumers attached,',
    'redeliveries per second), each retry tier and the parked queue. Figures come from the',
    'management API when it answers; without it, depths and consumer counts come from AMQP',
    'and the output says what is missing.',
    '',
    'Exits 1 when anything is parked, a work queue has messages and no consumer, a',
    'declared queue or binding does not exist, or a work queue is bound from the exchange',
    'with a key the declaration does not name (bindings are read through the management',
    'API only): usable as a monitoring check.',
    '',
    "With --db (or WARREN_DB), it also reads the application's database: the outbox",
    '(rows pending, the age of the oldest, rows flagged as unpublishable) and the retry',
    'table (rows, due, paused, waiting for a person with no next attempt, how long the',
    'oldest due row has been due). A flagged outbox row is a problem, and so is a due',
    'row older than --max-due-age (default 5m). With a failure archive in that database',
    'the parked queue drains into it: each consumer shows its open failures in the archive',
    'beside the parked queue, and open failures count as parked (exit 1). A consumer',
    'paused by hand in that database (`warren consumer pause`) says so, with who and why,',
    'and is a problem too (exit 1): its messages wait until someone resumes it. So is a',
    'breaker shared through the database (`breaker: { share: store.breakers }`) while open.',
  ].join('\n'),
  flags: {
    ...DB_FLAGS,
    'max-due-age': { type: 'string', label: '--max-due-age DURATION', help: 'with --db: a due retry-table row older than this is a problem (e.g. 90s, 5m, 1h); default 5m' },
  },
  examples: ['warren status', 'warren status billing --json', 'warren status --db postgres://ops@db.internal/shop --max-due-age 10m', 'warren status || page-oncall "warren status: $(warren status 2>&1 | tail -n 3)"'],
  async run(ctx) {
    const topology = await ctx.topology();
    const names = ctx.args.length ? [...ctx.args] : undefined;
    if (names) for (const name of names) topology.consumer(name);
    const database = await readDatabase(ctx);
    const model = await ctx.connection();
    const node = nodeOfConnection(model);
    const read = await readStatus(model, topology, { management: ctx.management(), ...(names ? { consumers: names } : {}) });
    // With an archive the parked queue drains into the database: its open failures are parked messages too.
    const openOf = (consumer: string) => database?.archive.find((a) => a.consumer === consumer);
    const archived = (database === undefined ? [] : read.consumers).flatMap((c) => {
      const a = openOf(c.consumer);
      if (a === undefined || a.open === 0) return [];
      return [{ consumer: c.consumer, queue: 'archive', kind: 'parked' as const, message: `${count(a.open)} open failure${a.open === 1 ? '' : 's'} in the archive; see warren parked list ${c.consumer} --db URL --group` }];
    });
    // A hand pause is a problem to see: its messages wait in the work queue until someone resumes it.
    const pauseOf = (consumer: string) => database?.paused.find((r) => r.consumer === consumer);
    const paused: Array<{ consumer: string; queue: string; kind: 'paused' | 'breaker-open'; message: string }> = read.consumers.flatMap((c) => {
      const p = pauseOf(c.consumer);
      if (p === undefined) return [];
      const waiting = (c.work.ready ?? 0) + (c.work.unacked ?? 0);
      return [{ consumer: c.consumer, queue: c.work.name, kind: 'paused' as const, message: `paused by hand by ${p.actor} ${relative(p.since)}: ${p.reason}; ${count(waiting)} message${waiting === 1 ? '' : 's'} wait in ${c.work.name} (warren consumer resume ${c.consumer})` }];
    });
    const breakerOf = (consumer: string) => database?.breakers.find((r) => r.consumer === consumer);
    for (const c of read.consumers) {
      const b = breakerOf(c.consumer);
      if (b === undefined) continue;
      const waiting = (c.work.ready ?? 0) + (c.work.unacked ?? 0);
      paused.push({ consumer: c.consumer, queue: c.work.name, kind: 'breaker-open', message: `breaker open ${relative(b.since)} (shared through the database; opened by ${b.openedBy}): ${b.reason}; ${count(waiting)} message${waiting === 1 ? '' : 's'} wait in ${c.work.name} until a probe succeeds` });
    }
    const report =
      database === undefined
        ? read
        : { ...read, problems: [...read.problems, ...paused, ...archived, ...database.problems.map((p) => ({ consumer: 'database', queue: '', ...p }))], ok: read.ok && paused.length === 0 && archived.length === 0 && database.problems.length === 0 };
    if (ctx.json) {
      const broker = node && { url: node.url, address: node.address, server: node.server ?? null, tls: node.tls };
      ctx.printJson({ ...report, ...(broker ? { broker } : {}), ...(database === undefined ? {} : { database }) });
      return report.ok ? EXIT.ok : EXIT.failed;
    }
    const header = ['', 'queue', 'ready', 'unacked', 'consumers', 'redeliver/s'];
    const align = ['left', 'left', 'right', 'right', 'right', 'right'] as const;
    report.consumers.forEach((c, i) => {
      if (i > 0) ctx.out();
      const p = pauseOf(c.consumer);
      const b = breakerOf(c.consumer);
      const notes = [...(p === undefined ? [] : [`paused by hand by ${p.actor} ${relative(p.since)}: ${p.reason}`]), ...(b === undefined ? [] : [`breaker open ${relative(b.since)}: ${b.reason}`])];
      ctx.out(notes.length === 0 ? c.consumer : `${c.consumer}  (${notes.join('; ')})`);
      const rows = [row('work', c.work), ...c.retries.map((r) => row(`retry ${formatDuration(r.delayMs)}`, r)), row('parked', c.parked)];
      // A retry inside the queue: the messages the work queue has set aside, waiting for their time.
      const inQueue = topology.consumers.get(c.consumer)?.inQueue;
      if (inQueue !== undefined) rows.splice(1, 0, [`retry in queue ${formatDuration(inQueue.minMs)}..${formatDuration(inQueue.maxMs)}`, c.work.name, c.work.exists ? n(c.work.delayed) : '', '', '', '']);
      if (database) {
        const a = openOf(c.consumer);
        rows.push(['archive', a !== undefined && a.oldestOpenAt !== null ? `open, oldest ${span(Date.now() - a.oldestOpenAt.getTime())}` : 'open', count(a?.open ?? 0), '', '', '']);
      }
      for (const line of table(header, rows, align)) ctx.out(`  ${line}`);
    });
    if (report.source === 'amqp') {
      ctx.out();
      const why = report.managementUnavailable ?? 'it is unavailable';
      ctx.out(`Management API not used: ${why.charAt(0).toLowerCase()}${why.slice(1)}`);
      ctx.out(`Without it, ${report.missing.join(' and ')} are not shown (-) and bindings are not checked; depths and consumer counts come from AMQP.`);
    }
    if (database) {
      const o = database.outbox;
      const r = database.retryTable;
      ctx.out();
      ctx.out(`database (${database.database})`);
      const lines = table(
        ['', 'rows', 'pending', 'oldest', 'flagged', 'due', 'paused', 'waiting'],
        [
          ['outbox', count(o.pending + o.failed), count(o.pending), o.pending > 0 ? span(o.oldestPendingAgeMs) : '-', count(o.failed), '', '', ''],
          ['retry table', count(r.rows), '', r.due > 0 ? span(r.oldestDueAgeMs) : '-', '', count(r.due), count(r.paused), count(r.waiting)],
        ],
        ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
      );
      for (const line of lines) ctx.out(`  ${line}`);
    }
    ctx.out();
    if (node) ctx.out(`broker: ${describeNode(node)}`);
    if (report.ok) ctx.out(`OK: nothing parked, every work queue with messages has a consumer${report.bindingsChecked ? ', every binding as declared' : ''}${database ? `, no outbox row flagged, no retry-table row due for over ${span(database.maxDueAgeMs)}` : ''}.`);
    else {
      ctx.out(`${report.problems.length} problem${report.problems.length === 1 ? '' : 's'}:`);
      for (const p of report.problems) ctx.out(`  ! ${p.consumer}: ${p.message}`);
    }
    return report.ok ? EXIT.ok : EXIT.failed;
  },
};
