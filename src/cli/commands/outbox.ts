// `warren outbox …`: the outbox rows the relay flagged (it could not publish them: no queue
// bound for the key, no such exchange). These commands work on the application's database
// alone; they need neither the topology nor the broker.
import type { OutboxFailure, Store } from '../../store/index.js';
import { ACTOR_FLAG, actorOf, AUDIT_FILE_FLAG, recordAction, storeSink } from '../actions.js';
import { DB_FLAGS, list, str, wholeNumber, type FlagSpecs, type ParsedValues } from '../args.js';
import { noExtraArgs, ask, type Command, type CommandContext } from '../command.js';
import { databaseSettings, describeDatabaseError, openDatabase, type DatabaseSettings } from '../context.js';
import { EXIT, UsageError } from '../errors.js';
import { clip, count, plural, relative, shellWord, table, when } from '../format.js';

const ROW_ID = /^[1-9][0-9]{0,18}$/;

/** Every flagged row is read, then filtered here: flagged rows are few (each one waits for a person). */
const READ_ALL = 1_000_000;

/** Which flagged rows a command works on; a row must match all that are given. */
export interface OutboxFilter {
  readonly ids?: readonly string[];
  /** `-` for rows published to the relay's exchange. */
  readonly exchange?: string;
  readonly routingKey?: string;
  /** Text the error contains (case-insensitive). */
  readonly error?: string;
}

const FILTER_FLAGS = {
  id: { type: 'string', multiple: true, label: '--id ID[,ID…]', help: 'these rows (the first column of `warren outbox list`); repeatable' },
  exchange: { type: 'string', label: '--exchange NAME', help: "rows for this exchange; '-' for rows sent to the relay's exchange" },
  'routing-key': { type: 'string', label: '--routing-key KEY', help: 'rows with this routing key' },
  error: { type: 'string', label: '--error TEXT', help: 'rows whose error contains TEXT (any case)' },
} as const satisfies FlagSpecs;

/** The filter the flags give; a usage error names the flag at fault. */
export function outboxFilterOf(values: ParsedValues): OutboxFilter {
  const f: { -readonly [K in keyof OutboxFilter]: OutboxFilter[K] } = {};
  const given = list(values, 'id');
  if (given !== undefined) {
    const ids = given.flatMap((v) => v.split(',')).map((v) => v.trim());
    for (const id of ids) {
      if (!ROW_ID.test(id)) throw new UsageError(`--id: ${JSON.stringify(id)} is not an outbox row id (a whole number above 0, the first column of \`warren outbox list\`).`);
    }
    f.ids = [...new Set(ids)];
  }
  for (const [flag, key] of [['exchange', 'exchange'], ['routing-key', 'routingKey'], ['error', 'error']] as const) {
    const v = str(values, flag);
    if (v === undefined) continue;
    if (v === '' || v.length > 255) throw new UsageError(`--${flag}: ${JSON.stringify(v)} is not a value of 1 to 255 characters.`);
    f[key] = v;
  }
  return f;
}

function isEmpty(f: OutboxFilter): boolean {
  return Object.keys(f).length === 0;
}

/** `exchange orders, error NO_ROUTE`; `every flagged row` for an empty filter. */
export function describeOutboxFilter(f: OutboxFilter): string {
  const parts: string[] = [];
  if (f.ids !== undefined) parts.push(`${f.ids.length === 1 ? 'id' : 'ids'} ${f.ids.join(', ')}`);
  if (f.exchange !== undefined) parts.push(f.exchange === '-' ? "the relay's exchange" : `exchange ${f.exchange}`);
  if (f.routingKey !== undefined) parts.push(`routing key ${f.routingKey}`);
  if (f.error !== undefined) parts.push(`error containing ${JSON.stringify(f.error)}`);
  return parts.length === 0 ? 'every flagged row' : parts.join(', ');
}

function filterFlags(f: OutboxFilter): string {
  const words: string[] = [];
  if (f.ids !== undefined) words.push(`--id ${f.ids.join(',')}`);
  if (f.exchange !== undefined) words.push(`--exchange ${shellWord(f.exchange)}`);
  if (f.routingKey !== undefined) words.push(`--routing-key ${shellWord(f.routingKey)}`);
  if (f.error !== undefined) words.push(`--error ${shellWord(f.error)}`);
  return words.length === 0 ? '--all' : words.join(' ');
}

export function matches(r: OutboxFailure, f: OutboxFilter): boolean {
  if (f.ids !== undefined && !f.ids.includes(r.id)) return false;
  if (f.exchange !== undefined && (f.exchange === '-' ? r.exchange !== null : r.exchange !== f.exchange)) return false;
  if (f.routingKey !== undefined && r.routingKey !== f.routingKey) return false;
  if (f.error !== undefined && !r.error.toLowerCase().includes(f.error.toLowerCase())) return false;
  return true;
}

/** Opens the store, runs `body` on it, maps database failures to one line and an exit code, and closes the store. */
export async function withStore<R>(ctx: CommandContext, body: (store: Store<unknown>, where: string) => Promise<R>): Promise<R> {
  const db: DatabaseSettings = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
  const store = await openDatabase(db);
  try {
    return await body(store, db.shown);
  } catch (error) {
    throw describeDatabaseError(error, db) ?? error;
  } finally {
    await store.close().catch(() => undefined);
  }
}

async function flagged(store: Store<unknown>, f: OutboxFilter): Promise<OutboxFailure[]> {
  return (await store.outbox.failed(READ_ALL)).filter((r) => matches(r, f));
}

function rowJson(r: OutboxFailure) {
  return { ...r, failedAt: r.failedAt.toISOString() };
}

// ── list ────────────────────────────────────────────────────────────────────

export const outboxList: Command = {
  path: ['outbox', 'list'],
  usage: '',
  summary: 'outbox rows the relay flagged: could not publish (no route, no such exchange)',
  description: [
    'Lists the outbox rows the relay flagged instead of retrying them forever (no queue',
    'bound for the routing key, an exchange that does not exist, an undecodable row, a row',
    'amqplib cannot encode, e.g. headers too large), oldest',
    'first: row id, message id, exchange (- for the relay\'s exchange), routing key, when it',
    'was flagged, attempts and the error. Nothing is changed. Fix the cause (declare the',
    'exchange, bind a queue), then `warren outbox release`.',
    '',
    'The rows are in the application\'s database: give it with --db or WARREN_DB. No',
    'topology and no broker are needed. --json prints the full rows (headers and body too).',
  ].join('\n'),
  flags: { ...FILTER_FLAGS, limit: { type: 'string', label: '--limit N', help: 'show at most N rows; default 100' }, ...DB_FLAGS },
  examples: [
    'warren outbox list --db sqlite:data/warren.db',
    'warren outbox list --db postgres://ops@db.internal/shop --error NO_ROUTE',
    'warren outbox list --exchange orders --routing-key order.paid',
    'warren outbox list --json | jq -r ".rows[].messageId"',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'outbox list');
    const filter = outboxFilterOf(ctx.values);
    const limit = wholeNumber(ctx.values, 'limit', 1, 100_000) ?? 100;
    return withStore(ctx, async (store) => {
      const all = await flagged(store, filter);
      const rows = all.slice(0, limit);
      if (ctx.json) {
        ctx.printJson({ filter, total: all.length, limit, rows: rows.map(rowJson) });
        return EXIT.ok;
      }
      if (rows.length === 0) {
        if (isEmpty(filter)) ctx.err('No outbox row is flagged.');
        else ctx.err(`No flagged outbox row matches ${describeOutboxFilter(filter)} (${plural((await store.outbox.lag()).failed, 'flagged row')} in all).`);
        return EXIT.ok;
      }
      const now = Date.now();
      const lines = table(
        ['id', 'message id', 'exchange', 'routing key', 'flagged', 'attempts', 'error'],
        rows.map((r) => [r.id, r.messageId, r.exchange ?? '-', r.routingKey, relative(r.failedAt, now), String(r.attempts), clip(r.error, 60)]),
        ['right', 'left', 'left', 'left', 'left', 'right'],
      );
      for (const line of lines) ctx.out(line);
      ctx.out();
      const shown = rows.length === all.length ? plural(all.length, 'flagged row') : `The first ${count(rows.length)} of ${plural(all.length, 'flagged row')}`;
      ctx.out(`${shown}${isEmpty(filter) ? '' : ` matching ${describeOutboxFilter(filter)}`}.${rows.length < all.length ? ' --limit N shows more.' : ''}`);
      return EXIT.ok;
    });
  },
};

// ── show ────────────────────────────────────────────────────────────────────

/** The body pretty-printed when it is JSON, as stored otherwise. */
function prettyBody(body: string): string {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
}

export const outboxShow: Command = {
  path: ['outbox', 'show'],
  usage: 'ID',
  summary: 'one flagged outbox row whole: headers, body and error',
  description: [
    'Shows one flagged outbox row whole: message id, exchange, routing key, when it was',
    'flagged, attempts, the error, the headers and the body (pretty-printed JSON). Exits 1',
    'when no flagged row has that id (it may have been released and published).',
  ].join('\n'),
  flags: { ...DB_FLAGS },
  examples: ['warren outbox show 1042 --db sqlite:data/warren.db', 'warren outbox show 1042 --json | jq .headers'],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'outbox show');
    const id = ctx.args[0];
    if (id === undefined) throw new UsageError('`warren outbox show` needs the ID of a flagged row (the first column of `warren outbox list`).');
    if (!ROW_ID.test(id)) throw new UsageError(`${JSON.stringify(id)} is not an outbox row id (a whole number above 0, the first column of \`warren outbox list\`).`);
    return withStore(ctx, async (store) => {
      const [r] = await flagged(store, { ids: [id] });
      if (r === undefined) {
        ctx.err(`No flagged outbox row has id ${id}: it was released (and maybe published), or never flagged. \`warren outbox list\` shows the flagged rows.`);
        return EXIT.failed;
      }
      if (ctx.json) {
        ctx.printJson(rowJson(r));
        return EXIT.ok;
      }
      ctx.out(`Row          ${r.id}`);
      ctx.out(`Message id   ${r.messageId}`);
      ctx.out(`Exchange     ${r.exchange ?? "- (the relay's exchange)"}`);
      ctx.out(`Routing key  ${r.routingKey}`);
      ctx.out(`Flagged      ${when(r.failedAt)} (${relative(r.failedAt)})`);
      ctx.out(`Attempts     ${r.attempts}`);
      ctx.out(`Error        ${r.error}`);
      ctx.out();
      ctx.out('Headers');
      const names = Object.keys(r.headers).sort();
      if (names.length === 0) ctx.out('  (none)');
      for (const name of names) {
        const v = r.headers[name];
        ctx.out(`  ${name}: ${typeof v === 'string' ? v : JSON.stringify(v)}`);
      }
      ctx.out();
      ctx.out('Body');
      for (const line of prettyBody(r.body).split('\n')) ctx.out(`  ${line}`);
      return EXIT.ok;
    });
  },
};

// ── release ─────────────────────────────────────────────────────────────────

export const outboxRelease: Command = {
  path: ['outbox', 'release'],
  usage: '',
  summary: 'make flagged outbox rows publishable again, once their cause is fixed',
  description: [
    'Clears the flag of the flagged rows that match the filters, so the relay tries them',
    'again on its next pass. Fix the cause first (declare the exchange, bind a queue for the',
    'routing key): a row that still cannot be published is flagged again.',
    '',
    'A filter is required; --all means every flagged row. It counts the rows first and asks',
    'for confirmation; with --yes it does not ask, and --yes is required when stdin is not a',
    'terminal. Exactly the rows counted are released. Each release is recorded (who, when,',
    'which filter, which row ids) in the action record of the database, or as a JSON line',
    'in --audit-file.',
  ].join('\n'),
  flags: {
    ...FILTER_FLAGS,
    all: { type: 'boolean', label: '--all', help: 'every flagged row: required to release without a filter' },
    yes: { type: 'boolean', short: 'y', label: '--yes, -y', help: 'do not ask; required when stdin is not a terminal' },
    ...ACTOR_FLAG,
    ...AUDIT_FILE_FLAG,
    ...DB_FLAGS,
  },
  examples: [
    'warren outbox release --db sqlite:data/warren.db --id 1042',
    'warren outbox release --exchange orders.v2 --yes',
    'warren outbox release --error NO_ROUTE --routing-key order.paid',
    'warren outbox release --all --yes --json',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'outbox release');
    const filter = outboxFilterOf(ctx.values);
    const all = ctx.values['all'] === true;
    if (all && !isEmpty(filter)) throw new UsageError(`--all means every flagged row; it does not go with filters (${filterFlags(filter)}). Give the filters or --all.`);
    if (!all && isEmpty(filter)) throw new UsageError('`warren outbox release` needs a filter to say which rows: --id, --exchange, --routing-key or --error. To release every flagged row, pass --all.');
    const actor = actorOf(ctx);
    return withStore(ctx, async (store, where) => {
      const rows = await flagged(store, filter);
      const ids = rows.map((r) => r.id);
      if (rows.length === 0) {
        if (ctx.json) ctx.printJson({ filter, actor, released: 0, ids: [] });
        else ctx.err(`No flagged outbox row matches ${describeOutboxFilter(filter)}; nothing was released.`);
        return filter.ids !== undefined ? EXIT.failed : EXIT.ok;
      }
      const what = plural(rows.length, 'flagged outbox row');
      if (ctx.values['yes'] !== true) {
        if (ctx.io.stdin.isTTY !== true) throw new UsageError(`This would release ${what} (${describeOutboxFilter(filter)}). Pass --yes to confirm: stdin is not a terminal, so warren cannot ask.`);
        for (const r of rows.slice(0, 20)) ctx.err(`  ${r.id}  ${r.exchange ?? '-'}  ${r.routingKey}  ${clip(r.error, 60)}`);
        if (rows.length > 20) ctx.err(`  … and ${count(rows.length - 20)} more`);
        if (!(await ask(ctx, `Release ${what}? The relay publishes them on its next pass. [y/N] `))) {
          ctx.err('Nothing was released.');
          return EXIT.failed;
        }
      }
      const { result: released, recorded } = await recordAction(
        ctx,
        storeSink(ctx, store, where),
        { actor, action: 'outbox.release', filter: { ...filter } },
        () => store.outbox.release(ids),
        (n) => ({ count: n, outcome: 'ok', detail: { ids: ids.slice(0, 1000), counted: ids.length } }),
      );
      if (!recorded) return EXIT.failed;
      if (ctx.json) {
        ctx.printJson({ filter, actor, released, ids });
        return released === ids.length ? EXIT.ok : EXIT.failed;
      }
      ctx.out(`Released ${plural(released, 'row')}: the relay publishes ${released === 1 ? 'it' : 'them'} on its next pass.`);
      if (released < ids.length) {
        ctx.out(`${plural(ids.length - released, 'row')} counted ${ids.length - released === 1 ? 'was' : 'were'} no longer flagged (released or published meanwhile).`);
        return EXIT.failed;
      }
      return EXIT.ok;
    });
  },
};

/** The `warren outbox` commands, in the order help lists them. */
export const OUTBOX_COMMANDS: readonly Command[] = [outboxList, outboxShow, outboxRelease];

