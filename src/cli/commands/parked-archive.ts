// The parked commands with --db: they read and act on the failure archive of the
// application's database through the `Archive` facade, not on the parked queue. Each
// listing shows the parked queue's depth beside the archive's count, so what is not
// archived yet is never hidden.
import { Archive } from '../../archive/archive.js';
import { archiveFilter, archiveFilterRecord, describeArchiveFilter, FILTER_LIMITS, type FilterNames } from '../../archive/filter.js';
import type { ArchivedMessage, ArchiveHistoryEntry, ArchiveReplayResult } from '../../archive/types.js';
import type { ArchiveFilter, ArchiveSummary } from '../../store/archive.js';
import type { Store } from '../../store/index.js';
import type { ConsumerTopology } from '../../topology/declaration.js';
import { actorOf, recordAction, storeSink } from '../actions.js';
import { DB_FLAGS, duration, list, positiveNumber, str, wholeNumber, type FlagSpecs } from '../args.js';
import { ask, type CommandContext } from '../command.js';
import { databaseSettings, describeDatabaseError, openDatabase, type DatabaseSettings } from '../context.js';
import { EXIT, UsageError, type ExitCode } from '../errors.js';
import { clip, count, plural, Progress, shellWord, span, table, when } from '../format.js';
import { exportTo, printDetails, showJson } from './parked-output.js';

/** Flags of the archive, taken by every parked command beside the queue's filters. */
export const ARCHIVE_FILTER_FLAGS = {
  ...DB_FLAGS,
  queue: { type: 'boolean', label: '--queue', help: 'work on the parked queue even with --db (or WARREN_DB): the database then only records the action' },
  row: { type: 'string', multiple: true, label: '--row ID[,ID]', help: 'with --db: archive rows with these ids (repeatable), as `parked list --db` numbers them' },
  header: { type: 'string', multiple: true, label: '--header NAME=VALUE', help: 'with --db: a header of the message has this value, e.g. tenant=t4 (repeatable, all must match)' },
  body: { type: 'string', label: '--body TEXT', help: 'with --db: the body holds these words, in this order (whole words, any case)' },
  reason: { type: 'string', label: '--reason NAME', help: 'with --db: why it was parked: max-attempts, permanent, delivery_limit, …' },
  state: { type: 'string', multiple: true, label: '--state STATE[,STATE]', help: 'with --db: open (default), replayed, resolved, or all' },
} as const satisfies FlagSpecs;

/** What only the archive can answer: given without --db, a usage error names --db. */
const ARCHIVE_ONLY = ['row', 'header', 'body', 'reason', 'state', 'after', 'newest', 'oldest', 'force', 'canary', 'window'] as const;

/** Flags of the listing order and pages, with --db. */
export const ARCHIVE_PAGE_FLAGS = {
  newest: { type: 'boolean', label: '--newest', help: 'with --db: newest failure first (the default)' },
  oldest: { type: 'boolean', label: '--oldest', help: 'with --db: oldest failure first' },
  after: { type: 'string', label: '--after CURSOR', help: 'with --db: the next page, from the cursor the previous page printed (as fast deep in the archive as at its start)' },
} as const satisfies FlagSpecs;

const NAMES: FilterNames = { states: '--state', ids: '--row', error: '--error', errorClass: '--error-class', since: '--since', until: '--until', routingKey: '--routing-key', messageIds: '--id', fingerprint: '--fingerprint', reason: '--reason', headers: '--header', body: '--body', throughId: '--row' };

/** True when the command reads the archive: --db (or WARREN_DB) and not --queue. Else archive-only flags are refused. */
export function usesArchive(ctx: CommandContext, command: string): boolean {
  const given = typeof ctx.values['db'] === 'string' || (ctx.io.env['WARREN_DB'] ?? '').trim() !== '';
  const archive = given && ctx.values['queue'] !== true;
  if (!archive) {
    const flag = ARCHIVE_ONLY.find((f) => ctx.values[f] !== undefined);
    if (flag !== undefined) throw new UsageError(`--${flag} reads the archive: give --db URL (or WARREN_DB) without --queue. See \`warren ${command} --help\`.`);
  }
  return archive;
}

/**
 * The filter of the flags, checked and bounded by `archiveFilter`. The park reason is
 * --reason, except in `parked resolve`, whose --reason is the resolution's: there it is
 * --parked-reason.
 */
export function archiveFilterOf(ctx: CommandContext, consumer: string, reasonFlag: 'reason' | 'parked-reason' = 'reason'): ArchiveFilter {
  const v = ctx.values;
  return archiveFilter(
    {
      consumer,
      states: list(v, 'state'),
      ids: list(v, 'row'),
      error: str(v, 'error'),
      errorClass: str(v, 'error-class'),
      since: str(v, 'since'),
      until: str(v, 'until'),
      routingKey: str(v, 'routing-key'),
      messageIds: list(v, 'id'),
      fingerprint: str(v, 'fingerprint'),
      reason: str(v, reasonFlag),
      headers: list(v, 'header'),
      body: str(v, 'body'),
    },
    new Date(),
    { ...NAMES, reason: `--${reasonFlag}` },
  );
}

/** True when the filter selects more than a consumer's open rows. */
function selects(f: ArchiveFilter): boolean {
  const { consumer: _c, states: _s, throughId: _t, ...rest } = f;
  return Object.keys(rest).length > 0;
}

/** ` matching …` of a filter, its states left to {@link stateWords}. */
function matching(f: ArchiveFilter): string {
  const { states: _s, ...rest } = f;
  const words = describeArchiveFilter(rest);
  return words === 'any row' ? '' : ` matching ${words}`;
}

function stateWords(f: ArchiveFilter): string {
  const states = f.states ?? ['open'];
  return states.length === 3 ? 'archived' : `${states.join(' or ')} archived`;
}

/** Opens the store of --db, runs `body` with its archive, maps database failures to one line, closes the store. */
async function withArchive<R>(ctx: CommandContext, body: (archive: Archive, store: Store<unknown>, db: DatabaseSettings) => Promise<R>): Promise<R> {
  const db = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
  const store = await openDatabase(db);
  try {
    const edits = /^(1|on|true|yes)$/i.test(ctx.io.env['WARREN_ARCHIVE_EDITS'] ?? '');
    return await body(new Archive(store, { edits }), store, db);
  } catch (error) {
    throw describeDatabaseError(error, db) ?? error;
  } finally {
    await store.close().catch(() => undefined);
  }
}

/** The parked queue's ready messages: what is not archived yet. Undefined (with the reason) when the broker does not answer. */
async function queueDepth(ctx: CommandContext, c: ConsumerTopology): Promise<{ depth: number | undefined; why: string | undefined }> {
  try {
    const model = await ctx.connection();
    const ch = await model.createChannel();
    ch.on('error', () => undefined);
    try {
      return { depth: (await ch.checkQueue(c.parkedQueue)).messageCount, why: undefined };
    } finally {
      await ch.close().catch(() => undefined);
    }
  } catch (error) {
    if ((error as { code?: unknown }).code === 404) return { depth: undefined, why: 'the broker has no such queue; `warren topology apply` declares it' };
    return { depth: undefined, why: error instanceof Error ? error.message.split('\n')[0] : String(error) };
  }
}

/** The line that puts the queue beside the archive. */
function queueLine(c: ConsumerTopology, q: { depth: number | undefined; why: string | undefined }): string {
  if (q.depth === undefined) return `Parked queue ${c.parkedQueue}: depth unknown (${q.why ?? 'no answer'}); messages still there are not in the archive.`;
  if (q.depth === 0) return `Parked queue ${c.parkedQueue}: empty; everything parked is in the archive.`;
  return `Parked queue ${c.parkedQueue}: ${plural(q.depth, 'message')} not archived yet (an ingester moves them: \`warren archive\`, or the application's archive option; --queue reads them).`;
}

function rowCells(r: ArchiveSummary): string[] {
  return [r.id, r.messageId ?? '(none)', r.routingKey, r.errorClass ?? r.reason ?? '-', clip(r.errorMessage ?? '', 60), r.attempts === null ? '-' : String(r.attempts), when(r.failedAt), r.state];
}

function printRows(ctx: CommandContext, rows: readonly ArchiveSummary[]): void {
  for (const line of table(['row', 'message id', 'routing key', 'error class', 'error', 'attempts', 'failed at', 'state'], rows.map(rowCells), ['right', 'left', 'left', 'left', 'left', 'right'])) ctx.out(line);
}

/** `parked list CONSUMER --db`: a page of rows, or exact groups, with the queue's depth beside. */
export async function archiveList(ctx: CommandContext, c: ConsumerTopology): Promise<ExitCode> {
  const filter = archiveFilterOf(ctx, c.name);
  if (ctx.values['newest'] === true && ctx.values['oldest'] === true) throw new UsageError('--newest and --oldest: give one.');
  const order = ctx.values['oldest'] === true ? 'oldest' : 'newest';
  const group = ctx.values['group'] === true;
  const limit = wholeNumber(ctx.values, 'limit', 1, FILTER_LIMITS.pageSize) ?? (group ? 100 : 50);
  const after = str(ctx.values, 'after');
  if (after !== undefined && group) throw new UsageError('--after pages a list; --group counts every row at once.');
  if (after !== undefined && (after.trim() === '' || after.length > 200)) throw new UsageError(`--after: ${JSON.stringify(after)} is not a cursor printed by \`parked list --db\`.`);
  const queue = await queueDepth(ctx, c);
  return withArchive(ctx, async (archive) => {
    const total = await archive.count(filter);
    if (group) {
      const groups = await archive.groups(filter, { limit });
      if (ctx.json) {
        ctx.printJson({ consumer: c.name, queue: c.parkedQueue, queueDepth: queue.depth ?? null, archived: total, groups });
        return EXIT.ok;
      }
      if (groups.length > 0) {
        for (const line of table(['count', 'error class', 'first seen', 'last seen', 'fingerprint', 'example row'], groups.map((g) => [count(g.count), g.errorClass ?? '-', when(g.firstSeen), when(g.lastSeen), clip(g.fingerprint, 80), g.sampleId ?? '-']), ['right'])) ctx.out(line);
        ctx.out();
      }
      const shown = groups.reduce((n, g) => n + g.count, 0);
      ctx.out(`${plural(total, `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)} in ${groups.length < limit ? plural(groups.length, 'group') : `${count(groups.length)} largest groups (${count(total - shown)} rows in smaller ones; raise --limit)`}; exact, over every row.`);
      ctx.out(queueLine(c, queue));
      return EXIT.ok;
    }
    const page = await archive.page({ filter, order, limit, ...(after !== undefined ? { after } : {}) });
    if (ctx.json) {
      ctx.printJson({ consumer: c.name, queue: c.parkedQueue, queueDepth: queue.depth ?? null, archived: total, order, rows: page.rows, next: page.next ?? null });
      return EXIT.ok;
    }
    if (page.rows.length > 0) {
      printRows(ctx, page.rows);
      ctx.out();
    }
    ctx.out(`${plural(total, `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)}; ${page.rows.length === 0 ? 'none on this page' : `${count(page.rows.length)} shown, ${order} first`}.${page.next !== undefined ? ` Next page: --after ${shellWord(page.next)}` : ''}`);
    ctx.out(queueLine(c, queue));
    return EXIT.ok;
  });
}

function timelineJson(e: ArchiveHistoryEntry) {
  return { at: e.at.toISOString(), event: e.event, rowId: e.rowId, attempt: e.attempt, actor: e.actor, detail: e.detail };
}

function archivedJson(m: ArchivedMessage) {
  const { position: _p, ...shown } = showJson(m.parked);
  return { rowId: m.id, state: m.state, archivedAt: m.archivedAt.toISOString(), replayCount: m.replayCount, replayedAt: m.replayedAt?.toISOString() ?? null, replayedBy: m.replayedBy, resolvedAt: m.resolvedAt?.toISOString() ?? null, resolvedBy: m.resolvedBy, resolveReason: m.resolveReason, notIndexed: m.notIndexed, ...shown };
}

/** `parked show CONSUMER ID --db` (a message id) or `--row N`: the newest row in full, and the message's timeline over every parking. */
export async function archiveShow(ctx: CommandContext, c: ConsumerTopology, id: string | undefined): Promise<ExitCode> {
  const rows = list(ctx.values, 'row');
  if (rows !== undefined && rows.length !== 1) throw new UsageError('--row: `parked show` shows one row; `parked list --row …` lists several.');
  if (rows === undefined && (id === undefined || id === '')) throw new UsageError('`warren parked show CONSUMER --db URL` needs a message ID, or --row N for one archive row (see `warren parked list --db`).');
  const rowId = rows === undefined ? undefined : archiveFilter({ consumer: c.name, ids: rows }, new Date(), NAMES).ids?.[0];
  return withArchive(ctx, async (archive) => {
    let m: ArchivedMessage | undefined;
    let history: { entries: ArchiveHistoryEntry[]; rows: ArchivedMessage[] } = { entries: [], rows: [] };
    if (rowId !== undefined) {
      m = await archive.get(rowId, { viewed: true });
      if (m !== undefined && m.consumer !== c.name) m = undefined;
      if (m?.messageId) history = await archive.history(c.name, m.messageId);
    } else {
      history = await archive.history(c.name, id as string);
      const newest = history.rows[history.rows.length - 1];
      if (newest !== undefined) m = await archive.get(newest.id, { viewed: true });
    }
    if (m === undefined) {
      const queue = await queueDepth(ctx, c);
      ctx.err(`No archived message of ${c.name} ${rowId !== undefined ? `in row ${rowId}` : `with id ${id as string}`}.`);
      ctx.err(queueLine(c, queue));
      return EXIT.failed;
    }
    const entries = history.entries.length > 0 ? history.entries : [];
    if (ctx.json) {
      ctx.printJson({ consumer: c.name, message: archivedJson(m), timeline: entries.map(timelineJson), parkings: history.rows.map((r) => ({ rowId: r.id, state: r.state, failedAt: r.failedAt.toISOString(), reason: r.reason, attempts: r.attempts })) });
      return EXIT.ok;
    }
    ctx.out(`Archived message ${m.messageId ?? '(no id)'}: row ${m.id} of ${c.name}, ${m.state}${history.rows.length > 1 ? ` (parked ${history.rows.length} times; this is the newest parking)` : ''}`);
    if (m.state === 'replayed') ctx.out(`  replayed ${m.replayCount === 1 ? 'once' : `${m.replayCount} times`}, last ${when(m.replayedAt)} by ${m.replayedBy ?? 'unknown'}`);
    if (m.state === 'resolved') ctx.out(`  resolved ${when(m.resolvedAt)} by ${m.resolvedBy ?? 'unknown'}: ${m.resolveReason ?? ''}`);
    if (m.notIndexed) ctx.out(`  not indexed: ${m.notIndexed}`);
    ctx.out();
    ctx.out('Timeline (every parking of this message id at this consumer)');
    if (entries.length === 0) ctx.out('  (no message id: this row alone)');
    for (const e of entries) ctx.out(`  ${when(e.at)}  row ${e.rowId.padEnd(6)}  ${e.detail}`);
    ctx.out();
    printDetails(ctx, m.parked);
    return EXIT.ok;
  });
}

/** `parked export CONSUMER --db`: matching rows as JSON lines, oldest failure first. */
export async function archiveExport(ctx: CommandContext, c: ConsumerTopology): Promise<ExitCode> {
  const filter = archiveFilterOf(ctx, c.name);
  const limit = wholeNumber(ctx.values, 'limit', 1);
  const file = str(ctx.values, 'output');
  return withArchive(ctx, async (archive) => {
    const r = await exportTo(ctx.io.stdout, file, (write) => archive.export({ filter, write, signal: ctx.signal, ...(limit !== undefined ? { limit } : {}) }));
    if (r === undefined) return EXIT.ok; // the reader went away (| head)
    if (ctx.json && file !== undefined) ctx.printJson({ consumer: c.name, exported: r.exported, stopReason: r.stopReason, output: file });
    else ctx.err(r.exported === 0 ? `No ${stateWords(filter)} failure of ${c.name}${matching(filter)}.` : `Exported ${plural(r.exported, `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)} to ${file ?? 'stdout'}.`);
    if (r.stopReason === 'limit') ctx.err(`Stopped at --limit ${count(limit ?? 0)}.`);
    return r.stopReason === 'aborted' ? EXIT.interrupted : EXIT.ok;
  });
}

/** `parked replay CONSUMER --db`: archived rows to the consumer's own queue, paced, with progress; rows already done are skipped unless --force. */
export async function archiveReplay(ctx: CommandContext, c: ConsumerTopology): Promise<ExitCode> {
  const filter = archiveFilterOf(ctx, c.name);
  const limit = wholeNumber(ctx.values, 'limit', 1);
  const rate = positiveNumber(ctx.values, 'rate', 100_000);
  const dryRun = ctx.values['dry-run'] === true;
  const force = ctx.values['force'] === true;
  const actor = actorOf(ctx);
  return withArchive(ctx, async (archive, store, db) => {
    const last = await store.archive.lastId();
    const bounded: ArchiveFilter = { ...filter, throughId: last ?? '0' };
    const canary = wholeNumber(ctx.values, 'canary', 1, 100);
    if (canary === undefined && ctx.values['window'] !== undefined) throw new UsageError('--window goes with --canary N.');
    if (canary !== undefined && !dryRun) return canaryReplay(ctx, c, archive, store, db, bounded, canary, { actor, force, rate });
    if (dryRun) {
      const matched = await archive.count(bounded);
      const page = await archive.page({ filter: bounded, order: 'oldest', limit: 20 });
      if (ctx.json) {
        ctx.printJson({ consumer: c.name, targetQueue: c.queue, dryRun: true, matched, wouldReplay: page.rows });
        return EXIT.ok;
      }
      if (page.rows.length > 0) {
        printRows(ctx, page.rows);
        if (matched > page.rows.length) ctx.out(`… and ${count(matched - page.rows.length)} more.`);
        ctx.out();
      }
      ctx.out(`Dry run: ${plural(Math.min(matched, limit ?? matched), `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)} would be replayed to queue ${c.queue}${force ? '' : ' (less those whose work the consumer has done since)'}; nothing was changed.`);
      return EXIT.ok;
    }
    const progress = ctx.json ? undefined : new Progress(ctx.io.stderr, 'replaying');
    const sink = storeSink(ctx, store, db.shown);
    let result: ArchiveReplayResult;
    let recorded: boolean;
    try {
      ({ result, recorded } = await recordAction(
        ctx,
        sink,
        { actor, action: 'archive.replay', consumer: c.name, filter: archiveFilterRecord(bounded) },
        async () =>
          archive.replay(await ctx.connection(), c, {
            filter: bounded,
            actor,
            signal: ctx.signal,
            force,
            ...(limit !== undefined ? { limit } : {}),
            ...(rate !== undefined ? { ratePerSecond: rate } : {}),
            ...(progress
              ? {
                  onProgress: (p) => {
                    const done = p.replayed + p.alreadyDone;
                    progress.update({ done, target: p.total, rate: p.elapsedMs > 0 ? (done * 1000) / p.elapsedMs : 0, ...(p.alreadyDone > 0 ? { note: `${count(p.alreadyDone)} already done` } : {}) });
                  },
                }
              : {}),
          }),
        (r) => ({
          count: r.replayed,
          outcome: r.stopReason === 'done' || r.stopReason === 'limit' ? 'ok' : 'partial',
          detail: { matched: r.matched, alreadyDone: r.alreadyDone, stopReason: r.stopReason, ...(r.error !== undefined ? { error: r.error } : {}), ...(rate !== undefined ? { ratePerSecond: rate } : {}), ...(limit !== undefined ? { limit } : {}), ...(force ? { force } : {}) },
        }),
      ));
    } finally {
      progress?.done();
    }
    const code: ExitCode = result.stopReason === 'aborted' ? EXIT.interrupted : result.stopReason === 'failed' || result.stopReason === 'unroutable' ? EXIT.failed : EXIT.ok;
    if (ctx.json) {
      const { replayedIds: _ids, ...rest } = result;
      ctx.printJson({ ...rest, ratePerSecond: Math.round(result.ratePerSecond * 10) / 10 });
    } else if (result.matched === 0) {
      ctx.err(`No ${stateWords(filter)} failure of ${c.name}${matching(filter)} to replay.`);
      ctx.err(queueLine(c, await queueDepth(ctx, c)));
    } else {
      ctx.out(`Replayed ${plural(result.replayed, 'archived message')} of ${c.name} to queue ${result.targetQueue} in ${span(result.elapsedMs)}${result.replayed > 1 ? ` (${count(Math.round(result.ratePerSecond))}/s)` : ''}; their rows are marked replayed.`);
      if (result.alreadyDone > 0) ctx.out(`${plural(result.alreadyDone, 'message')} already done: the consumer has handled ${result.alreadyDone === 1 ? 'its message id' : 'their message ids'} since (an idempotency marker exists), so ${result.alreadyDone === 1 ? 'it was' : 'they were'} not sent and ${result.alreadyDone === 1 ? 'its row is' : 'their rows are'} resolved. --force sends them anyway.`);
      const rest = result.matched - result.replayed - result.alreadyDone;
      if (result.stopReason === 'limit') ctx.out(`Stopped at --limit ${count(limit ?? 0)}; ${plural(rest, 'row')} stay open.`);
    }
    if (result.stopReason === 'aborted') ctx.err(`Interrupted: what was replayed is confirmed and marked; ${plural(Math.max(0, result.matched - result.replayed - result.alreadyDone), 'row')} stay open. Run the same command again to go on.`);
    if (result.error !== undefined) ctx.err(`Replay stopped: ${result.error}. What was confirmed is marked replayed; the rest stays open.`);
    return recorded || code !== EXIT.ok ? code : EXIT.failed;
  });
}

/** Counts the rows an action will take, and asks (or needs --yes) when `confirm`. Undefined: the person said no. */
async function counted(ctx: CommandContext, archive: Archive, store: Store<unknown>, filter: ArchiveFilter, verb: string, confirm: boolean): Promise<{ filter: ArchiveFilter; matched: number } | undefined> {
  const last = await store.archive.lastId();
  const bounded: ArchiveFilter = { ...filter, throughId: last ?? '0' };
  const matched = await archive.count(bounded);
  if (matched === 0 || !confirm || ctx.values['yes'] === true) return { filter: bounded, matched };
  const what = `${plural(matched, `${stateWords(filter)} failure`)} of ${filter.consumer}${matching(filter)}`;
  if (ctx.io.stdin.isTTY !== true) throw new UsageError(`This would ${verb} ${what}. Pass --yes to confirm: stdin is not a terminal, so warren cannot ask.`);
  if (!(await ask(ctx, `${verb[0]?.toUpperCase() ?? ''}${verb.slice(1)} ${what}? [y/N] `))) return undefined;
  return { filter: bounded, matched };
}

/** `parked purge CONSUMER --db`: deletes matching archive rows (those counted, none archived meanwhile). */
export async function archivePurge(ctx: CommandContext, c: ConsumerTopology): Promise<ExitCode> {
  const filter = archiveFilterOf(ctx, c.name);
  const limit = wholeNumber(ctx.values, 'limit', 1);
  const actor = actorOf(ctx);
  return withArchive(ctx, async (archive, store, db) => {
    const n = await counted(ctx, archive, store, filter, 'delete', true);
    if (n === undefined) {
      ctx.err('Nothing was deleted.');
      return EXIT.failed;
    }
    if (n.matched === 0) {
      if (ctx.json) ctx.printJson({ consumer: c.name, matched: 0, deleted: 0 });
      else ctx.err(`No ${stateWords(filter)} failure of ${c.name}${matching(filter)} to delete.`);
      return EXIT.ok;
    }
    const { result, recorded } = await recordAction(
      ctx,
      storeSink(ctx, store, db.shown),
      { actor, action: 'archive.purge', consumer: c.name, filter: archiveFilterRecord(n.filter) },
      () => archive.purge({ filter: n.filter, actor, signal: ctx.signal, ...(limit !== undefined ? { limit } : {}) }),
      (r) => ({ count: r.count, outcome: r.stopReason === 'aborted' ? 'partial' : 'ok', detail: { counted: n.matched, stopReason: r.stopReason } }),
    );
    if (ctx.json) ctx.printJson({ consumer: c.name, matched: n.matched, deleted: result.count, stopReason: result.stopReason });
    else ctx.out(`Deleted ${plural(result.count, `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)} from the archive.`);
    if (result.stopReason === 'aborted') ctx.err(`Interrupted: ${plural(n.matched - result.count, 'counted row')} stay.`);
    return result.stopReason === 'aborted' ? EXIT.interrupted : recorded ? EXIT.ok : EXIT.failed;
  });
}

/** `parked resolve CONSUMER --db --reason TEXT`: the failures need nothing more; they stop counting as open. */
export async function archiveResolve(ctx: CommandContext, c: ConsumerTopology): Promise<ExitCode> {
  const filter = archiveFilterOf(ctx, c.name, 'parked-reason');
  const reason = str(ctx.values, 'reason');
  if (reason === undefined || reason.trim() === '') throw new UsageError('`warren parked resolve` needs --reason TEXT: why these failures need nothing more (kept in the rows and the action record).');
  const limit = wholeNumber(ctx.values, 'limit', 1);
  const actor = actorOf(ctx);
  return withArchive(ctx, async (archive, store, db) => {
    // Resolving a selection is what it is for; resolving every open failure of a consumer is asked about.
    const n = await counted(ctx, archive, store, filter, 'resolve', !selects(filter));
    if (n === undefined) {
      ctx.err('Nothing was resolved.');
      return EXIT.failed;
    }
    if (n.matched === 0) {
      if (ctx.json) ctx.printJson({ consumer: c.name, matched: 0, resolved: 0 });
      else ctx.err(`No ${stateWords(filter)} failure of ${c.name}${matching(filter)} to resolve.`);
      return EXIT.ok;
    }
    const { result, recorded } = await recordAction(
      ctx,
      storeSink(ctx, store, db.shown),
      { actor, action: 'archive.resolve', consumer: c.name, filter: archiveFilterRecord(n.filter) },
      () => archive.resolve({ filter: n.filter, actor, reason, signal: ctx.signal, ...(limit !== undefined ? { limit } : {}) }),
      (r) => ({ count: r.count, outcome: r.stopReason === 'aborted' ? 'partial' : 'ok', detail: { counted: n.matched, reason: reason.trim(), stopReason: r.stopReason } }),
    );
    if (ctx.json) ctx.printJson({ consumer: c.name, matched: n.matched, resolved: result.count, stopReason: result.stopReason });
    else ctx.out(`Resolved ${plural(result.count, `${stateWords(filter)} failure`)} of ${c.name}${matching(filter)}: ${reason.trim()}`);
    return result.stopReason === 'aborted' ? EXIT.interrupted : recorded ? EXIT.ok : EXIT.failed;
  });
}

/** `parked replay --db --canary N`: N rows first, watched; the verdict says whether to replay the rest. */
async function canaryReplay(ctx: CommandContext, c: ConsumerTopology, archive: Archive, store: Store<unknown>, db: DatabaseSettings, filter: ArchiveFilter, n: number, o: { actor: string; force: boolean; rate: number | undefined }): Promise<ExitCode> {
  const windowMs = duration(ctx.values, 'window') ?? 30_000;
  const { result, recorded } = await recordAction(
    ctx,
    storeSink(ctx, store, db.shown),
    { actor: o.actor, action: 'archive.canary', consumer: c.name, filter: archiveFilterRecord(filter) },
    async () =>
      archive.canary(await ctx.connection(), c, {
        filter,
        actor: o.actor,
        count: n,
        windowMs,
        pollMs: Math.min(1000, Math.max(10, Math.round(windowMs / 10))),
        force: o.force,
        signal: ctx.signal,
        ...(o.rate !== undefined ? { ratePerSecond: o.rate } : {}),
        onOutcome: (k) => {
          if (!ctx.json) ctx.out(`  row ${k.rowId} (${k.messageId ?? 'no id'}): ${k.outcome === 'failed' ? `failed again, parked as row ${k.newRowId ?? '?'}: ${k.error ?? ''}` : k.evidence === 'processed' ? 'handled (the consumer\'s idempotency marker is there)' : k.evidence === 'window' ? `not parked again within ${span(windowMs)}` : 'unknown (no message id to watch)'}`);
        },
      }),
    (r) => ({ count: r.replay.replayed, outcome: r.verdict === 'failed' ? 'partial' : 'ok', detail: { verdict: r.verdict, remaining: r.remaining, windowMs, canaries: r.canaries.map((k) => ({ rowId: k.rowId, outcome: k.outcome, evidence: k.evidence })) } }),
  );
  if (ctx.json) ctx.printJson({ consumer: c.name, verdict: result.verdict, remaining: result.remaining, canaries: result.canaries, replayed: result.replay.replayed, alreadyDone: result.replay.alreadyDone });
  else if (result.verdict === 'empty') ctx.err(`No ${stateWords(filter)} failure of ${c.name}${matching(filter)} to replay${result.replay.alreadyDone > 0 ? ` (${plural(result.replay.alreadyDone, 'row')} already done)` : ''}.`);
  else if (result.verdict === 'failed') ctx.out(`Canary failed: a replayed message failed again. ${plural(result.remaining, 'row')} stay open; fix the cause before replaying them.`);
  else ctx.out(`Canary ${result.verdict === 'succeeded' ? 'succeeded' : 'unknown'}: ${plural(result.replay.replayed, 'row')} replayed; ${plural(result.remaining, 'row')} stay open. Replay them with the same filter without --canary.`);
  if (ctx.signal.aborted) return EXIT.interrupted;
  const code: ExitCode = result.verdict === 'failed' ? EXIT.failed : EXIT.ok;
  return recorded || code !== EXIT.ok ? code : EXIT.failed;
}
