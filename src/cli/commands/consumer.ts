// `warren consumer …`: hand pauses kept in the application's database (`store.control`).
// Every running consumer given `control: store.control` reads its row at its interval and
// follows it, in whatever process it runs: paused, it takes no messages (they wait in its
// work queue, no attempt counted); resumed, it takes them again. The breaker never lifts
// such a pause. These commands need the database only; a topology, when given, checks the
// consumer's name.
import { checkReason } from '../../breaker/control.js';
import type { ConsumerPauseRow } from '../../breaker/control.js';
import { ACTOR_FLAG, actorOf, AUDIT_FILE_FLAG, storeSink, type ActionSink } from '../actions.js';
import { DB_FLAGS, str } from '../args.js';
import { noExtraArgs, type Command, type CommandContext } from '../command.js';
import { loadTopology } from '../context.js';
import { withStore } from './outbox.js';
import { CliError, EXIT, UsageError } from '../errors.js';
import { clip, plural, relative, table, when } from '../format.js';

/**
 * The consumer named by the first argument. With a topology (--topology or WARREN_TOPOLOGY)
 * an unknown name is refused with the known ones; without one the name is taken as given.
 */
async function consumerName(ctx: CommandContext, command: string): Promise<{ name: string; queue: string | undefined }> {
  noExtraArgs(ctx, 1, command);
  const name = ctx.args[0];
  if (name === undefined || name.trim() === '') throw new UsageError(`\`warren ${command}\` needs a CONSUMER: the name the consumer is declared with in the topology.`);
  if (name.length > 200) throw new UsageError(`CONSUMER: ${JSON.stringify(clip(name, 40))} is longer than 200 characters; a consumer name is at most 200.`);
  const given = str(ctx.values, 'topology') ?? ctx.io.env['WARREN_TOPOLOGY'];
  if (given === undefined || given.trim() === '') return { name, queue: undefined };
  const topology = await loadTopology(str(ctx.values, 'topology'), ctx.io);
  return { name, queue: topology.consumer(name).queue };
}

function rowJson(r: ConsumerPauseRow) {
  return { consumer: r.consumer, paused: r.paused, reason: r.reason, actor: r.actor, since: r.since.toISOString(), resumedBy: r.resumedBy ?? null, resumedAt: r.resumedAt?.toISOString() ?? null };
}

/**
 * Records that the action starts, then acts, then records how it ended. An action whose
 * start cannot be recorded is not done: the pause (or resume) is refused, nothing changes.
 */
async function audited<T>(ctx: CommandContext, sink: ActionSink, action: string, consumer: string, actor: string, reason: string | undefined, act: () => Promise<T>, changed: (r: T) => boolean): Promise<T> {
  const detail = reason === undefined ? {} : { reason };
  try {
    await sink.log.record({ actor, action, consumer, count: 0, outcome: 'started', detail });
  } catch (error) {
    throw new CliError(`Nothing was changed: the action could not be recorded in ${sink.where} (${error instanceof Error ? error.message : String(error)}). Fix that, or record it elsewhere with --audit-file FILE.`, EXIT.failed);
  }
  let result: T;
  try {
    result = await act();
  } catch (error) {
    await sink.log.record({ actor, action, consumer, count: 0, outcome: 'failed', detail: { ...detail, error: error instanceof Error ? error.message.slice(0, 2000) : String(error) } }).catch(() => undefined);
    throw error;
  }
  try {
    await sink.log.record({ actor, action, consumer, count: changed(result) ? 1 : 0, outcome: 'ok', detail });
  } catch (error) {
    ctx.err(`The end of the action was not recorded in ${sink.where}: ${error instanceof Error ? error.message : String(error)} (its start was).`);
  }
  return result;
}

const FOLLOWERS = 'Only consumers given `control: store.control` follow it (docs/breaker.md, "Pausing from anywhere").';

// ── list ────────────────────────────────────────────────────────────────────

export const consumerList: Command = {
  path: ['consumer', 'list'],
  usage: '[CONSUMER]',
  summary: 'hand pauses kept in the database: which consumers are paused, why, by whom',
  description: [
    'Lists the consumers paused by hand in the application\'s database (`warren consumer',
    'pause`, the console, `store.control.pause()`) and those resumed since, with the',
    'reason, who and when. A consumer never paused has no row. Nothing is changed.',
    '',
    'This is what the database says; each running consumer given `control: store.control`',
    'follows its row within its interval (1 s by default). `warren status` shows the',
    'queues, and a paused consumer as fewer consumers on its work queue.',
  ].join('\n'),
  flags: { ...DB_FLAGS },
  examples: ['warren consumer list --db sqlite:data/warren.db', 'warren consumer list shipping --db postgres://ops@db.internal/shop --json'],
  async run(ctx) {
    noExtraArgs(ctx, 1, 'consumer list');
    const only = ctx.args[0];
    return withStore(ctx, async (store) => {
      const rows = await store.control.read(only);
      if (ctx.json) {
        ctx.printJson({ consumers: rows.map(rowJson) });
        return EXIT.ok;
      }
      if (rows.length === 0) {
        ctx.err(only === undefined ? 'No consumer has been paused by hand in this database.' : `Consumer ${only} has never been paused by hand in this database.`);
        return EXIT.ok;
      }
      const now = Date.now();
      const lines = table(
        ['consumer', 'state', 'reason', 'paused by', 'since', 'resumed by'],
        rows.map((r) => [r.consumer, r.paused ? 'paused' : 'resumed', clip(r.reason, 50), r.actor, relative(r.since, now), r.paused ? '-' : `${r.resumedBy ?? '?'} ${r.resumedAt === undefined ? '' : relative(r.resumedAt, now)}`.trim()]),
      );
      for (const line of lines) ctx.out(line);
      ctx.out();
      ctx.out(`${plural(rows.filter((r) => r.paused).length, 'consumer')} paused by hand. ${FOLLOWERS}`);
      return EXIT.ok;
    });
  },
};

// ── pause ───────────────────────────────────────────────────────────────────

export const consumerPause: Command = {
  path: ['consumer', 'pause'],
  usage: 'CONSUMER',
  summary: 'stop a consumer taking messages, in every process, until resumed',
  description: [
    'Pauses CONSUMER by hand, in the application\'s database: every running consumer of',
    'that name given `control: store.control` stops taking messages within its interval',
    '(1 s by default), in every process. Its messages wait in its work queue, in order, with',
    'no attempt counted; those already running finish as they would. The breaker never',
    'lifts a hand pause: only `warren consumer resume` (or the console) does.',
    '',
    '--reason is required and shown wherever the pause is (health, metrics, logs, the',
    'console). The pause is recorded (who, when, why) in the action record of the database,',
    'or as a JSON line in --audit-file, before it is made: a pause that cannot be recorded',
    'is not made. Pausing a consumer already paused changes nothing and says who paused',
    'it. With --topology (or WARREN_TOPOLOGY) the name is checked against it.',
  ].join('\n'),
  flags: {
    reason: { type: 'string', label: '--reason TEXT', help: 'why, 1 to 500 characters, e.g. "carrier maintenance until 14:00" (required)' },
    ...ACTOR_FLAG,
    ...AUDIT_FILE_FLAG,
    ...DB_FLAGS,
  },
  examples: [
    'warren consumer pause shipping --reason "carrier maintenance until 14:00" --db sqlite:data/warren.db',
    'warren consumer pause billing --reason "ledger migration" --actor alice --db postgres://ops@db.internal/shop -t dist/topology.js',
  ],
  async run(ctx) {
    const { name, queue } = await consumerName(ctx, 'consumer pause');
    const given = str(ctx.values, 'reason');
    if (given === undefined) throw new UsageError('`warren consumer pause` needs --reason TEXT: say why, e.g. --reason "carrier maintenance until 14:00". It is shown wherever the pause is.');
    let reason: string;
    try {
      reason = checkReason(given);
    } catch {
      throw new UsageError(`--reason: ${JSON.stringify(clip(given, 40))} is not a reason of 1 to 500 characters.`);
    }
    const actor = actorOf(ctx);
    return withStore(ctx, async (store, where) => {
      const before = (await store.control.read(name))[0];
      if (before?.paused === true) {
        if (ctx.json) ctx.printJson({ consumer: name, paused: false, already: rowJson(before) });
        else ctx.out(`${name} was paused already, by ${before.actor} since ${when(before.since)} (${relative(before.since)}): ${before.reason}. Nothing was changed.`);
        return EXIT.ok;
      }
      const paused = await audited(ctx, storeSink(ctx, store, where), 'consumer.pause', name, actor, reason, () => store.control.pause(name, reason, actor), (r) => r);
      const [row] = await store.control.read(name);
      if (ctx.json) {
        ctx.printJson({ consumer: name, paused, ...(paused ? {} : { already: row === undefined ? null : rowJson(row) }) });
        return EXIT.ok;
      }
      if (!paused && row !== undefined) {
        ctx.out(`${name} was paused meanwhile, by ${row.actor}: ${row.reason}. Nothing was changed.`);
        return EXIT.ok;
      }
      ctx.out(`Paused ${name}: ${reason}`);
      ctx.out(`Its running consumers stop taking messages within their interval (1 s by default); messages wait in ${queue === undefined ? 'its work queue' : `queue ${queue}`}. ${FOLLOWERS}`);
      ctx.out(`Resume with: warren consumer resume ${name}`);
      return EXIT.ok;
    });
  },
};

// ── resume ──────────────────────────────────────────────────────────────────

export const consumerResume: Command = {
  path: ['consumer', 'resume'],
  usage: 'CONSUMER',
  summary: 'lift a hand pause: the consumer takes messages again, in every process',
  description: [
    'Lifts the hand pause of CONSUMER in the application\'s database: its running consumers',
    'take messages again within their interval (1 s by default). If a consumer\'s breaker',
    'is open then (its dependency still down), it goes on probing as before.',
    '',
    'The resume is recorded in the action record of the database, or in --audit-file,',
    'before it is made. Resuming a consumer that is not paused changes nothing.',
  ].join('\n'),
  flags: { ...ACTOR_FLAG, ...AUDIT_FILE_FLAG, ...DB_FLAGS },
  examples: ['warren consumer resume shipping --db sqlite:data/warren.db', 'warren consumer resume billing --actor alice --db postgres://ops@db.internal/shop --json'],
  async run(ctx) {
    const { name } = await consumerName(ctx, 'consumer resume');
    const actor = actorOf(ctx);
    return withStore(ctx, async (store, where) => {
      const before = (await store.control.read(name))[0];
      if (before?.paused !== true) {
        if (ctx.json) ctx.printJson({ consumer: name, resumed: false });
        else ctx.out(`${name} is not paused by hand${before === undefined ? '' : ` (last resumed by ${before.resumedBy ?? '?'} ${before.resumedAt === undefined ? '' : relative(before.resumedAt)})`}. Nothing was changed.`);
        return EXIT.ok;
      }
      const resumed = await audited(ctx, storeSink(ctx, store, where), 'consumer.resume', name, actor, undefined, () => store.control.resume(name, actor), (r) => r);
      if (ctx.json) {
        ctx.printJson({ consumer: name, resumed, pausedBy: before.actor, pausedSince: before.since.toISOString() });
        return EXIT.ok;
      }
      ctx.out(resumed ? `Resumed ${name} (paused by ${before.actor} since ${when(before.since)}: ${before.reason}). Its running consumers take messages again within their interval.` : `${name} was resumed meanwhile. Nothing was changed.`);
      return EXIT.ok;
    });
  },
};

/** The `warren consumer` commands, in the order help lists them. */
export const CONSUMER_COMMANDS: readonly Command[] = [consumerList, consumerPause, consumerResume];
