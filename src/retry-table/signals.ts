import type { DependencySignals, RetrySignals } from './types.js';

/** One dependency's figures as a backend reads them. */
export interface DependencyFigures extends DependencySignals {
  readonly dependency: string;
  readonly waiting: number;
  readonly oldestDueAgeMs: number;
}

/** Per-dependency figures → the table's signals. */
export function summarize(groups: readonly DependencyFigures[]): RetrySignals {
  const byDependency: Record<string, DependencySignals> = {};
  let rows = 0;
  let due = 0;
  let paused = 0;
  let waiting = 0;
  let oldestDueAgeMs = 0;
  for (const g of groups) {
    byDependency[g.dependency] = { rows: g.rows, paused: g.paused, due: g.due };
    rows += g.rows;
    due += g.due;
    paused += g.paused;
    waiting += g.waiting;
    oldestDueAgeMs = Math.max(oldestDueAgeMs, g.oldestDueAgeMs);
  }
  return { rows, due, paused, waiting, oldestDueAgeMs, byDependency };
}
