/**
 * How the console's routes record an action: before it, and after it. See
 * {@link actionRecorder}.
 */
import type { ActionLog, ActionRecord } from '../audit/index.js';
import type { ConsoleUser } from './auth.js';
import { ConsoleHttpError, type EndAction, type RouteDeps, type StartedEntry } from './http.js';

function messageOf(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 2000);
}

/**
 * How the console's routes record: a `started` record before an action does anything,
 * and one with its outcome, count and the started record's id (`detail.started`) after.
 * A started record that cannot be written refuses the action (503) before it changes
 * anything, so no action goes unrecorded; a killed process leaves its started records.
 */
export function actionRecorder(log: ActionLog): Pick<RouteDeps, 'begin' | 'perform'> {
  async function begin(user: ConsoleUser, entry: StartedEntry): Promise<EndAction> {
    let started: ActionRecord;
    try {
      started = await log.record({ ...entry, actor: user.user, count: 0, outcome: 'started' });
    } catch (error) {
      throw new ConsoleHttpError(
        503,
        `Not done: the action record could not be written (${messageOf(error)}), and the console does nothing it cannot record. Nothing was changed. Make the record writable again (the --audit-file's directory and disk, or the database) and try again.`,
      );
    }
    let ended = false;
    return async (end) => {
      if (ended) return;
      ended = true;
      await log.record({ ...entry, actor: user.user, count: end.count, outcome: end.outcome, detail: { ...entry.detail, ...end.detail, started: started.id } });
    };
  }
  return {
    begin,
    async perform(user, entry, work, done) {
      const end = await begin(user, entry);
      let result: Awaited<ReturnType<typeof work>>;
      try {
        result = await work();
      } catch (error) {
        await end({ count: 0, outcome: 'failed', detail: { error: messageOf(error) } }).catch(() => undefined);
        throw error;
      }
      const how = done(result);
      try {
        await end(how);
      } catch (error) {
        throw new Error(`${entry.action} was done (${how.outcome}, ${how.count}), but the record of its end could not be written (${messageOf(error)}); the record of its start stands.`, { cause: error });
      }
      return result;
    },
  };
}

