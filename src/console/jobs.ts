/**
 * Background jobs: a replay runs while the page that started it polls its progress.
 * Jobs live in this process's memory (the last 100 are kept); the action record keeps
 * what they did.
 */
import { randomUUID } from 'node:crypto';

/** Where a job is. `watching` and `awaiting-decision` belong to a canary replay. */
export type JobState = 'running' | 'watching' | 'awaiting-decision' | 'done' | 'stopped' | 'failed';

/** How far a job got. */
export interface JobProgress {
  /** Messages in the parked queue when the current pass began. */
  total: number;
  scanned: number;
  matched: number;
  published: number;
  /** Messages replayed and acknowledged, over every pass. */
  replayed: number;
}

/** What a canary replay watches. */
export interface CanaryState {
  /** How many to send first. */
  n: number;
  /** How long the canaries are watched; null until known when the default (the retry ladder plus 10 s) applies. */
  windowMs: number | null;
  /** Canaries actually sent. */
  sent: number;
  /** Canaries that came back to the parked queue within the window. */
  returned: number;
  returnedIds: string[];
  /** When the watch ended. */
  windowEndsAt: string | null;
  /** Messages of the group left after the canaries; null until the watch ends. */
  rest: number | null;
  /** `succeeded`, `failed`, `empty` or `unknown` (see canaryReplay); null while watching. */
  verdict: string | null;
}

/** A job as the page and its JSON show it. */
export interface JobView {
  readonly id: string;
  readonly kind: 'replay' | 'canary';
  readonly consumer: string;
  readonly user: string;
  readonly selection: string;
  readonly ratePerSecond: number | null;
  readonly startedAt: string;
  readonly endedAt: string | null;
  readonly state: JobState;
  readonly message: string;
  readonly progress: JobProgress;
  readonly canary: CanaryState | null;
}

/** A running job's handle, given to the work it does. */
export interface Job {
  readonly id: string;
  readonly signal: AbortSignal;
  view: Omit<JobView, 'id'> & { state: JobState; message: string; endedAt: string | null; progress: JobProgress; canary: CanaryState | null };
  /** Waits for an operator to continue (true) or stop (false). */
  decision(): Promise<boolean>;
}

interface Entry extends Job {
  readonly controller: AbortController;
  decide: ((go: boolean) => void) | undefined;
}

const FINAL: ReadonlySet<JobState> = new Set(['done', 'stopped', 'failed']);

export class Jobs {
  private readonly jobs = new Map<string, Entry>();
  private readonly running = new Set<Promise<void>>();

  /**
   * Starts `work` in the background and returns the job's id at once (`init.id`, when the
   * record of its start already names it). `onEnd` records how it ended; should that fail,
   * the job's message says so.
   */
  start(init: Pick<JobView, 'kind' | 'consumer' | 'user' | 'selection' | 'ratePerSecond'> & { id?: string; canary?: CanaryState }, work: (job: Job) => Promise<void>, onEnd: (job: JobView) => Promise<void>): string {
    const id = init.id ?? randomUUID();
    const controller = new AbortController();
    const entry: Entry = {
      id,
      controller,
      signal: controller.signal,
      decide: undefined,
      view: {
        kind: init.kind,
        consumer: init.consumer,
        user: init.user,
        selection: init.selection,
        ratePerSecond: init.ratePerSecond,
        startedAt: new Date().toISOString(),
        endedAt: null,
        state: 'running',
        message: '',
        progress: { total: 0, scanned: 0, matched: 0, published: 0, replayed: 0 },
        canary: init.canary ?? null,
      },
      decision() {
        if (controller.signal.aborted) return Promise.resolve(false);
        return new Promise<boolean>((resolve) => {
          entry.decide = (go) => {
            entry.decide = undefined;
            resolve(go);
          };
          controller.signal.addEventListener('abort', () => entry.decide?.(false), { once: true });
        });
      },
    };
    this.jobs.set(id, entry);
    this.trim();
    const run = (async () => {
      try {
        await work(entry);
        if (!FINAL.has(entry.view.state)) entry.view.state = controller.signal.aborted ? 'stopped' : 'done';
      } catch (error) {
        entry.view.state = 'failed';
        entry.view.message = error instanceof Error ? error.message : String(error);
      }
      entry.view.endedAt = new Date().toISOString();
      await onEnd(this.get(id) as JobView).catch((error: unknown) => {
        entry.view.message = `${entry.view.message} The record of this job's end could not be written (${error instanceof Error ? error.message : String(error)}); the record of its start stands.`.trim();
      });
    })();
    this.running.add(run);
    void run.finally(() => this.running.delete(run));
    return id;
  }

  get(id: string): JobView | undefined {
    const e = this.jobs.get(id);
    return e ? { id, ...e.view, progress: { ...e.view.progress }, canary: e.view.canary ? { ...e.view.canary, returnedIds: [...e.view.canary.returnedIds] } : null } : undefined;
  }

  /** A job on `consumer` that has not ended (running, watching canaries or awaiting a decision), if any. */
  active(consumer: string): JobView | undefined {
    for (const [id, e] of this.jobs) if (e.view.consumer === consumer && !FINAL.has(e.view.state)) return this.get(id);
    return undefined;
  }

  /** Jobs, newest first. */
  list(): JobView[] {
    return [...this.jobs.keys()].reverse().map((id) => this.get(id) as JobView);
  }

  /** Stops a job before its next message; false when there is no such job running. */
  stop(id: string): boolean {
    const e = this.jobs.get(id);
    if (!e || FINAL.has(e.view.state)) return false;
    e.controller.abort();
    return true;
  }

  /** Lets a canary replay waiting for a decision go on with the rest; false when it is not waiting. */
  proceed(id: string): boolean {
    const e = this.jobs.get(id);
    if (!e?.decide) return false;
    e.decide(true);
    return true;
  }

  /** Stops every job and waits for them to settle. */
  async close(): Promise<void> {
    for (const e of this.jobs.values()) e.controller.abort();
    await Promise.allSettled([...this.running]);
  }

  private trim(): void {
    if (this.jobs.size <= 100) return;
    for (const [id, e] of this.jobs) {
      if (this.jobs.size <= 100) break;
      if (FINAL.has(e.view.state)) this.jobs.delete(id);
    }
  }
}
