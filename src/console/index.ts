/**
 * warren's operator console: a web page over the topology's queues, the parked
 * messages, the retry table and the outbox, with replay, purge, pause and release.
 * A fetch-style handler the application mounts in its own server, or what
 * `warren console` serves. Loads Hono (and, in the browser, uPlot); importing `warren`
 * itself never does.
 *
 * @example
 * import { warrenConsole, nodeListener } from 'warren/console';
 * const ops = warrenConsole({ warren, store, basePath: '/ops', authorize: (req) => mySession(req) });
 * http.createServer(nodeListener(ops.fetch)).listen(8080, '127.0.0.1');
 */
import { consoleApp } from './app.js';
import { ConsoleData } from './data.js';
import { Jobs } from './jobs.js';
import { resolveOptions, type ConsoleOptions } from './options.js';

export { anyOf, basicAuth, type BasicAuthOptions, hashPassword, parseUsers, readUsersFile, tokenAuth, trustedHeaderAuth, verifyPassword, type Authorize, type ConsoleRole, type ConsoleUser, type TokenAuthOptions, type TrustedHeaderOptions, type UserEntry } from './auth.js';
export { nodeListener, type FetchHandler } from './node.js';
export { checkActionLog, memoryActionLog, type ActionEntry, type ActionLog, type ActionOutcome, type ActionRecord, type CheckActionLogOptions } from './record.js';
export { fileActionLog } from '../audit/index.js';
export type { ConsoleOptions } from './options.js';
export type { Overview, ConsumerView, ConsumerHistory, Problem, QueueView } from './data.js';
export type { JobView, JobState, JobProgress, CanaryState } from './jobs.js';
export { CSP } from './app.js';

/** A console: its handler, and what it runs in the background. */
export interface WarrenConsole {
  /** The fetch-style handler: `(request) => Promise<Response>`. */
  readonly fetch: (request: Request) => Promise<Response>;
  /** The path it is mounted under ('' at the root). */
  readonly basePath: string;
  /** Stops sampling and running jobs, and closes the connection the console opened (not the application's). */
  close(): Promise<void>;
}

/**
 * Builds the console. It starts sampling the queues for its charts at once (every
 * `sampleIntervalMs`, into memory); call `close()` when the server stops.
 */
export function warrenConsole(options: ConsoleOptions): WarrenConsole {
  const resolved = resolveOptions(options);
  const data = new ConsoleData({
    topology: resolved.topology,
    connection: resolved.connection,
    management: resolved.management,
    store: resolved.store,
    archive: resolved.archive,
    ingester: resolved.ingester,
    cacheMs: resolved.cacheMs,
    sampleIntervalMs: resolved.sampleIntervalMs,
    historyMs: resolved.historyMs,
    maxDueAgeMs: resolved.maxDueAgeMs,
  });
  const jobs = new Jobs();
  const app = consoleApp(resolved, data, jobs);
  data.start();
  let closing: Promise<void> | undefined;
  return {
    fetch: async (request) => app.fetch(request),
    basePath: resolved.basePath,
    close() {
      closing ??= (async () => {
        await jobs.close();
        await data.close();
        await resolved.closeConnection();
      })();
      return closing;
    },
  };
}
