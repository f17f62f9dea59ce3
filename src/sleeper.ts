/**
 * The wait between passes of a background loop (the outbox relay, the retry scheduler):
 * `sleep(ms)` ends after `ms`, at once when the loop stops, and, for a wakeable sleep,
 * as soon as `wake()` says there may be work. A wake that comes while the loop is busy is
 * kept, so the next wakeable sleep returns at once.
 */
export class Sleeper {
  private woken = false;
  private interrupt: (() => void) | undefined;

  /** `running` tells whether the loop still runs; a stopped loop never sleeps. */
  constructor(private readonly running: () => boolean) {}

  /** There may be work: end a wakeable sleep now, or the next one at once. */
  wake(): void {
    this.woken = true;
    this.interrupt?.();
  }

  /** The loop stopped: end the sleep in progress. */
  stopped(): void {
    this.interrupt?.();
  }

  /** Forgets a wake that came before the pass about to start (that pass sees the work). */
  clearWake(): void {
    this.woken = false;
  }

  /** Waits `ms`, or less when the loop stops (and when woken, if `wakeable`). */
  sleep(ms: number, wakeable: boolean): Promise<void> {
    if (!this.running()) return Promise.resolve();
    if (wakeable && this.woken) {
      this.woken = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.interrupt = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.interrupt = () => {
        if (!this.running() || (wakeable && this.woken)) {
          this.woken = false;
          done();
        }
      };
    });
  }
}

/** Waits `ms`, or less when `signal` aborts (at once if it already has). */
export function sleepUnless(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (ms <= 0 || signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
