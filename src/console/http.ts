/** What the console's routes share. */
import type { ConsoleUser } from './auth.js';
import type { ConsoleData } from './data.js';
import type { Jobs } from './jobs.js';
import type { ResolvedOptions } from './options.js';
import type { PageContext } from './pages/layout.js';
import type { ActionEntry, ActionOutcome } from '../audit/index.js';

/** What an action is asked to do, as both its records say (the actor is the signed-in user). */
export type StartedEntry = Omit<ActionEntry, 'at' | 'actor' | 'count' | 'outcome'>;

/** How an action ended, for the record written after it. */
export interface ActionEnd {
  /** How many messages or rows it changed (or, for an export, read out). */
  readonly count: number;
  readonly outcome: Exclude<ActionOutcome, 'started'>;
  readonly detail?: Readonly<Record<string, unknown>>;
}

/** Writes the end of a started action (once; later calls do nothing). */
export type EndAction = (end: ActionEnd) => Promise<void>;

/** What route handlers share. */
export interface ConsoleEnv {
  Variables: { user: ConsoleUser; page: PageContext };
}

/** What the routes of each page need. */
export interface RouteDeps {
  readonly options: ResolvedOptions;
  readonly data: ConsoleData;
  readonly jobs: Jobs;
  /** Records that an action starts, before it does anything (a 503 when that cannot be written); returns how to record its end. */
  begin(user: ConsoleUser, entry: StartedEntry): Promise<EndAction>;
  /** Records the start, does `work`, records the end: every change goes through here or {@link begin}. */
  perform<T>(user: ConsoleUser, entry: StartedEntry, work: () => Promise<T>, done: (result: T) => ActionEnd): Promise<T>;
}

/** A client error with the status to answer and a message to show as text. */
export class ConsoleHttpError extends Error {
  constructor(
    readonly status: 400 | 403 | 404 | 409 | 503,
    message: string,
  ) {
    super(message);
  }
}

