/** Reads the Prometheus text format, for tests: one sample per series. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Parses the Prometheus text exposition format (what prom-client writes). */
export function parseScrape(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    const body = m[2] ?? '';
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (let l = re.exec(body); l; l = re.exec(body)) labels[l[1] as string] = (l[2] as string).replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    const raw = m[3] as string;
    out.push({ name: m[1] as string, labels, value: raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw) });
  }
  return out;
}

/** The value of the one series of `name` whose labels include `labels`, or undefined; throws when several match. */
export function valueOf(samples: readonly Sample[], name: string, labels: Readonly<Record<string, string>> = {}): number | undefined {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) throw new Error(`${found.length} series of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}

/** Metric names in a scrape, histogram series folded into their base name. */
export function metricNames(samples: readonly Sample[]): Set<string> {
  return new Set(samples.map((s) => s.name.replace(/_(bucket|sum|count)$/, '')).concat(samples.map((s) => s.name)));
}
