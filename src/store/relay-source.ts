// A file of its own, importing nothing: tracing names it, and the main entry's types
// must not need the tracing API.
/**
 * Where a relayed message came from: a row an application added (`outbox`), a
 * retry-table row sent back to its queue (`retry-table`), or a retry-table row an
 * operator parked, on its way to the parked queue (`retry-table-park`).
 */
export type RelaySource = 'outbox' | 'retry-table' | 'retry-table-park';
