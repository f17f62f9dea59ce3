import type { Logger } from '../logger.js';
import type { PruneOptions, PruneResult } from './types.js';
import { checkInt, type ResolvedStoreOptions } from './options.js';

/** Which of warren's tables a prune batch deletes from. */
export type PruneTable = 'markers' | 'outbox' | 'audit';

/** What a backend gives the pruner: delete at most `limit` old rows in one short transaction. */
export interface PruneDriver {
  /** Deletes up to `limit` markers (or sent outbox rows, or retry-table history entries) older than `before`; returns how many. */
  pruneBatch(table: PruneTable, before: Date, limit: number): Promise<number>;
}

/**
 * Deletes old markers, sent outbox rows and retry-table history, one small batch at a
 * time, each in its own short transaction, yielding between batches so other work interleaves.
 */
export async function pruneAll(driver: PruneDriver, defaults: ResolvedStoreOptions, options: PruneOptions = {}): Promise<PruneResult> {
  const olderThanMs = checkInt(options.olderThanMs, defaults.retentionMs, 'olderThanMs', 0, Number.MAX_SAFE_INTEGER);
  const batchSize = checkInt(options.batchSize, defaults.pruneBatchSize, 'batchSize', 1, 100_000);
  const auditOlderThanMs = checkInt(options.auditOlderThanMs, defaults.auditRetentionMs, 'auditOlderThanMs', 0, Number.MAX_SAFE_INTEGER);
  const now = Date.now();
  const before: Record<PruneTable, Date> = { markers: new Date(now - olderThanMs), outbox: new Date(now - olderThanMs), audit: new Date(now - auditOlderThanMs) };
  const counts: Record<PruneTable, number> = { markers: 0, outbox: 0, audit: 0 };
  let batches = 0;
  for (const table of ['markers', 'outbox', 'audit'] as const) {
    for (;;) {
      const n = await driver.pruneBatch(table, before[table], batchSize);
      batches++;
      counts[table] += n;
      if (n < batchSize) break;
      await new Promise((r) => setImmediate(r));
    }
  }
  return { markers: counts.markers, outbox: counts.outbox, audit: counts.audit, batches };
}

/** Runs `prune` every `intervalMs` (the first run after a jittered fraction of it) until stopped. */
export class PruneSchedule {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private stopped = false;

  constructor(
    private readonly prune: () => Promise<PruneResult>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
    private readonly backend: string,
  ) {}

  start(): void {
    if (this.intervalMs <= 0 || this.timer || this.stopped) return;
    // Spread the first run so processes started together do not prune together.
    this.schedule(Math.round(this.intervalMs * (0.1 + 0.2 * Math.random())));
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => {
      this.running = this.prune()
        .then((r) => {
          if (r.markers + r.outbox + r.audit > 0) this.logger.info('pruned old idempotency markers, sent outbox rows and retry-table history', { backend: this.backend, ...r });
        })
        .catch((error: unknown) => this.logger.warn('pruning failed; trying again at the next interval', { backend: this.backend, error: error instanceof Error ? error.message : String(error) }))
        .finally(() => {
          this.running = undefined;
          if (!this.stopped) this.schedule(this.intervalMs);
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
