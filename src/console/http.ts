/** What the console's routes share. */
import type { ConsoleUser } from './auth.js';
import type { ConsoleData } from './data.js';
import type { Jobs } from './jobs.js';
import type { ResolvedOptions } from './options.js';
import type { PageContext } from './pages/layout.js';
import type { ActionEntry } from './record.js';

/** What route handlers share. */
export interface ConsoleEnv {
  Variables: { user: ConsoleUser; page: PageContext };
}

/** What the routes of each page need. */
export interface RouteDeps {
  readonly options: ResolvedOptions;
  readonly data: ConsoleData;
  readonly jobs: Jobs;
  /** Records an action; every change goes through here. */
  record(user: ConsoleUser, entry: Omit<ActionEntry, 'at' | 'actor'>): Promise<void>;
}

/** A client error with the status to answer and a message to show as text. */
export class ConsoleHttpError extends Error {
  constructor(
    readonly status: 400 | 403 | 404 | 409,
    message: string,
  ) {
    super(message);
  }
}

