// Plain-text output: tables, times, counts and a progress bar. Pure where possible.

/** Column alignment. */
export type Align = 'left' | 'right';

/** Renders rows under a header as aligned columns separated by two spaces; trailing spaces trimmed. */
export function table(header: readonly string[], rows: readonly (readonly string[])[], align: readonly Align[] = []): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (align[i] === 'right' ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** Cuts `text` to `max` characters with an ellipsis, on one line. */
export function clip(text: string, max: number): string {
  const one = text.replace(/\s*\n\s*/g, ' ');
  return one.length <= max ? one : `${one.slice(0, Math.max(0, max - 1))}…`;
}

/** A date as ISO 8601 to the second, e.g. `2026-03-01T10:11:00Z`; `-` when absent. */
export function when(d: Date | string | null | undefined): string {
  if (d === undefined || d === null) return '-';
  const date = typeof d === 'string' ? new Date(d) : d;
  return Number.isNaN(date.getTime()) ? '-' : date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** A count with thousands separators. */
export function count(n: number): string {
  return n.toLocaleString('en-US');
}

/** `1 message`, `2 messages`. */
export function plural(n: number, word: string, many = `${word}s`): string {
  return `${count(n)} ${n === 1 ? word : many}`;
}

/** A duration for people: `850ms`, `12s`, `3m 05s`, `1h 02m`. */
export function span(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, '0')}m`;
}

/** A time relative to `now` for people: `in 5m 00s`, `12s ago`, `now` (within a second). */
export function relative(d: Date, now: number = Date.now()): string {
  const ms = d.getTime() - now;
  if (Math.abs(ms) < 1000) return 'now';
  return ms > 0 ? `in ${span(ms)}` : `${span(-ms)} ago`;
}

/** `--tenant 42`: a value as a shell word, quoted when it needs to be. */
export function shellWord(value: string): string {
  return /^[\w.,:/@%+=-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** What a progress display needs to know. */
export interface ProgressState {
  readonly done: number;
  readonly target: number;
  /** Items per second so far. */
  readonly rate: number;
  /** Extra words after the figures, e.g. `12 replayed`. */
  readonly note?: string;
}

/** Time left at the current rate, in ms; undefined before the rate is known. */
export function timeLeft(p: ProgressState): number | undefined {
  if (p.rate <= 0 || p.done === 0) return undefined;
  return (Math.max(0, p.target - p.done) / p.rate) * 1000;
}

/** One line of a terminal progress bar: `[█████░░░░░] 420/1,000 42% · 2,103/s · 3s left`. */
export function progressBar(p: ProgressState, width = 24): string {
  const fraction = p.target > 0 ? Math.min(1, p.done / p.target) : 1;
  const filled = Math.round(fraction * width);
  const left = timeLeft(p);
  return [
    `[${'█'.repeat(filled)}${'░'.repeat(width - filled)}] ${count(p.done)}/${count(p.target)} ${Math.floor(fraction * 100)}%`,
    `${count(Math.round(p.rate))}/s`,
    left === undefined ? 'time left unknown' : `${span(left)} left`,
    ...(p.note ? [p.note] : []),
  ].join(' · ');
}

/** A plain progress line for logs: `420/1,000 (42%), 2,103/s, about 3s left`. */
export function progressLine(p: ProgressState, label: string): string {
  const left = timeLeft(p);
  const pct = p.target > 0 ? Math.floor((Math.min(p.done, p.target) / p.target) * 100) : 100;
  return `${label} ${count(p.done)}/${count(p.target)} (${pct}%), ${count(Math.round(p.rate))}/s${left === undefined ? '' : `, about ${span(left)} left`}${p.note ? `, ${p.note}` : ''}`;
}

/** Writes progress to a stream: a redrawn bar on a terminal (at most every 100 ms), plain lines every `everyMs` otherwise. */
export class Progress {
  private lastDraw = 0;
  private drawn = false;

  constructor(
    private readonly stream: NodeJS.WriteStream,
    private readonly label: string,
    private readonly everyMs = 2000,
  ) {}

  private get tty(): boolean {
    return this.stream.isTTY === true;
  }

  update(p: ProgressState, force = false): void {
    const now = Date.now();
    if (this.tty) {
      if (!force && now - this.lastDraw < 100) return;
      this.lastDraw = now;
      // A pseudo-terminal may report 0 columns.
      const columns = this.stream.columns || 100;
      this.stream.write(`\r\x1b[K${clip(`${this.label} ${progressBar(p)}`, columns - 1)}`);
      this.drawn = true;
      return;
    }
    if (!force && now - this.lastDraw < this.everyMs) return;
    if (this.lastDraw === 0 && !force) {
      // The first line waits one period, so short runs print only the summary.
      this.lastDraw = now;
      return;
    }
    this.lastDraw = now;
    this.stream.write(`${progressLine(p, this.label)}\n`);
  }

  /** Clears the bar on a terminal, so the summary starts on a clean line. */
  done(): void {
    if (this.tty && this.drawn) this.stream.write('\r\x1b[K');
  }
}
