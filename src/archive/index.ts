// The failure archive: every parked message moved into the store, read and acted on by row.
export type * from './types.js';
