// The action record from the command line: who acts (--actor), where the record goes
// (--audit-file, else the database of --db), and one entry per command that changes things.
import { fileActionLog } from '../audit/file.js';
import type { ActionEntry, ActionLog, ActionOutcome } from '../audit/entry.js';
import { defaultActor } from '../retry-table/index.js';
import type { Store } from '../store/index.js';
import { str, type FlagSpecs } from './args.js';
import type { CommandContext } from './command.js';
import { databaseSettings, describeDatabaseError, openDatabase } from './context.js';
import { UsageError } from './errors.js';

export const ACTOR_FLAG = {
  actor: { type: 'string', label: '--actor NAME', help: 'who acts, for the action record; env WARREN_ACTOR, else $USER' },
} as const satisfies FlagSpecs;

export const AUDIT_FILE_FLAG = {
  'audit-file': { type: 'string', label: '--audit-file FILE', help: 'record the action as a JSON line in FILE (env WARREN_AUDIT_FILE) instead of the database of --db' },
} as const satisfies FlagSpecs;

/** Who acts: --actor, else WARREN_ACTOR, else $USER, else `<os user>@<host>`. */
export function actorOf(ctx: CommandContext): string {
  const flag = str(ctx.values, 'actor');
  const env = [ctx.io.env['WARREN_ACTOR'], ctx.io.env['USER']].find((v) => v !== undefined && v.trim() !== '');
  const actor = (flag ?? env ?? defaultActor()).trim();
  if (actor === '' || actor.length > 200) throw new UsageError(`--actor: ${JSON.stringify(flag ?? env)} is not a name of 1 to 200 characters.`);
  return actor;
}

/** Where a command's actions are recorded, and how to let go of it. */
export interface ActionSink {
  readonly log: ActionLog;
  /** In words, for messages: the file, or the database. */
  readonly where: string;
  close(): Promise<void>;
}

function auditFile(ctx: CommandContext): string | undefined {
  const flag = str(ctx.values, 'audit-file');
  if (flag !== undefined && flag.trim() === '') throw new UsageError('--audit-file needs a file name.');
  const env = ctx.io.env['WARREN_AUDIT_FILE'];
  return flag ?? (env !== undefined && env.trim() !== '' ? env : undefined);
}

/**
 * The record of a command that may run without a database (the parked commands):
 * --audit-file, else the database of --db (or WARREN_DB), else none.
 */
export async function actionSink(ctx: CommandContext): Promise<ActionSink | undefined> {
  const file = auditFile(ctx);
  if (file !== undefined) return { log: fileActionLog(file), where: file, close: async () => undefined };
  const given = typeof ctx.values['db'] === 'string' || (ctx.io.env['WARREN_DB'] ?? '').trim() !== '';
  if (!given) return undefined;
  const settings = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
  const store = await openDatabase(settings);
  return {
    log: {
      record: async (e) => {
        try {
          return await store.actions.record(e);
        } catch (error) {
          throw describeDatabaseError(error, settings) ?? error;
        }
      },
      list: (q) => store.actions.list(q),
    },
    where: settings.shown,
    close: () => store.close(),
  };
}

/** The record of a command that already has its store open (outbox, retry table): --audit-file, else that store. */
export function storeSink(ctx: CommandContext, store: Store<unknown>, where: string): ActionSink {
  const file = auditFile(ctx);
  if (file !== undefined) return { log: fileActionLog(file), where: file, close: async () => undefined };
  return { log: store.actions, where, close: async () => undefined };
}

/** What a command did, for its entry. */
export interface ActionDone {
  readonly count: number;
  readonly outcome: ActionOutcome;
  readonly detail?: Readonly<Record<string, unknown>>;
}

/**
 * Runs `act` and records it, done or failed, in `sink`. A record that cannot be written
 * is said on stderr and fails the command (the change itself stands).
 */
export async function recordAction<T>(ctx: CommandContext, sink: ActionSink | undefined, entry: Omit<ActionEntry, 'count' | 'outcome' | 'detail'>, act: () => Promise<T>, done: (result: T) => ActionDone | undefined): Promise<{ result: T; recorded: boolean }> {
  let result: T;
  try {
    result = await act();
  } catch (error) {
    if (sink !== undefined) {
      await sink.log.record({ ...entry, count: 0, outcome: 'failed', detail: { error: error instanceof Error ? error.message.slice(0, 2000) : String(error) } }).catch((e: unknown) => unrecorded(ctx, sink, e));
    }
    throw error;
  }
  const d = done(result);
  if (sink === undefined || d === undefined) return { result, recorded: true };
  try {
    await sink.log.record({ ...entry, count: d.count, outcome: d.outcome, ...(d.detail !== undefined ? { detail: d.detail } : {}) });
    return { result, recorded: true };
  } catch (error) {
    unrecorded(ctx, sink, error);
    return { result, recorded: false };
  }
}

function unrecorded(ctx: CommandContext, sink: ActionSink, error: unknown): void {
  ctx.err(`The action was not recorded in ${sink.where}: ${error instanceof Error ? error.message : String(error)}`);
}
