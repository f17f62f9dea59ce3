// Parked-queue operations: reading, grouping, replaying, purging and exporting parked
// messages. The CLI uses these; so can a web console.
export { QueueNotFoundError, WalkInterruptedError } from './errors.js';
export { describeFilter, isEmptyFilter, matchesFilter, parseFilter, parsePattern, parseTime, routingKeyMatches, type FilterInput, type FilterOptionNames, type ParkedFilter } from './filter.js';
export {
  attemptHistory,
  decodeBody,
  deathRecords,
  groupParked,
  plainValue,
  replayHeaders,
  summarize,
  toParkedMessage,
  type DeathRecord,
  type DecodedBody,
  type HistoryEntry,
  type ParkedGroup,
  type ParkedMessage,
  type ParkedSummary,
  type RawMessage,
  type ReplaySource,
} from './message.js';
export { parkedIdentity } from './identity.js';
export { compilePattern, isTextPattern, matchSteps, parsePatternLiteral, postgresRegex, MAX_MATCHED_TEXT, MAX_PATTERN_LENGTH, MAX_PATTERN_PROGRAM, MAX_PATTERN_REPEAT, type PatternOptions, type TextPattern } from './pattern.js';
export { walkParked, type MoveFailure, type MoveTarget, type StopReason, type Verdict, type WalkOptions, type WalkResult } from './reader.js';
export {
  browseParked,
  exportParked,
  exportRecord,
  listParked,
  purgeParked,
  replayParked,
  type BrowseOptions,
  type ExportOptions,
  type ExportRecord,
  type ParkedOperationOptions,
  type ParkedOperationResult,
  type ParkedTarget,
  type PurgeOptions,
  type PurgeResult,
  type ReplayOptions,
  type ReplayProgress,
  type ReplayResult,
} from './operations.js';
export {
  canaryReplay,
  continueCanary,
  ladderMs,
  type CanaryEvidence,
  type CanaryMessage,
  type CanaryOptions,
  type CanaryResult,
  type CanaryTarget,
  type ProcessedLookup,
} from './canary.js';
