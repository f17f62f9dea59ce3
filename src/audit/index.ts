/**
 * The action record: an append-only list of what operators did (replays, purges,
 * releases, retry-table changes), who did it, to what, and how it ended. The CLI and the
 * console write to it; a store keeps it in a table of its database (`store.actions`), and
 * {@link fileActionLog} in a JSON-lines file for use without a database.
 */
export { checkEntry, checkQuery, filterRecord, type ActionEntry, type ActionLog, type ActionOutcome, type ActionQuery, type ActionRecord } from './entry.js';
export { fileActionLog, FileActionLog } from './file.js';
