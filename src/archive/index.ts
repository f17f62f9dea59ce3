// The failure archive: every parked message moved into the store, read and acted on by row.
export type * from './types.js';
export { ArchiveIngester, archiveIngester, INGEST_DEFAULTS, type ArchiveIngesterDeps } from './ingest.js';
export { decodeFields, encodeFields } from './encoding.js';
export { archiveFilter, archiveFilterRecord, describeArchiveFilter, storePattern, FILTER_LIMITS, textMatch, type ArchiveFilterInput, type FilterNames } from './filter.js';
export { archivedMessage, archiveRow, ARCHIVE_LIMITS } from './row.js';
export { Archive, type ArchiveHost, type ArchiveOptions } from './archive.js';
export { ArchiveRetentionSchedule, checkRetention, pruneArchive, retentionWarning, type PruneArchiveOptions, type ResolvedRetention } from './retention.js';
