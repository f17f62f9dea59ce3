import { describeFilter, isEmptyFilter, parseFilter, type ParkedFilter } from '../../park/filter.js';
import { parkedIdentity } from '../../park/identity.js';
import { groupParked, summarize, type ParkedMessage } from '../../park/message.js';
import { browseParked, exportParked, listParked, purgeParked, replayParked, type ParkedOperationResult, type PurgeResult, type ReplayOptions, type ReplayResult } from '../../park/operations.js';
import type { ConsumerTopology } from '../../topology/declaration.js';
import { filterRecord } from '../../audit/entry.js';
import { ACTOR_FLAG, actionSink, actorOf, AUDIT_FILE_FLAG, recordAction } from '../actions.js';
import { DB_FLAGS, FILTER_FLAGS, list, MAX_HELD_FLAG, positiveNumber, str, wholeNumber, type FlagSpecs } from '../args.js';
import { consumerArg, noExtraArgs, ask, type Command, type CommandContext } from '../command.js';
import { EXIT, UsageError, type ExitCode } from '../errors.js';
import { clip, count, plural, Progress, span, table, when, type ProgressState } from '../format.js';
import { ARCHIVE_FILTER_FLAGS, ARCHIVE_PAGE_FLAGS, archiveExport, archiveList, archivePurge, archiveReplay, archiveResolve, archiveShow, usesArchive } from './parked-archive.js';
import { exportTo, printDetails, showJson } from './parked-output.js';

const FILTER_NAMES = { error: '--error', errorClass: '--error-class', since: '--since', until: '--until', messageIds: '--id', routingKey: '--routing-key', fingerprint: '--fingerprint' };

function filterOf(ctx: CommandContext): ParkedFilter {
  const v = ctx.values;
  return parseFilter({ error: str(v, 'error'), errorClass: str(v, 'error-class'), since: str(v, 'since'), until: str(v, 'until'), messageIds: list(v, 'id'), routingKey: str(v, 'routing-key'), fingerprint: str(v, 'fingerprint') }, new Date(), FILTER_NAMES);
}

/** Options shared by every parked command, from flags. */
function common(ctx: CommandContext): { filter: ParkedFilter; maxHeld?: number; signal: AbortSignal } {
  const maxHeld = wholeNumber(ctx.values, 'max-held', 1, 10_000_000);
  return { filter: filterOf(ctx), ...(maxHeld !== undefined ? { maxHeld } : {}), signal: ctx.signal };
}

function limitOf(ctx: CommandContext): { limit?: number } {
  const limit = wholeNumber(ctx.values, 'limit', 1);
  return limit === undefined ? {} : { limit };
}

/** What a walk did not cover, in words; empty when it covered everything. */
export function coverage(r: ParkedOperationResult): string[] {
  const lines: string[] = [];
  if (r.notExamined > 0) {
    const rest = `${plural(r.notExamined, 'more message')} ${r.notExamined === 1 ? 'was' : 'were'} not examined`;
    if (r.stopReason === 'max-held') lines.push(`Not everything was scanned: stopped after holding ${count(r.kept + r.failed.length)} messages that stay parked (--max-held); ${rest}. Raise --max-held or narrow the filter.`);
    else if (r.stopReason === 'stopped' && r.limitReached) lines.push(`Stopped at --limit ${count(r.matched)}; ${rest}.`);
    else if (r.stopReason === 'aborted') lines.push(`Interrupted; ${rest}.`);
    else if (r.stopReason === 'unroutable') lines.push(`Stopped because a replayed copy was unroutable; ${rest}.`);
  }
  if (r.readers > 0) {
    const who = r.readers === 1 ? 'another consumer was reading' : `${count(r.readers)} other consumers were reading`;
    const it = r.readers === 1 ? 'it' : 'they';
    lines.push(`Not everything was seen: ${who} ${r.queue} when this began, and the messages ${it} held were not examined. Run again once ${it} ${r.readers === 1 ? 'is' : 'are'} gone (a killed command's messages are back within seconds).`);
  }
  if (r.missed > 0) {
    lines.push(`Not everything was seen: ${plural(r.missed, 'message')} parked when this began ${r.missed === 1 ? 'was' : 'were'} gone before it reached them: another consumer of ${r.queue} took them (they come back when it lets go), or they expired. Run again once it is gone.`);
  }
  return lines;
}

/** Whether a walk saw every message parked when it began. */
function complete(r: ParkedOperationResult): boolean {
  return r.notExamined === 0 && r.readers === 0 && r.missed === 0;
}

/**
 * What a purge says of its two walks, the count and the delete: the count's coverage,
 * and, when the delete did not find every counted message, what kept them out of its
 * sight. It is complete when the count saw everything and the delete found all it counted.
 */
export function purgeReport(counted: ParkedOperationResult, r: PurgeResult): { lines: string[]; complete: boolean; readers: number; missed: number } {
  const short = r.notFound > 0;
  const readers = Math.max(counted.readers, short ? r.readers : 0);
  const missed = Math.max(counted.missed, short ? r.missed : 0);
  const lines = new Set([...coverage(counted), ...(short ? coverage({ ...r, readers, missed, notExamined: 0 }) : [])]);
  return { lines: [...lines], complete: complete(counted) && !short, readers, missed };
}

function noMatch(ctx: CommandContext, c: ConsumerTopology, filter: ParkedFilter, r: ParkedOperationResult): void {
  if (r.total === 0 && r.readers > 0) ctx.err(`No parked message of ${c.name} is ready to read in ${c.parkedQueue}.`);
  else if (r.total === 0) ctx.err(`Nothing is parked for ${c.name} (queue ${c.parkedQueue} is empty).`);
  else ctx.err(`No parked message of ${c.name} matches ${describeFilter(filter)} (${plural(r.scanned, 'message')} examined).`);
}

function resultJson(r: ParkedOperationResult) {
  return {
    consumer: r.consumer,
    queue: r.queue,
    total: r.total,
    scanned: r.scanned,
    matched: r.matched,
    notExamined: r.notExamined,
    complete: complete(r),
    readers: r.readers,
    missed: r.missed,
    stopReason: r.stopReason,
    limitReached: r.limitReached,
  };
}

function listRows(messages: readonly ParkedMessage[]): string[][] {
  return messages.map((m) => [String(m.position), m.messageId ?? '(none)', m.routingKey, m.errorClass ?? m.reason ?? '-', clip(m.errorMessage ?? '', 60), m.attempts === undefined ? '-' : String(m.attempts), when(m.failedAt)]);
}

function printList(ctx: CommandContext, messages: readonly ParkedMessage[]): void {
  for (const line of table(['#', 'message id', 'routing key', 'error class', 'error', 'attempts', 'failed at'], listRows(messages), ['right', 'left', 'left', 'left', 'left', 'right', 'left'])) ctx.out(line);
}

const LIST_FLAGS: FlagSpecs = {
  ...FILTER_FLAGS,
  group: { type: 'boolean', label: '--group', help: 'count the messages by failure fingerprint instead of listing them' },
  limit: { type: 'string', label: '--limit N', help: 'list at most N matching messages, from the head (with --db: a page of N rows, default 50, at most 1000; with --group, the N largest groups)' },
  ...MAX_HELD_FLAG,
  ...ARCHIVE_FILTER_FLAGS,
  ...ARCHIVE_PAGE_FLAGS,
};

export const parkedList: Command = {
  path: ['parked', 'list'],
  usage: 'CONSUMER',
  summary: 'the parked messages of a consumer, oldest first (nothing is removed)',
  description: [
    'Lists the parked messages of CONSUMER in queue order: position, message id, original',
    'routing key, error class, error message, attempts and when it failed. Nothing is',
    'removed or reordered: the messages are read and put back.',
    '',
    'With --group, counts them by failure fingerprint (error class, message with numbers,',
    'ids and quoted values masked, first stack frame), with first and last seen.',
    '',
    "With --db (or WARREN_DB), reads the failure archive of the application's database",
    'instead (see docs/archive.md): every archived row, counted and grouped exactly, newest',
    'failure first (--oldest for the other way), a page at a time (--after CURSOR), with',
    'filters on headers (--header tenant=t4), body words (--body), park reason (--reason)',
    'and state (--state). The parked queue\'s depth is shown beside: messages still there',
    'are not archived yet.',
  ].join('\n'),
  flags: LIST_FLAGS,
  examples: [
    'warren parked list billing',
    'warren parked list billing --group',
    "warren parked list billing --error-class HttpError --since 2h",
    "warren parked list billing --error '/carrier (502|503)/' --routing-key 'order.*'",
    'warren parked list billing --json | jq -r ".messages[].messageId"',
    'warren parked list billing --db postgres://ops@db.internal/shop --group',
    "warren parked list billing --db sqlite:data/app.db --error 'tenant t4' --since 2d",
    'warren parked list billing --db sqlite:data/app.db --header tenant=t4 --limit 100 --after 81234',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'parked list');
    const c = await consumerArg(ctx, 'parked list');
    if (usesArchive(ctx, 'parked list')) return archiveList(ctx, c);
    const options = { ...common(ctx), ...limitOf(ctx) };
    const group = ctx.values['group'] === true;
    const r = await listParked(await ctx.connection(), c, options);
    if (ctx.json) {
      ctx.printJson({ ...resultJson(r), ...(group ? { groups: groupParked(r.messages) } : { messages: r.messages.map(summarize) }) });
      return EXIT.ok;
    }
    if (r.messages.length === 0) {
      noMatch(ctx, c, options.filter, r);
      for (const line of coverage(r)) ctx.err(line);
      return EXIT.ok;
    }
    if (group) {
      const groups = groupParked(r.messages);
      for (const line of table(
        ['count', 'error class', 'first seen', 'last seen', 'fingerprint', 'example id'],
        groups.map((g) => [count(g.count), g.errorClass ?? '-', when(g.firstSeen), when(g.lastSeen), clip(g.fingerprint, 80), g.sampleIds[0] ?? '-']),
        ['right'],
      ))
        ctx.out(line);
    } else printList(ctx, r.messages);
    ctx.out();
    const of = isEmptyFilter(options.filter) ? '' : ` matching ${describeFilter(options.filter)}`;
    ctx.out(`${plural(r.messages.length, 'parked message')}${of}${group ? ` in ${plural(groupParked(r.messages).length, 'group')}` : ''} (${count(r.scanned)} of ${count(r.total)} examined) in ${c.parkedQueue}.`);
    for (const line of coverage(r)) ctx.out(line);
    return EXIT.ok;
  },
};

function printShow(ctx: CommandContext, c: ConsumerTopology, m: ParkedMessage, total: number): void {
  ctx.out(`Message ${m.messageId ?? '(no id)'}: position ${m.position} of ${total} in ${c.parkedQueue}`);
  ctx.out();
  printDetails(ctx, m);
}

export const parkedShow: Command = {
  path: ['parked', 'show'],
  usage: 'CONSUMER ID',
  summary: 'one parked message: every header, the body, the failure and attempt history',
  description: [
    'Shows one parked message of CONSUMER in full: the failure (class, message, stack,',
    'reason), the attempt history (first and last failure, retry tiers waited in,',
    'parking, earlier replays), routing, properties, every header, and the body (JSON',
    'pretty-printed). ID is the message id, or #N for the message at position N (as',
    '`parked list` numbers them), for messages without an id. Nothing is removed.',
    '',
    'With --db (or WARREN_DB), from the archive: the newest parking of the message id (or',
    'the row of --row N) in full, and its timeline over every parking at this consumer:',
    'parked (why, after which attempt), replayed (when, by whom), parked again, resolved.',
  ].join('\n'),
  flags: { ...MAX_HELD_FLAG, ...DB_FLAGS, queue: ARCHIVE_FILTER_FLAGS.queue, row: { type: 'string', multiple: true, label: '--row ID', help: 'with --db: the archive row to show, instead of a message ID' } },
  examples: [
    'warren parked show billing 0190a1b2-7c3d-7000-8000-00000000002a',
    'warren parked show billing "#3"',
    'warren parked show billing 0190a1b2-7c3d-7000-8000-00000000002a --json | jq .body',
    'warren parked show billing 0190a1b2-7c3d-7000-8000-00000000002a --db postgres://ops@db.internal/shop',
    'warren parked show billing --row 81234 --db sqlite:data/app.db',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 2, 'parked show');
    const c = await consumerArg(ctx, 'parked show');
    const id = ctx.args[1];
    if (usesArchive(ctx, 'parked show')) return archiveShow(ctx, c, id);
    if (id === undefined || id === '') throw new UsageError('`warren parked show` needs an ID: a message id, or #N for position N (see `warren parked list`).');
    const position = /^#(\d+)$/.exec(id);
    const at = position ? Number(position[1]) : undefined;
    if (at !== undefined && at < 1) throw new UsageError(`ID ${id}: positions start at #1.`);
    const maxHeld = wholeNumber(ctx.values, 'max-held', 1, 10_000_000);
    const found: ParkedMessage[] = [];
    const r = await browseParked(await ctx.connection(), c, {
      signal: ctx.signal,
      ...(maxHeld !== undefined ? { maxHeld } : {}),
      onMessage: (m) => {
        if (at !== undefined ? m.position === at : m.messageId === id) found.push(m);
        // A position is unique; an id may be parked more than once, so read on.
        return at !== undefined && m.position >= at ? 'stop' : undefined;
      },
    });
    if (found.length === 0) {
      const where = r.total === 0 ? (r.readers > 0 ? `none is ready to read in ${c.parkedQueue}` : `queue ${c.parkedQueue} is empty`) : `${plural(r.scanned, 'message')} examined in ${c.parkedQueue}`;
      ctx.err(`No parked message of ${c.name} ${at !== undefined ? `at position ${at}` : `with id ${id}`} (${where}).`);
      for (const line of coverage({ ...r, matched: 0, limitReached: false })) ctx.err(line);
      return EXIT.failed;
    }
    if (ctx.json) {
      ctx.printJson({ consumer: c.name, queue: c.parkedQueue, total: r.total, readers: r.readers, missed: r.missed, messages: found.map(showJson) });
      return EXIT.ok;
    }
    found.forEach((m, i) => {
      if (i > 0) ctx.out(`\n${'─'.repeat(40)}\n`);
      printShow(ctx, c, m, r.total);
    });
    if (found.length > 1) ctx.out(`\n${found.length} parked messages have the id ${id}.`);
    // Positions count the messages that were ready: one another consumer held is not among them.
    for (const line of coverage({ ...r, matched: found.length, limitReached: false, notExamined: 0 })) ctx.err(line);
    return EXIT.ok;
  },
};

const REPLAY_FLAGS: FlagSpecs = {
  ...FILTER_FLAGS,
  limit: { type: 'string', label: '--limit N', help: 'replay at most N matching messages, from the head' },
  rate: { type: 'string', label: '--rate N', help: 'at most N messages per second (default: as fast as confirms allow)' },
  'dry-run': { type: 'boolean', label: '--dry-run', help: 'show what would be replayed; change nothing' },
  ...MAX_HELD_FLAG,
  ...ACTOR_FLAG,
  ...AUDIT_FILE_FLAG,
  ...ARCHIVE_FILTER_FLAGS,
  force: { type: 'boolean', label: '--force', help: 'with --db: replay rows whose message the consumer has handled since (its idempotency marker exists) too' },
  canary: { type: 'string', label: '--canary N', help: 'with --db: replay N rows first and watch them for --window: the consumer handled them (its idempotency marker), or they were parked again; the rest waits for a second run' },
  window: { type: 'string', label: '--window DURATION', help: 'with --canary: how long to watch (e.g. 30s, 2m); default 30s' },
};

export const parkedReplay: Command = {
  path: ['parked', 'replay'],
  usage: 'CONSUMER',
  summary: "republish parked messages to the consumer's own queue",
  description: [
    "Republishes parked messages of CONSUMER to that consumer's own work queue (through",
    'the default exchange: no other queue bound to the routing key gets a copy), with the',
    'same message id and properties, the original routing key kept in warren-routing-key,',
    'the attempt count reset, and warren-replays / warren-replayed-at recording the replay.',
    '',
    'Each copy is confirmed by the broker before its parked original is acknowledged:',
    'stopped or killed half-way, nothing is lost and at most one message exists twice',
    '(idempotent consumers absorb it). Messages that do not match the filters stay parked,',
    'in their order. On a terminal, a progress bar shows the rate and time left.',
    '',
    'The replay is recorded (who, when, which filter, how many) in the action record of',
    'the database of --db (or WARREN_DB), or as a JSON line in --audit-file; with neither,',
    'it is not recorded. A dry run is never recorded.',
    '',
    'With --db (or WARREN_DB), replays archive rows instead (see docs/archive.md): each copy',
    'confirmed by the broker, then its row marked replayed; stopped or killed, no row is',
    'lost and each is sent at most once more. A row whose message id the consumer has',
    'handled since (its idempotency marker exists) is not sent: it is reported as already',
    'done and resolved, unless --force. --queue replays from the queue and records in --db.',
  ].join('\n'),
  flags: REPLAY_FLAGS,
  examples: [
    'warren parked replay billing --dry-run',
    'warren parked replay billing',
    'warren parked replay billing --error-class HttpError --since 1h --rate 50',
    'warren parked replay billing --id 0190a1b2-7c3d-7000-8000-00000000002a',
    'warren parked replay billing --limit 100 --json',
    'warren parked replay billing --fingerprint "HttpError: carrier <n> down @ send (carrier.js)" --queue --db sqlite:data/app.db --actor alice',
    'warren parked replay billing --db postgres://ops@db.internal/shop --header tenant=t4 --since 2d --rate 100',
    'warren parked replay billing --db sqlite:data/app.db --row 81234,81235 --force',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'parked replay');
    const c = await consumerArg(ctx, 'parked replay');
    if (usesArchive(ctx, 'parked replay')) return archiveReplay(ctx, c);
    const options = { ...common(ctx), ...limitOf(ctx) };
    const rate = positiveNumber(ctx.values, 'rate', 100_000);
    const dryRun = ctx.values['dry-run'] === true;
    const progress = ctx.json || dryRun ? undefined : new Progress(ctx.io.stderr, 'replaying');
    const noFilter = isEmptyFilter(options.filter);
    const wouldReplay: ParkedMessage[] = [];
    const replayOptions: ReplayOptions = { ...options, dryRun };
    if (rate !== undefined) replayOptions.ratePerSecond = rate;
    if (dryRun) replayOptions.onMatch = (m) => void wouldReplay.push(m);
    if (progress) {
      replayOptions.onProgress = (p) => {
        const target = noFilter && p.limit !== undefined ? Math.min(p.limit, p.total) : p.total;
        const done = noFilter && p.limit !== undefined ? p.published : p.scanned;
        const seconds = p.elapsedMs / 1000;
        const state: ProgressState = { done, target, rate: seconds > 0 ? done / seconds : 0 };
        progress.update(noFilter ? state : { ...state, note: `${count(p.published)} replayed` });
      };
    }
    const actor = actorOf(ctx);
    replayOptions.actor = actor;
    const sink = dryRun ? undefined : await actionSink(ctx);
    let result: ReplayResult;
    let recorded: boolean;
    try {
      ({ result, recorded } = await recordAction(
        ctx,
        sink,
        { actor, action: 'parked.replay', consumer: c.name, filter: filterRecord(options.filter) },
        async () => replayParked(await ctx.connection(), c, replayOptions),
        (r) => ({
          count: r.replayed,
          outcome: r.stopReason === 'aborted' || r.failed.length > 0 || r.stopReason === 'unroutable' ? 'partial' : 'ok',
          detail: { matched: r.matched, notExamined: r.notExamined, stopReason: r.stopReason, ...(rate !== undefined ? { ratePerSecond: rate } : {}), ...(options.limit !== undefined ? { limit: options.limit } : {}), ...(r.failed.length ? { failed: r.failed.length } : {}) },
        }),
      ));
    } finally {
      progress?.done();
      await sink?.close().catch(() => undefined);
    }
    const code = replaySummary(ctx, c, options.filter, result, wouldReplay);
    return recorded || code !== EXIT.ok ? code : EXIT.failed;
  },
};

function replaySummary(ctx: CommandContext, c: ConsumerTopology, filter: ParkedFilter, r: ReplayResult, wouldReplay: readonly ParkedMessage[]): ExitCode {
  const interrupted = r.stopReason === 'aborted';
  const failed = r.failed.length > 0 || r.stopReason === 'unroutable';
  const code = interrupted ? EXIT.interrupted : failed ? EXIT.failed : EXIT.ok;
  if (ctx.json) {
    ctx.printJson({ ...resultJson(r), targetQueue: r.targetQueue, dryRun: r.dryRun, replayed: r.replayed, failed: r.failed, elapsedMs: r.elapsedMs, ratePerSecond: Math.round(r.ratePerSecond * 10) / 10, ...(r.dryRun ? { wouldReplay: wouldReplay.map(summarize) } : {}) });
    return code;
  }
  if (r.matched === 0) {
    if (interrupted) ctx.err('Interrupted before any message was replayed: everything is still parked.');
    else noMatch(ctx, c, filter, r);
    for (const line of coverage(r)) ctx.err(line);
    return code;
  }
  if (r.dryRun) {
    printList(ctx, wouldReplay);
    ctx.out();
    ctx.out(`Dry run: ${plural(r.matched, 'message')} would be replayed to queue ${r.targetQueue}; nothing was changed.`);
  } else {
    ctx.out(`Replayed ${plural(r.replayed, 'message')} to queue ${r.targetQueue} in ${span(r.elapsedMs)}${r.replayed > 0 ? ` (${count(Math.round(r.ratePerSecond))}/s)` : ''}.`);
    const stayed = r.total - r.replayed - r.notExamined - r.missed;
    if (stayed > 0 && !isEmptyFilter(filter)) ctx.out(`${plural(stayed, 'message')} that did not match stay parked, in their order.`);
  }
  for (const f of r.failed.slice(0, 20)) ctx.err(`  not replayed, still parked: ${f.messageId ?? `#${f.position}`}: ${f.error}`);
  if (r.failed.length > 20) ctx.err(`  … and ${r.failed.length - 20} more.`);
  for (const line of coverage(r)) ctx.out(line);
  if (interrupted) ctx.err('Interrupted: what was replayed is confirmed; everything else is still parked.');
  return code;
}

const PURGE_FLAGS: FlagSpecs = {
  ...FILTER_FLAGS,
  limit: { type: 'string', label: '--limit N', help: 'delete at most N matching messages, from the head' },
  yes: { type: 'boolean', short: 'y', label: '--yes, -y', help: 'do not ask; required when stdin is not a terminal' },
  ...MAX_HELD_FLAG,
  ...ACTOR_FLAG,
  ...AUDIT_FILE_FLAG,
  ...ARCHIVE_FILTER_FLAGS,
};

export const parkedPurge: Command = {
  path: ['parked', 'purge'],
  usage: 'CONSUMER',
  summary: 'delete parked messages (counts them and asks first)',
  description: [
    'Deletes parked messages of CONSUMER that match the filters (all of them without',
    'filters). It counts them first and asks for confirmation; with --yes it does not ask,',
    'and --yes is required when stdin is not a terminal. Exactly the messages counted are',
    'deleted, told apart by message id, body and park time (not by position), so messages',
    'parked meanwhile are kept. The rest stay in their order. Export them first if they',
    'may be needed: this cannot be undone.',
    '',
    'The purge is recorded (who, when, which filter, how many) in the action record of',
    'the database of --db (or WARREN_DB), or as a JSON line in --audit-file.',
    '',
    'With --db (or WARREN_DB), deletes archive rows instead: those counted, never a row',
    'archived meanwhile. --queue purges the queue and records in --db.',
  ].join('\n'),
  flags: PURGE_FLAGS,
  examples: [
    'warren parked purge billing --error-class ValidationError',
    'warren parked export billing --until 7d -o old.jsonl && warren parked purge billing --until 7d --yes',
    'warren parked purge billing --db sqlite:data/app.db --state resolved --until 30d --yes',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'parked purge');
    const c = await consumerArg(ctx, 'parked purge');
    if (usesArchive(ctx, 'parked purge')) return archivePurge(ctx, c);
    const options = { ...common(ctx), ...limitOf(ctx) };
    const actor = actorOf(ctx);
    const conn = await ctx.connection();
    // What is counted (and confirmed) is deleted, by identity: a message parked meanwhile
    // is not among them, wherever it lands in the queue.
    const targets: string[] = [];
    const counted = await browseParked(conn, c, { ...options, onMessage: (m) => void targets.push(parkedIdentity(m)) });
    if (counted.matched === 0) {
      if (ctx.json) ctx.printJson({ ...resultJson(counted), removed: 0 });
      else {
        noMatch(ctx, c, options.filter, counted);
        for (const line of coverage(counted)) ctx.err(line);
      }
      return EXIT.ok;
    }
    const what = `${plural(counted.matched, 'parked message')} of ${c.name}${isEmptyFilter(options.filter) ? '' : ` matching ${describeFilter(options.filter)}`}`;
    if (ctx.values['yes'] !== true) {
      if (ctx.io.stdin.isTTY !== true) throw new UsageError(`This would delete ${what}. Pass --yes to confirm: stdin is not a terminal, so warren cannot ask.`);
      for (const line of coverage(counted)) ctx.err(line);
      if (!(await ask(ctx, `Delete ${what}? This cannot be undone. [y/N] `))) {
        ctx.err('Nothing was deleted.');
        return EXIT.failed;
      }
    }
    const { limit: _limit, ...purge } = options;
    const sink = await actionSink(ctx);
    let r: PurgeResult;
    let recorded: boolean;
    try {
      ({ result: r, recorded } = await recordAction(
        ctx,
        sink,
        { actor, action: 'parked.purge', consumer: c.name, filter: filterRecord(options.filter) },
        () => purgeParked(conn, c, { ...purge, only: targets }),
        (p) => ({ count: p.removed, outcome: p.stopReason === 'aborted' ? 'partial' : 'ok', detail: { counted: counted.matched, notFound: p.notFound } }),
      ));
    } finally {
      await sink?.close().catch(() => undefined);
    }
    const report = purgeReport(counted, r);
    if (ctx.json) ctx.printJson({ ...resultJson(r), complete: report.complete, readers: report.readers, missed: report.missed, counted: counted.matched, removed: r.removed, notFound: r.notFound });
    else {
      ctx.out(`Deleted ${plural(r.removed, 'parked message')} of ${c.name} from ${c.parkedQueue}.`);
      if (r.notFound > 0) ctx.out(`${plural(r.notFound, 'counted message')} ${r.notFound === 1 ? 'was' : 'were'} not found: replayed or deleted meanwhile, or held by another consumer of ${c.parkedQueue}.`);
      for (const line of report.lines) ctx.out(line);
    }
    return r.stopReason === 'aborted' ? EXIT.interrupted : recorded ? EXIT.ok : EXIT.failed;
  },
};

const EXPORT_FLAGS: FlagSpecs = {
  ...FILTER_FLAGS,
  output: { type: 'string', short: 'o', label: '--output FILE, -o FILE', help: 'write to FILE instead of stdout (replaced if it exists)' },
  limit: { type: 'string', label: '--limit N', help: 'export at most N matching messages, from the head' },
  ...MAX_HELD_FLAG,
  ...ARCHIVE_FILTER_FLAGS,
};

export const parkedExport: Command = {
  path: ['parked', 'export'],
  usage: 'CONSUMER',
  summary: 'parked messages as JSON lines (nothing is removed)',
  description: [
    'Writes the parked messages of CONSUMER that match the filters as JSON lines, one',
    'message per line, in queue order: id, routing, the failure, properties, every header',
    'and the body (parsed when it is JSON, text when UTF-8, else base64 in bodyBase64).',
    'Nothing is removed. The summary goes to stderr.',
    '',
    'With --db (or WARREN_DB), exports archive rows, oldest failure first, each with its',
    'row id, state and replay and resolution columns.',
  ].join('\n'),
  flags: EXPORT_FLAGS,
  examples: [
    'warren parked export billing > billing-parked.jsonl',
    'warren parked export billing --error-class HttpError -o http-errors.jsonl',
    "warren parked export billing | jq -c '{id: .messageId, error: .failure.message}'",
    'warren parked export billing --db sqlite:data/app.db --header tenant=t4 -o t4.jsonl',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'parked export');
    const c = await consumerArg(ctx, 'parked export');
    if (usesArchive(ctx, 'parked export')) return archiveExport(ctx, c);
    const options = { ...common(ctx), ...limitOf(ctx) };
    const file = str(ctx.values, 'output');
    const conn = await ctx.connection();
    const r = await exportTo(ctx.io.stdout, file, (write) => exportParked(conn, c, { ...options, write }));
    if (r === undefined) return EXIT.ok; // the reader went away (| head)
    const where = file ?? 'stdout';
    if (ctx.json && file !== undefined) ctx.printJson({ ...resultJson(r), exported: r.matched, output: file });
    else if (r.matched === 0) noMatch(ctx, c, options.filter, r);
    else ctx.err(`Exported ${plural(r.matched, 'parked message')} of ${c.name} to ${where}.`);
    for (const line of coverage(r)) ctx.err(line);
    return r.stopReason === 'aborted' ? EXIT.interrupted : EXIT.ok;
  },
};

const { reason: _parkReason, queue: _queue, ...RESOLVE_FILTER_FLAGS } = ARCHIVE_FILTER_FLAGS;

export const parkedResolve: Command = {
  path: ['parked', 'resolve'],
  usage: 'CONSUMER',
  summary: 'mark archived failures as needing nothing more, with a reason (--db)',
  description: [
    'Resolves archived failures of CONSUMER: one (--row N), a selection (--row N,M, a',
    'message --id), a group (--fingerprint, as `parked list --db --group` prints it), or',
    'everything the filters match. They are no longer open: the parked signal and',
    '`warren status` stop counting them, and they stay in the archive (with who, when and',
    'the reason) until retention or a purge removes them. Only rows that existed when the',
    'command counted them are resolved.',
    '',
    'Resolving every open failure of a consumer (no filter) asks first; --yes does not ask,',
    'and is required when stdin is not a terminal. The action is recorded in the action',
    "record of the database, or in --audit-file. The park-reason filter is --parked-reason",
    'here, as --reason is the resolution\'s.',
  ].join('\n'),
  flags: {
    ...FILTER_FLAGS,
    ...RESOLVE_FILTER_FLAGS,
    reason: { type: 'string', label: '--reason TEXT', help: 'why these failures need nothing more (required; at most 1000 characters)' },
    'parked-reason': { type: 'string', label: '--parked-reason NAME', help: 'only failures parked for this reason: max-attempts, permanent, delivery_limit, …' },
    limit: { type: 'string', label: '--limit N', help: 'resolve at most N matching rows' },
    yes: { type: 'boolean', short: 'y', label: '--yes, -y', help: 'do not ask when resolving every open failure of the consumer' },
    ...ACTOR_FLAG,
    ...AUDIT_FILE_FLAG,
  },
  examples: [
    "warren parked resolve billing --db sqlite:data/app.db --row 81234 --reason 'refunded by hand'",
    "warren parked resolve billing --db postgres://ops@db.internal/shop --fingerprint 'ValidationError: …' --reason 'bad input from the old app; fixed in 2.4'",
    "warren parked resolve billing --db $WARREN_DB --header tenant=t9 --reason 'tenant deleted' --actor alice",
  ],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'parked resolve');
    const c = await consumerArg(ctx, 'parked resolve');
    if (str(ctx.values, 'db') === undefined && (ctx.io.env['WARREN_DB'] ?? '').trim() === '') throw new UsageError('`warren parked resolve` works on the archive: give --db URL (or WARREN_DB), the database the application\'s store uses.');
    return archiveResolve(ctx, c);
  },
};
