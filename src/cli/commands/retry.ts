// `warren retry …`: the retry table's controls. These commands work on the application's
// database alone; they need neither the topology nor the broker.
import { holdOf } from '../../retry-table/filter.js';
import { type ChangeOptions, type RetryAuditEntry, type RetryFilter, type RetryHold, type RetryRow, type RetryTable } from '../../retry-table/index.js';
import type { Store } from '../../store/index.js';
import { ACTOR_FLAG, actorOf, AUDIT_FILE_FLAG, recordAction, storeSink } from '../actions.js';
import { DB_FLAGS, list, RETRY_FILTER_FLAGS, str, wholeNumber, type FlagSpecs, type ParsedValues } from '../args.js';
import { noExtraArgs, type Command, type CommandContext } from '../command.js';
import { databaseSettings, describeDatabaseError, openDatabase, type DatabaseSettings } from '../context.js';
import { EXIT, UsageError } from '../errors.js';
import { clip, count, plural, relative, shellWord, span, table, when } from '../format.js';

type MutableFilter = { -readonly [K in keyof RetryFilter]: RetryFilter[K] };

const TEXT_FLAGS = [
  ['consumer', 'consumer'],
  ['dependency', 'dependency'],
  ['tenant', 'tenant'],
  ['error-class', 'errorClass'],
] as const;

const ROW_ID = /^[1-9][0-9]{0,18}$/;

/** The filter the flags give; a usage error names the flag at fault. */
export function retryFilterOf(values: ParsedValues): RetryFilter {
  const f: MutableFilter = {};
  for (const [flag, key] of TEXT_FLAGS) {
    const v = str(values, flag);
    if (v === undefined) continue;
    if (v.trim() === '' || v.length > 255) throw new UsageError(`--${flag}: ${JSON.stringify(v)} is not a name of 1 to 255 characters.`);
    f[key] = v;
  }
  const given = list(values, 'id');
  if (given !== undefined) {
    const ids = given.flatMap((v) => v.split(',')).map((v) => v.trim());
    for (const id of ids) {
      if (!ROW_ID.test(id)) throw new UsageError(`--id: ${JSON.stringify(id)} is not a row id (a whole number above 0, the first column of \`warren retry list\`).`);
    }
    f.ids = [...new Set(ids)];
  }
  if (values['paused'] === true && values['unpaused'] === true) throw new UsageError('--paused and --unpaused exclude each other; give one of them.');
  if (values['paused'] === true) f.paused = true;
  if (values['unpaused'] === true) f.paused = false;
  if (values['due'] === true && values['not-due'] === true) throw new UsageError('--due and --not-due exclude each other; give one of them.');
  if (values['due'] === true) f.due = true;
  if (values['not-due'] === true) f.due = false;
  return f;
}

/** `tenant 42, dependency carrier, paused`; `every row` for an empty filter. */
export function describeRetryFilter(f: RetryFilter): string {
  const parts: string[] = [];
  if (f.ids !== undefined) parts.push(`${f.ids.length === 1 ? 'id' : 'ids'} ${f.ids.join(', ')}`);
  if (f.consumer !== undefined) parts.push(`consumer ${f.consumer}`);
  if (f.dependency !== undefined) parts.push(`dependency ${f.dependency}`);
  if (f.tenant !== undefined) parts.push(`tenant ${f.tenant}`);
  if (f.errorClass !== undefined) parts.push(`error class ${f.errorClass}`);
  if (f.paused !== undefined) parts.push(f.paused ? 'paused' : 'not paused');
  if (f.due !== undefined) parts.push(f.due ? 'due' : 'not due');
  return parts.length === 0 ? 'every row' : parts.join(', ');
}

/** The filter as command-line flags, e.g. `--tenant 42 --paused`; `--all` for an empty filter. */
export function filterFlags(f: RetryFilter): string {
  const words: string[] = [];
  for (const [flag, key] of TEXT_FLAGS) {
    const v = f[key];
    if (v !== undefined) words.push(`--${flag} ${shellWord(v)}`);
  }
  if (f.ids !== undefined) words.push(`--id ${f.ids.join(',')}`);
  if (f.paused !== undefined) words.push(f.paused ? '--paused' : '--unpaused');
  if (f.due !== undefined) words.push(f.due ? '--due' : '--not-due');
  return words.length === 0 ? '--all' : words.join(' ');
}

function isEmpty(f: RetryFilter): boolean {
  return Object.keys(f).length === 0;
}

/** ` matching tenant 42`, or nothing for every row. */
function matching(f: RetryFilter): string {
  return isEmpty(f) ? '' : ` matching ${describeRetryFilter(f)}`;
}

/** Opens the store, runs `body` on its retry table, maps database failures to one line and an exit code, and closes the store. */
async function withTable<R>(ctx: CommandContext, body: (table: RetryTable, store: Store<unknown>, where: string) => Promise<R>): Promise<R> {
  const db: DatabaseSettings = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
  const store = await openDatabase(db);
  try {
    return await body(store.retryTable, store, db.shown);
  } catch (error) {
    throw describeDatabaseError(error, db) ?? error;
  } finally {
    await store.close().catch(() => undefined);
  }
}

/** The part of the filter a pause keeps as a pause in force, in words; undefined when it pauses these rows only. */
function holdWords(f: RetryFilter): string | undefined {
  const hold = holdOf(f);
  if (hold === undefined) return undefined;
  return describeRetryFilter({
    ...(hold.consumer !== null ? { consumer: hold.consumer } : {}),
    ...(hold.dependency !== null ? { dependency: hold.dependency } : {}),
    ...(hold.tenant !== null ? { tenant: hold.tenant } : {}),
    ...(hold.errorClass !== null ? { errorClass: hold.errorClass } : {}),
  });
}

function describeHold(h: RetryHold): string {
  return describeRetryFilter({
    ...(h.consumer !== null ? { consumer: h.consumer } : {}),
    ...(h.dependency !== null ? { dependency: h.dependency } : {}),
    ...(h.tenant !== null ? { tenant: h.tenant } : {}),
    ...(h.errorClass !== null ? { errorClass: h.errorClass } : {}),
  });
}

function holdKey(h: RetryHold): string {
  return JSON.stringify([h.consumer, h.dependency, h.tenant, h.errorClass]);
}

function holdJson(h: RetryHold) {
  return { consumer: h.consumer, dependency: h.dependency, tenant: h.tenant, errorClass: h.errorClass, actor: h.actor, since: h.since.toISOString() };
}

// ── list ────────────────────────────────────────────────────────────────────

function nextAttempt(r: RetryRow, now: number): string {
  return r.nextAttemptAt === null ? 'none' : `${relative(r.nextAttemptAt, now)} (${when(r.nextAttemptAt)})`;
}

const LIST_FLAGS: FlagSpecs = {
  ...RETRY_FILTER_FLAGS,
  limit: { type: 'string', label: '--limit N', help: 'show at most N rows; default 100' },
  offset: { type: 'string', label: '--offset N', help: 'skip the first N matching rows (for the next page); default 0' },
  ...DB_FLAGS,
};

export const retryList: Command = {
  path: ['retry', 'list'],
  usage: '',
  summary: 'rows of the retry table: what waits, for which dependency, until when',
  description: [
    'Lists the rows of the retry table (messages a handler asked to wait for a condition or',
    'a person), next attempt first and rows with none last: row id, consumer, dependency,',
    'tenant, error class, attempt, next attempt (relative and ISO, or none), whether it is',
    'paused, and the last error. Nothing is changed.',
    '',
    'The rows are in the application\'s database: give it with --db or WARREN_DB. No',
    'topology and no broker are needed. --json prints the full rows (body and headers too).',
  ].join('\n'),
  flags: LIST_FLAGS,
  examples: [
    'warren retry list --db sqlite:data/warren.db',
    'warren retry list --db postgres://ops@db.internal/shop --dependency carrier --due',
    'warren retry list --tenant 42 --paused --limit 20 --offset 20',
    'warren retry list --dependency carrier --json | jq -r ".rows[].messageId"',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'retry list');
    const filter = retryFilterOf(ctx.values);
    const limit = wholeNumber(ctx.values, 'limit', 1, 100_000) ?? 100;
    const offset = wholeNumber(ctx.values, 'offset', 0) ?? 0;
    return withTable(ctx, async (t) => {
      const total = await t.count(filter);
      const rows = total > offset ? await t.list(filter, { limit, offset }) : [];
      if (ctx.json) {
        ctx.printJson({ filter, total, offset, limit, rows });
        return EXIT.ok;
      }
      if (rows.length === 0) {
        if (total > 0) ctx.err(`No rows after --offset ${count(offset)}: ${plural(total, 'row')}${matching(filter)}.`);
        else if (isEmpty(filter)) ctx.err('The retry table is empty.');
        else ctx.err(`No row matches ${describeRetryFilter(filter)} (${plural(await t.count(), 'row')} in the retry table).`);
        return EXIT.ok;
      }
      const now = Date.now();
      const lines = table(
        ['id', 'consumer', 'dependency', 'tenant', 'error class', 'attempt', 'next attempt', 'paused', 'last error'],
        rows.map((r) => [r.id, r.consumer, r.dependency, r.tenant ?? '-', r.errorClass, String(r.attempt), nextAttempt(r, now), r.paused ? 'yes' : 'no', clip(r.lastError, 50)]),
        ['right', 'left', 'left', 'left', 'left', 'right'],
      );
      for (const line of lines) ctx.out(line);
      ctx.out();
      const range = rows.length === total ? plural(total, 'row') : `Rows ${count(offset + 1)} to ${count(offset + rows.length)} of ${count(total)}`;
      ctx.out(`${range}${matching(filter)}.${offset + rows.length < total ? ` Next page: --offset ${offset + rows.length}.` : ''}`);
      return EXIT.ok;
    });
  },
};

// ── count ───────────────────────────────────────────────────────────────────

export const retryCount: Command = {
  path: ['retry', 'count'],
  usage: '',
  summary: 'how many rows match the filters, optionally by dependency',
  description: [
    'Counts the rows of the retry table that match the filters (all rows without filters).',
    'With --by dependency, counts them per dependency. Nothing is changed.',
  ].join('\n'),
  flags: {
    ...RETRY_FILTER_FLAGS,
    by: { type: 'string', label: '--by dependency', help: 'count per dependency' },
    ...DB_FLAGS,
  },
  examples: ['warren retry count --db sqlite:data/warren.db', 'warren retry count --paused', 'warren retry count --tenant 42 --by dependency', 'warren retry count --due --json | jq .total'],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'retry count');
    const filter = retryFilterOf(ctx.values);
    const by = str(ctx.values, 'by');
    if (by !== undefined && by !== 'dependency') {
      throw new UsageError(`--by: ${JSON.stringify(by)} cannot be grouped on; rows can be counted by dependency. To count one ${by === 'error-class' ? 'error class' : by}, filter on it instead (e.g. --${by} NAME).`);
    }
    return withTable(ctx, async (t) => {
      const total = await t.count(filter);
      if (by === undefined) {
        if (ctx.json) ctx.printJson({ filter, total });
        else ctx.out(isEmpty(filter) ? `${plural(total, 'row')} in the retry table.` : `${plural(total, 'row')} ${total === 1 ? 'matches' : 'match'} ${describeRetryFilter(filter)}.`);
        return EXIT.ok;
      }
      const names = filter.dependency !== undefined ? [filter.dependency] : await t.dependencies();
      const groups: Array<{ dependency: string; rows: number }> = [];
      for (const dependency of names) {
        const rows = await t.count({ ...filter, dependency });
        if (rows > 0) groups.push({ dependency, rows });
      }
      groups.sort((a, b) => b.rows - a.rows || a.dependency.localeCompare(b.dependency));
      if (ctx.json) {
        ctx.printJson({ filter, total, by, groups });
        return EXIT.ok;
      }
      if (groups.length > 0) {
        for (const line of table(['dependency', 'rows'], groups.map((g) => [g.dependency, count(g.rows)]), ['left', 'right'])) ctx.out(line);
        ctx.out();
      }
      ctx.out(`${plural(total, 'row')}${matching(filter)}${groups.length > 0 ? ` in ${plural(groups.length, 'dependency', 'dependencies')}` : ''}.`);
      return EXIT.ok;
    });
  },
};

// ── changes: pause, resume, schedule, park ──────────────────────────────────

const CHANGE_FLAGS = {
  all: { type: 'boolean', label: '--all', help: 'every row: required to change rows without a filter' },
  ...ACTOR_FLAG,
  ...AUDIT_FILE_FLAG,
  'allow-unknown': { type: 'boolean', label: '--allow-unknown', help: 'accept a --dependency that nothing names yet (a pause ahead of the first failure)' },
} as const satisfies FlagSpecs;

/** The filter and options of a change, checked before the database is opened. */
function changeOf(ctx: CommandContext, command: string): { filter: RetryFilter; options: Required<Pick<ChangeOptions, 'actor'>> & ChangeOptions } {
  noExtraArgs(ctx, 0, `retry ${command}`);
  const filter = retryFilterOf(ctx.values);
  const all = ctx.values['all'] === true;
  if (all && !isEmpty(filter)) throw new UsageError(`--all means every row; it does not go with filters (${filterFlags(filter)}). Give the filters or --all.`);
  if (!all && isEmpty(filter)) {
    throw new UsageError(
      `\`warren retry ${command}\` needs a filter to say which rows: --consumer, --dependency, --tenant, --error-class, --id, --paused/--unpaused or --due/--not-due. To ${command} every row, pass --all.`,
    );
  }
  const actor = actorOf(ctx);
  const allowUnknown = ctx.values['allow-unknown'] === true;
  return { filter, options: { actor, ...(allowUnknown ? { allowUnknown } : {}) } };
}

/**
 * Runs a change of the retry table and records it in the action record (--audit-file, else
 * the store). Returns the rows changed, and whether the record was written.
 */
async function recordedChange(ctx: CommandContext, store: Store<unknown>, where: string, action: string, filter: RetryFilter, actor: string, change: () => Promise<number>, detail: Record<string, unknown> = {}): Promise<{ rows: number; recorded: boolean }> {
  const { result, recorded } = await recordAction(ctx, storeSink(ctx, store, where), { actor, action: `retry.${action}`, ...(filter.consumer !== undefined ? { consumer: filter.consumer } : {}), filter: { ...filter } }, change, (rows) => ({ count: rows, outcome: 'ok', detail }));
  return { rows: result, recorded };
}

function byActor(actor: string): string {
  return `(recorded as ${actor})`;
}

export const retryPause: Command = {
  path: ['retry', 'pause'],
  usage: '',
  summary: 'pause matching rows: the scheduler skips them until they are resumed',
  description: [
    'Pauses the rows that match the filters: the scheduler does not send them back until',
    'they are resumed. A pause by consumer, dependency, tenant or error class (or --all)',
    'stays in force and also pauses rows added later that match, until `warren retry resume`',
    'with the same filter lifts it. A pause by --id or by state (--paused, --due) pauses the',
    'rows there now only; a health check never unpauses those.',
    '',
    'A filter is required; --all means every row. A --dependency that nothing names is',
    'refused with the known ones listed (a typo would pause nothing); --allow-unknown',
    'pauses ahead of the first failure. The change is recorded with --actor (see',
    '`warren retry history`). Prints how many rows it paused.',
  ].join('\n'),
  flags: { ...RETRY_FILTER_FLAGS, ...CHANGE_FLAGS, ...DB_FLAGS },
  examples: [
    'warren retry pause --db postgres://ops@db.internal/shop --dependency carrier --actor alice',
    'warren retry pause --tenant 42',
    'warren retry pause --dependency new-carrier --allow-unknown',
    'warren retry pause --id 1041,1042 --json',
  ],
  async run(ctx) {
    const { filter, options } = changeOf(ctx, 'pause');
    return withTable(ctx, async (t, store, where) => {
      const { rows, recorded } = await recordedChange(ctx, store, where, 'pause', filter, options.actor, () => t.pause(filter, options));
      const holds = holdWords(filter);
      if (ctx.json) {
        ctx.printJson({ action: 'pause', rows, filter, actor: options.actor, pausesLaterRows: holds !== undefined });
        return recorded ? EXIT.ok : EXIT.failed;
      }
      ctx.out(`Paused ${plural(rows, 'row')}${matching(filter)} ${byActor(options.actor)}.`);
      if (holds === 'every row') ctx.out('Every row added later is paused too, until `warren retry resume --all`.');
      else if (holds !== undefined) ctx.out(`Rows of ${holds} added later are paused too, until \`warren retry resume ${filterFlags(filter)}\`.`);
      else ctx.out('Rows added later are not paused by this: a pause by consumer, dependency, tenant or error class also holds later rows.');
      return recorded ? EXIT.ok : EXIT.failed;
    });
  },
};

export const retryResume: Command = {
  path: ['retry', 'resume'],
  usage: '',
  summary: 'unpause matching rows and lift the pause made with the same filter',
  description: [
    'Unpauses the rows that match the filters and lifts the pause made with the same filter',
    '(resume --tenant 42 lifts the pause of tenant 42; a pause of tenant 42 on one dependency',
    'stays). Rows that another pause still covers stay paused, and the output says how many',
    '(`warren retry signals` lists the pauses in force). With --due-now, the resumed rows',
    'also become due now (rows with no next attempt, or a later one), so the scheduler',
    'sends them back at once, at its rate.',
    '',
    'A filter is required; --all means every row and lifts the pause of every row. Prints',
    'how many rows it resumed.',
  ].join('\n'),
  flags: {
    ...RETRY_FILTER_FLAGS,
    'due-now': { type: 'boolean', label: '--due-now', help: 'also make the resumed rows due now' },
    ...CHANGE_FLAGS,
    ...DB_FLAGS,
  },
  examples: ['warren retry resume --dependency carrier --due-now', 'warren retry resume --tenant 42 --actor alice', 'warren retry resume --all --json'],
  async run(ctx) {
    const { filter, options } = changeOf(ctx, 'resume');
    const dueNow = ctx.values['due-now'] === true;
    return withTable(ctx, async (t, store, where) => {
      const before = await t.holds();
      const { rows, recorded } = await recordedChange(ctx, store, where, 'resume', filter, options.actor, () => t.resume(filter, { ...options, dueNow }), { dueNow });
      const after = new Set((await t.holds()).map(holdKey));
      const lifted = before.filter((h) => !after.has(holdKey(h)));
      const stillPaused = filter.paused === false ? 0 : await t.count({ ...filter, paused: true });
      if (ctx.json) {
        ctx.printJson({ action: 'resume', rows, filter, actor: options.actor, dueNow, liftedPauses: lifted.map(holdJson), stillPaused });
        return recorded ? EXIT.ok : EXIT.failed;
      }
      ctx.out(`Resumed ${plural(rows, 'row')}${matching(filter)}${dueNow && rows > 0 ? ', due now' : ''} ${byActor(options.actor)}.`);
      if (lifted.length > 0) ctx.out(`Lifted ${plural(lifted.length, 'pause')}: ${lifted.map((h) => `${describeHold(h)} (by ${h.actor})`).join('; ')}.`);
      if (stillPaused > 0) ctx.out(`${plural(stillPaused, 'matching row')} ${stillPaused === 1 ? 'stays' : 'stay'} paused: another pause covers ${stillPaused === 1 ? 'it' : 'them'}. See \`warren retry signals\` for the pauses in force.`);
      return recorded ? EXIT.ok : EXIT.failed;
    });
  },
};

const SPAN_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const AT_EXAMPLES = 'now, none, an ISO time such as 2026-03-01T12:00:00Z, or a span from now such as +30m, +2h, +1d';

/** `--at`: `now`, `none`, an ISO date-time, or `+SPAN` from now. */
export function parseAt(raw: string, now: number = Date.now()): Date | 'now' | null {
  const text = raw.trim();
  if (/^now$/i.test(text)) return 'now';
  if (/^none$/i.test(text)) return null;
  const rel = /^\+\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)$/i.exec(text);
  if (rel) return new Date(now + Math.round(Number(rel[1]) * SPAN_MS[(rel[2] as string).toLowerCase() as keyof typeof SPAN_MS]));
  if (/^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i.test(text)) {
    const d = new Date(text.replace(' ', 'T'));
    if (!Number.isNaN(d.getTime())) return d;
  }
  throw new UsageError(`--at: ${JSON.stringify(raw)} is not a time. Give ${AT_EXAMPLES}.`);
}

export const retrySchedule: Command = {
  path: ['retry', 'schedule'],
  usage: '',
  summary: 'set the next attempt of matching rows: now, a time, or none',
  description: [
    'Sets the next attempt of the rows that match the filters. --at now makes them due',
    'now; --at TIME at that time (a time in the past means now, and the output says so);',
    '--at none clears it: the rows then wait for a person (`schedule --at now`, or',
    '`resume --due-now`). TIME is an ISO date-time (2026-03-01T12:00:00Z; without a zone it',
    'is local time) or a span from now (+30m, +2h, +1d). Paused rows keep their pause: the',
    'scheduler sends them back only once they are resumed.',
    '',
    'A filter is required; --all means every row. Prints how many rows it changed.',
  ].join('\n'),
  flags: {
    ...RETRY_FILTER_FLAGS,
    at: { type: 'string', label: '--at now|TIME|none', help: 'the next attempt: now, an ISO time or +SPAN (+30m, +2h), or none' },
    ...CHANGE_FLAGS,
    ...DB_FLAGS,
  },
  examples: [
    'warren retry schedule --dependency carrier --at now',
    'warren retry schedule --tenant 42 --at 2026-03-01T06:00:00Z',
    'warren retry schedule --error-class TaxApiError --at +2h',
    'warren retry schedule --id 1041 --at none',
  ],
  async run(ctx) {
    const { filter, options } = changeOf(ctx, 'schedule');
    const raw = str(ctx.values, 'at');
    if (raw === undefined) throw new UsageError(`\`warren retry schedule\` needs --at: ${AT_EXAMPLES}.`);
    const at = parseAt(raw);
    return withTable(ctx, async (t, store, where) => {
      const inThePast = at instanceof Date && at.getTime() < Date.now();
      const { rows, recorded } = await recordedChange(ctx, store, where, 'schedule', filter, options.actor, () => t.schedule(filter, at, options), { at: at === null ? null : at === 'now' ? 'now' : at.toISOString() });
      const stillPaused = at === null || filter.paused === false || rows === 0 ? 0 : await t.count({ ...filter, paused: true });
      const set = at === null ? null : at === 'now' || inThePast ? 'now' : at.toISOString();
      if (ctx.json) {
        ctx.printJson({ action: 'schedule', rows, filter, actor: options.actor, at: raw, nextAttemptAt: set, inThePast, stillPaused });
        return recorded ? EXIT.ok : EXIT.failed;
      }
      const what = `the next attempt of ${plural(rows, 'row')}${matching(filter)}`;
      const [they, are, them] = rows === 1 ? ['it', 'is', 'it'] : ['they', 'are', 'them'];
      if (at === null) ctx.out(`Cleared ${what} ${byActor(options.actor)}: ${they} wait${rows === 1 ? 's' : ''} until someone schedules ${them} or resumes ${them} with --due-now.`);
      else if (at === 'now') ctx.out(`Set ${what} to now ${byActor(options.actor)}: ${they} ${are} due.`);
      else if (inThePast) ctx.out(`Set ${what} to now ${byActor(options.actor)}: ${when(at)} is in the past, so ${they} ${are} due now.`);
      else ctx.out(`Set ${what} to ${when(at)} (${relative(at)}) ${byActor(options.actor)}.`);
      if (stillPaused > 0) ctx.out(`${count(stillPaused)} of them ${stillPaused === 1 ? 'is' : 'are'} paused: the scheduler skips ${stillPaused === 1 ? 'it' : 'them'} until resumed.`);
      return recorded ? EXIT.ok : EXIT.failed;
    });
  },
};

export const retryPark: Command = {
  path: ['retry', 'park'],
  usage: '',
  summary: "send matching rows to their consumer's parked queue, with their last failure",
  description: [
    "Takes the rows that match the filters out of the retry table and sends each to its",
    "consumer's parked queue, with its last failure and warren-parked-reason: operator.",
    "They go through the store's outbox in the same transaction: the application's outbox",
    'relay (or a retry scheduler\'s relay) publishes them, and until one runs they wait in',
    'the outbox. Once parked, `warren parked` lists, replays and exports them.',
    '',
    'A filter is required; --all means every row. Prints how many rows it parked.',
  ].join('\n'),
  flags: { ...RETRY_FILTER_FLAGS, ...CHANGE_FLAGS, ...DB_FLAGS },
  examples: ['warren retry park --error-class ValidationError', 'warren retry park --dependency legacy-erp --actor alice', 'warren retry park --id 1041 --json'],
  async run(ctx) {
    const { filter, options } = changeOf(ctx, 'park');
    return withTable(ctx, async (t, store, where) => {
      const { rows, recorded } = await recordedChange(ctx, store, where, 'park', filter, options.actor, () => t.park(filter, options));
      const pending = rows > 0 ? (await store.outbox.lag()).pending : 0;
      if (ctx.json) {
        ctx.printJson({ action: 'park', rows, filter, actor: options.actor, outboxPending: pending });
        return recorded ? EXIT.ok : EXIT.failed;
      }
      ctx.out(`Parked ${plural(rows, 'row')}${matching(filter)} ${byActor(options.actor)}.`);
      if (rows > 0) ctx.out(`They are in the outbox, addressed to their parked queues (${plural(pending, 'message')} waiting there in all); the application's outbox relay publishes them.`);
      return recorded ? EXIT.ok : EXIT.failed;
    });
  },
};

// ── history, signals ────────────────────────────────────────────────────────

function detailWords(e: RetryAuditEntry): string {
  const d = e.detail;
  const words: string[] = [];
  if (e.action === 'schedule') words.push(typeof d['nextAttemptAt'] === 'string' ? `next attempt ${when(d['nextAttemptAt'])}` : 'next attempt none');
  if (e.action === 'resume' && d['dueNow'] === true) words.push('due now');
  if (e.action === 'resume' && typeof d['liftedPauses'] === 'number' && d['liftedPauses'] > 0) words.push(`lifted ${plural(d['liftedPauses'], 'pause')}`);
  if (e.action === 'resume' && d['ownPausesOnly'] === true) words.push('own pauses only');
  if (e.action === 'pause' && d['hold'] === true) words.push('pauses later rows');
  return words.join(', ') || '-';
}

export const retryHistory: Command = {
  path: ['retry', 'history'],
  usage: '',
  summary: 'who changed the retry table, when, how, and how many rows',
  description: [
    'Shows the recorded changes to the retry table, newest first: when, who (an operator,',
    'health-check:<dependency>, or what the application passed), the action, its filter,',
    'the detail (the next attempt set, due now, pauses lifted) and how many rows it touched.',
  ].join('\n'),
  flags: {
    limit: { type: 'string', label: '--limit N', help: 'show the last N changes; default 20' },
    ...DB_FLAGS,
  },
  examples: ['warren retry history --db sqlite:data/warren.db', 'warren retry history --limit 100', 'warren retry history --json | jq \'.entries[] | select(.actor == "alice")\''],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'retry history');
    const limit = wholeNumber(ctx.values, 'limit', 1, 100_000) ?? 20;
    return withTable(ctx, async (t) => {
      const entries = await t.history(limit);
      if (ctx.json) {
        ctx.printJson({ entries });
        return EXIT.ok;
      }
      if (entries.length === 0) {
        ctx.err('No change to the retry table has been recorded yet.');
        return EXIT.ok;
      }
      const lines = table(
        ['when', 'actor', 'action', 'filter', 'detail', 'rows'],
        entries.map((e) => [when(e.at), e.actor, e.action, clip(describeRetryFilter(e.filter), 60), detailWords(e), count(e.rows)]),
        ['left', 'left', 'left', 'left', 'left', 'right'],
      );
      for (const line of lines) ctx.out(line);
      if (entries.length === limit) {
        ctx.out();
        ctx.out(`The last ${plural(limit, 'change')}; --limit N shows more.`);
      }
      return EXIT.ok;
    });
  },
};

export const retrySignals: Command = {
  path: ['retry', 'signals'],
  usage: '',
  summary: 'what an alert watches: rows due, paused, waiting, the oldest due, the pauses in force',
  description: [
    'Shows the figures an alert watches: rows in the table, rows due (unpaused, next attempt',
    'come: what the scheduler should be sending), paused, waiting for a person (unpaused,',
    'no next attempt), and how long the oldest due row has been due. An age that keeps',
    'growing means no scheduler is draining the table. Then the same figures by',
    'dependency, and the pauses in force (by whom, since when).',
  ].join('\n'),
  flags: { ...DB_FLAGS },
  examples: ['warren retry signals --db postgres://ops@db.internal/shop', 'warren retry signals --json | jq .oldestDueAgeMs'],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'retry signals');
    return withTable(ctx, async (t) => {
      const s = await t.signals();
      const holds = await t.holds();
      if (ctx.json) {
        ctx.printJson({ ...s, holds: holds.map(holdJson) });
        return EXIT.ok;
      }
      ctx.out(`Retry table: ${plural(s.rows, 'row')}, ${count(s.due)} due, ${count(s.paused)} paused, ${count(s.waiting)} waiting for a person.`);
      ctx.out(s.due > 0 ? `Oldest due row: due for ${span(s.oldestDueAgeMs)}.` : 'No row is due.');
      const deps = Object.entries(s.byDependency);
      if (deps.length > 0) {
        ctx.out();
        ctx.out('By dependency');
        const lines = table(['dependency', 'rows', 'due', 'paused'], deps.map(([d, f]) => [d, count(f.rows), count(f.due), count(f.paused)]), ['left', 'right', 'right', 'right']);
        for (const line of lines) ctx.out(`  ${line}`);
      }
      ctx.out();
      if (holds.length === 0) ctx.out('No pause in force.');
      else {
        ctx.out('Pauses in force');
        const now = Date.now();
        const lines = table(
          ['consumer', 'dependency', 'tenant', 'error class', 'by', 'since'],
          holds.map((h) => [h.consumer ?? '*', h.dependency ?? '*', h.tenant ?? '*', h.errorClass ?? '*', h.actor, `${when(h.since)} (${relative(h.since, now)})`]),
        );
        for (const line of lines) ctx.out(`  ${line}`);
      }
      return EXIT.ok;
    });
  },
};

/** The `warren retry` commands, in the order help lists them. */
export const RETRY_COMMANDS: readonly Command[] = [retryList, retryCount, retryPause, retryResume, retrySchedule, retryPark, retryHistory, retrySignals];
