/**
 * Retention of the archive: rows older than `maxAgeMs`, or past the newest `maxRows` of
 * a consumer, are deleted in batches (each its own short transaction), on a schedule like
 * the idempotency markers'. A row nobody looked at is warned about (a log line) at one run
 * before a later run deletes it: the first run of a schedule only warns.
 */
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ArchivePruneRule, ArchiveStore } from '../store/archive.js';
import type { ArchiveRetention, ArchiveRetentionReport } from './types.js';

/** {@link ArchiveRetention} checked, with its defaults. */
export interface ResolvedRetention {
  readonly maxAgeMs: number | undefined;
  readonly maxRows: number | undefined;
  readonly intervalMs: number;
  readonly batchSize: number;
}

function whole(value: number | undefined, option: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) throw new InvalidOptionError(`retention.${option}`, `${JSON.stringify(value)} is not a whole number from ${min} to ${max}`);
  return value;
}

/** Checks a retention once. */
export function checkRetention(r: ArchiveRetention): ResolvedRetention {
  if (typeof r !== 'object' || r === null) throw new InvalidOptionError('retention', 'expected { maxAgeMs?, maxRows?, intervalMs?, batchSize? }');
  const out = {
    maxAgeMs: whole(r.maxAgeMs, 'maxAgeMs', 60_000, Number.MAX_SAFE_INTEGER),
    maxRows: whole(r.maxRows, 'maxRows', 1, 1_000_000_000),
    intervalMs: whole(r.intervalMs, 'intervalMs', 0, 2 ** 31 - 1) ?? 3_600_000,
    batchSize: whole(r.batchSize, 'batchSize', 1, 10_000) ?? 1000,
  };
  if (out.maxAgeMs === undefined && out.maxRows === undefined) throw new InvalidOptionError('retention', 'sets neither maxAgeMs nor maxRows', 'Keep N days (maxAgeMs) and/or at most M rows per consumer (maxRows).');
  return Object.freeze(out);
}

/** Options of {@link pruneArchive}. */
export interface PruneArchiveOptions {
  /** @default every consumer with rows */
  consumers?: readonly string[];
  /** Count and warn, delete nothing. @default false */
  warnOnly?: boolean;
  /** @default now */
  now?: Date;
  signal?: AbortSignal;
}

function ruleAt(consumer: string, r: ResolvedRetention, at: number): ArchivePruneRule {
  return { consumer, ...(r.maxAgeMs !== undefined ? { before: new Date(at - r.maxAgeMs) } : {}), ...(r.maxRows !== undefined ? { keep: r.maxRows } : {}) };
}

/**
 * Deletes what the retention says has had its time, per consumer, in batches, and
 * counts what the next run (one interval later) will delete, and how much of that nobody
 * looked at.
 */
export async function pruneArchive(archive: ArchiveStore, retention: ArchiveRetention, options: PruneArchiveOptions = {}): Promise<ArchiveRetentionReport[]> {
  const r = checkRetention(retention);
  const now = (options.now ?? new Date()).getTime();
  const consumers = options.consumers ?? (await archive.counts()).map((c) => c.consumer);
  const reports: ArchiveRetentionReport[] = [];
  for (const consumer of consumers) {
    let deleted = 0;
    let unviewedDeleted = 0;
    if (options.warnOnly !== true) {
      for (;;) {
        if (options.signal?.aborted) break;
        const batch = await archive.prune(ruleAt(consumer, r, now), r.batchSize);
        deleted += batch.deleted;
        unviewedDeleted += batch.unviewed;
        if (batch.deleted < r.batchSize) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    const next = await archive.prunable(ruleAt(consumer, r, now + Math.max(r.intervalMs, 0)));
    reports.push({ consumer, deleted, unviewedDeleted, upcoming: next.deleted, upcomingUnviewed: next.unviewed });
  }
  return reports;
}

/** The warning of a report, in words; undefined when nobody's rows are due. */
export function retentionWarning(report: ArchiveRetentionReport, r: ArchiveRetention): string | undefined {
  if (report.upcomingUnviewed === 0) return undefined;
  const why = [r.maxAgeMs !== undefined ? `older than ${Math.round(r.maxAgeMs / 86_400_000)} days` : '', r.maxRows !== undefined ? `beyond the newest ${r.maxRows}` : ''].filter(Boolean).join(' or ');
  return `retention will delete ${report.upcomingUnviewed} archived failures of ${report.consumer} that nobody has looked at (${why}) at its next run; export them first if they matter: warren parked export ${report.consumer} --db URL --state all${r.maxAgeMs !== undefined ? ` --until ${Math.ceil(r.maxAgeMs / 86_400_000) - 1}d` : ''}`;
}

/** Runs retention every `intervalMs` (the first run after a jittered fraction of it, and only warning). */
export class ArchiveRetentionSchedule {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;
  private runs = 0;
  private readonly retention: ResolvedRetention;
  /** The reports of the last run. */
  last: readonly ArchiveRetentionReport[] = [];

  constructor(
    private readonly archive: ArchiveStore,
    private readonly given: ArchiveRetention,
    private readonly logger: Logger,
  ) {
    this.retention = checkRetention(given);
  }

  /** Schedules the runs: the first soon (a random share of the interval), then every interval; nothing when the interval is 0, running already or stopped. */
  start(): void {
    if (this.retention.intervalMs <= 0 || this.timer || this.stopped) return;
    this.schedule(Math.round(this.retention.intervalMs * (0.1 + 0.2 * Math.random())));
  }

  /** One run now: deletes what is due (unless `warnOnly`), logs the warnings. */
  async run(warnOnly = false): Promise<readonly ArchiveRetentionReport[]> {
    const reports = await pruneArchive(this.archive, this.given, { warnOnly });
    this.last = reports;
    for (const report of reports) {
      if (report.deleted > 0) this.logger.info('archive retention deleted old rows', { consumer: report.consumer, deleted: report.deleted, unviewed: report.unviewedDeleted });
      const warning = retentionWarning(report, this.given);
      if (warning !== undefined) this.logger.warn(warning, { consumer: report.consumer, rows: report.upcomingUnviewed });
    }
    return reports;
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.running = this.run(this.runs++ === 0)
        .catch((error: unknown) => this.logger.warn('archive retention failed; trying again at the next interval', { error: error instanceof Error ? error.message : String(error) }))
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.schedule(this.retention.intervalMs);
        });
    }, ms);
    this.timer.unref();
  }

  /** Stops the schedule and waits for a run in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
