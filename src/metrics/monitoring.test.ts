/**
 * The shipped alert rules and dashboard (monitoring/) against a real scrape: every
 * metric they name exists after real traffic on a real broker, their PromQL parses, and
 * the rules fire, under Prometheus's own rule engine (promtool), exactly where a message
 * is parked and where a stopped consumer's queue has depth.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PermanentError } from '../errors.js';
import { WaitForConditionError } from '../retry-table/index.js';
import { harness } from '../store/testing/harness.js';
import { connectWarren, MGMT_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { ALL_METRICS, warrenMetrics } from './index.js';
import { parseScrape, valueOf, type Sample } from './testing/scrape.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const RULES = join(ROOT, 'monitoring/warren-alerts.yml');
const DASHBOARD = join(ROOT, 'monitoring/warren-dashboard.json');

/** promtool, or a failure that says how to get it: these tests never skip silently. */
function promtool(): string {
  const found = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  if (found.error || found.status !== 0) {
    throw new Error('promtool is not installed, so the alert rules cannot be tested. Install it with `bash scripts/prometheus.sh` (as root: apt-get install -y --no-install-recommends prometheus); scripts/test.sh does this.');
  }
  return 'promtool';
}

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'warren-monitoring-'));
  onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Every `warren_…` metric an expression names, histogram series folded into their metric. */
function namesIn(expr: string): string[] {
  return [...expr.matchAll(/\bwarren_[a-z0-9_]+/g)].map((m) => m[0].replace(/_(bucket|sum|count)$/, ''));
}

interface DashboardPanel {
  readonly type: string;
  readonly title: string;
  readonly targets?: ReadonlyArray<{ readonly expr: string }>;
}

function dashboardExprs(): Array<{ title: string; expr: string }> {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: DashboardPanel[]; templating: { list: Array<{ query?: unknown; definition?: string }> } };
  const out: Array<{ title: string; expr: string }> = [];
  for (const p of dashboard.panels) for (const t of p.targets ?? []) out.push({ title: p.title, expr: t.expr });
  for (const v of dashboard.templating.list) if (v.definition) out.push({ title: 'variable', expr: v.definition });
  return out;
}

/** The rule files' and the dashboard's expressions with Grafana's variables replaced, so Prometheus can parse them. */
function asPromql(expr: string): string {
  return expr.replaceAll('$__rate_interval', '5m').replaceAll('$consumer', '.*');
}

function ruleExprs(): string[] {
  // The rules file is YAML; its expressions are the `expr:` entries (single line or a `|` block).
  const lines = readFileSync(RULES, 'utf8').split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)expr:\s*(.*)$/.exec(lines[i] as string);
    if (!m) continue;
    if (m[2] !== '|') {
      out.push(m[2] as string);
      continue;
    }
    const block: string[] = [];
    const indent = (m[1] as string).length;
    while (i + 1 < lines.length && ((lines[i + 1] as string).trim() === '' || /^(\s*)/.exec(lines[i + 1] as string)![1]!.length > indent)) block.push((lines[++i] as string).trim());
    out.push(block.join(' '));
  }
  return out;
}

/** A series selector for a sample, as promtool's input_series takes it. */
function selector(s: Sample): string {
  const labels = Object.entries(s.labels).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return `${s.name}{${labels.join(',')}}`;
}

/** Real traffic on a real broker, a store with a retry table and an outbox; one scrape of everything. */
async function scrapeWithTraffic(): Promise<{ samples: Sample[]; billing: string; stopped: string; parkedQueue: string; stoppedQueue: string }> {
  let billing!: string;
  let stopped!: string;
  const topology = testTopology(({ exchange, name }) => {
    billing = name('billing');
    stopped = name('stopped');
    return { exchange, retry: { delays: ['20ms'], maxAttempts: 2 }, consumers: { [billing]: { bindings: ['order.created'] }, [stopped]: { bindings: ['order.created'] } } };
  });
  const h = await harness('sqlite');
  const store = h.store();
  const warren = await connectWarren(topology);
  const table = store.retryTable;
  const health = table.health({ carrier: () => true }, { intervalMs: 60_000 });
  const scheduler = table.scheduler({ publisher: warren.publisher, exchange: topology.exchange, relay: false });
  const metrics = warrenMetrics({ warren, stores: [store], schedulers: [scheduler], health: [health], broker: { management: { url: MGMT_URL }, cacheMs: 0 }, storeCacheMs: 0, archive: { store } });
  onTeardown(() => metrics.close());
  await warren.consume<{ kind: string }>(
    billing,
    async ({ kind }) => {
      if (kind === 'permanent') throw new PermanentError('no such customer');
      if (kind === 'wait') throw new WaitForConditionError('carrier', { retryAt: null });
    },
    { retryTable: { table } },
  );
  for (const kind of ['ok', 'ok', 'permanent', 'wait']) await warren.publish('order.created', { kind });
  await store.transaction((tx) => store.outbox.add(tx, 'order.created', { kind: 'ok' }));
  const b = topology.consumer(billing);
  const st = topology.consumer(stopped);
  let samples: Sample[] = [];
  await waitFor(
    async () => {
      samples = parseScrape(await metrics.registry.metrics());
      return valueOf(samples, 'warren_queue_messages_ready', { queue: b.parkedQueue }) === 1 && valueOf(samples, 'warren_queue_messages_ready', { queue: st.queue }) === 4 && valueOf(samples, 'warren_consumer_deliveries_total', { consumer: billing, outcome: 'waiting' }) === 1;
    },
    'the broker to show one parked message and four waiting for the stopped consumer',
    20_000,
  );
  return { samples, billing, stopped, parkedQueue: b.parkedQueue, stoppedQueue: st.queue };
}

describe('shipped alert rules and dashboard', () => {
  it('name only metrics that a real scrape has, parse as PromQL, and the rules fire where a message is parked and where a stopped consumer has depth', async () => {
    const tool = promtool();
    const { samples, billing, stopped, stoppedQueue } = await scrapeWithTraffic();
    const scraped = new Set(samples.map((s) => s.name.replace(/_(bucket|sum|count)$/, '')));

    // (a) Every metric the rules and the dashboard name is in the scrape, and in the catalog.
    const named = new Map<string, string>();
    for (const expr of ruleExprs()) for (const n of namesIn(expr)) named.set(n, 'warren-alerts.yml');
    for (const { title, expr } of dashboardExprs()) for (const n of namesIn(expr)) named.set(n, `dashboard panel "${title}"`);
    expect(named.size).toBeGreaterThan(15);
    const missing = [...named].filter(([n]) => !scraped.has(n)).map(([n, where]) => `${n} (${where})`);
    expect(missing, 'named by a monitoring file, absent from a real scrape').toEqual([]);
    const catalog = new Set(ALL_METRICS.map((m) => m.name));
    expect([...named.keys()].filter((n) => !catalog.has(n))).toEqual([]);

    // The four signals are drawn per consumer.
    const titles = dashboardExprs().map((e) => `${e.title}: ${e.expr}`);
    const signals: ReadonlyArray<readonly [string, string]> = [['Work queue depth', 'warren_queue_messages_ready{role="work"'], ['Parked', 'warren_queue_messages_ready{role="parked"'], ['Consumers', 'warren_queue_consumers{role="work"'], ['Redelivery', 'warren_queue_redelivered_total{role="work"']];
    for (const [signal, metric] of signals) {
      expect(titles.some((t) => t.startsWith(signal) && t.includes(metric) && t.includes('by (consumer)')), signal).toBe(true);
    }

    // Both files parse under Prometheus's own parser.
    const dir = tempDir();
    const check = spawnSync(tool, ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(check.status, check.stdout + check.stderr).toBe(0);
    const recording = ['groups:', '  - name: dashboard', '    rules:', ...dashboardExprs().filter((e) => e.title !== 'variable').map((e, i) => `      - record: dashboard:panel_${i}\n        expr: ${JSON.stringify(asPromql(e.expr))}`)].join('\n');
    writeFileSync(join(dir, 'dashboard-rules.yml'), recording + '\n');
    const dashCheck = spawnSync(tool, ['check', 'rules', join(dir, 'dashboard-rules.yml')], { encoding: 'utf8' });
    expect(dashCheck.status, dashCheck.stdout + dashCheck.stderr).toBe(0);

    // (b) The scraped samples, held for 40 minutes, through the shipped rules.
    const series = samples.filter((s) => Number.isFinite(s.value)).map((s) => `      - series: ${JSON.stringify(selector(s))}\n        values: "${s.value}x40"`);
    const test = [
      'rule_files:',
      `  - ${JSON.stringify(RULES)}`,
      'evaluation_interval: 1m',
      'tests:',
      '  - interval: 1m',
      '    input_series:',
      ...series,
      '    alert_rule_test:',
      '      - eval_time: 20m',
      '        alertname: WarrenMessagesParked',
      '        exp_alerts:',
      `          - exp_labels: { severity: warning, consumer: ${JSON.stringify(billing)} }`,
      '            exp_annotations:',
      `              summary: ${JSON.stringify(`1 failure(s) wait for consumer ${billing} (parked queue and archive)`)}`,
      `              description: ${JSON.stringify(`See them grouped by cause with \`warren parked list ${billing} --group\` (add \`--db URL\` with an archive); after the fix, \`warren parked replay ${billing}\`.`)}`,
      '      - eval_time: 20m',
      '        alertname: WarrenWorkQueueNoConsumer',
      '        exp_alerts:',
      `          - exp_labels: { severity: critical, consumer: ${JSON.stringify(stopped)}, queue: ${JSON.stringify(stoppedQueue)} }`,
      '            exp_annotations:',
      `              summary: ${JSON.stringify(`${stoppedQueue} has messages and no consumer`)}`,
      `              description: ${JSON.stringify(`4 message(s) wait in ${stoppedQueue} and no consumer is attached. Check the deploy of ${stopped}.`)}`,
      // Not yet: both wait their `for`.
      '      - eval_time: 1m',
      '        alertname: WarrenWorkQueueNoConsumer',
      '        exp_alerts: []',
      // Nothing else is wrong in this scrape.
      ...['WarrenQueueMissing', 'WarrenBrokerUnreadable', 'WarrenMovesFailing', 'WarrenRedeliveryRateHigh', 'WarrenWorkQueueGrowing', 'WarrenRetryRowOverdue', 'WarrenOutboxFlagged'].flatMap((a) => ['      - eval_time: 20m', `        alertname: ${a}`, '        exp_alerts: []']),
    ].join('\n');
    writeFileSync(join(dir, 'test.yml'), test + '\n');
    const run = spawnSync(tool, ['test', 'rules', join(dir, 'test.yml')], { encoding: 'utf8' });
    expect(run.status, `promtool test rules:\n${run.stdout}${run.stderr}`).toBe(0);
  });

  it('promtool tells a rule that does not fire from one that does (the test above can fail)', () => {
    const tool = promtool();
    const dir = tempDir();
    const test = [
      'rule_files:',
      `  - ${JSON.stringify(RULES)}`,
      'evaluation_interval: 1m',
      'tests:',
      '  - interval: 1m',
      '    input_series:',
      '      - series: \'warren_queue_messages_ready{consumer="a",role="parked",queue="a.parked"}\'',
      '        values: "0x40"',
      '    alert_rule_test:',
      '      - eval_time: 20m',
      '        alertname: WarrenMessagesParked',
      '        exp_alerts:',
      '          - exp_labels: { severity: warning, consumer: a }',
    ].join('\n');
    writeFileSync(join(dir, 'test.yml'), test + '\n');
    const run = spawnSync(tool, ['test', 'rules', join(dir, 'test.yml')], { encoding: 'utf8' });
    expect(run.status).not.toBe(0);
    expect(run.stdout + run.stderr).toMatch(/FAILED[\s\S]*WarrenMessagesParked/);
  });

  it('WarrenMessagesParked counts the archive\'s open failures plus what the parked queue still holds, with either side alone', () => {
    const tool = promtool();
    const dir = tempDir();
    const test = [
      'rule_files:',
      `  - ${JSON.stringify(RULES)}`,
      'evaluation_interval: 1m',
      'tests:',
      '  - interval: 1m',
      '    input_series:',
      // drained: the queue reads 0, three failures open in the archive
      '      - series: \'warren_queue_messages_ready{consumer="drained",role="parked",queue="drained.parked"}\'',
      '        values: "0x40"',
      '      - series: \'warren_archive_open_failures{consumer="drained"}\'',
      '        values: "3x40"',
      // both: two not ingested yet, five in the archive (scraped by two processes: counted once)
      '      - series: \'warren_queue_messages_ready{consumer="both",role="parked",queue="both.parked"}\'',
      '        values: "2x40"',
      '      - series: \'warren_archive_open_failures{consumer="both",instance="app"}\'',
      '        values: "5x40"',
      '      - series: \'warren_archive_open_failures{consumer="both",instance="exporter"}\'',
      '        values: "5x40"',
      // queue only: no archive
      '      - series: \'warren_queue_messages_ready{consumer="plain",role="parked",queue="plain.parked"}\'',
      '        values: "4x40"',
      // archive only (no broker figures), and a consumer whose failures were all replayed
      '      - series: \'warren_archive_open_failures{consumer="store-only"}\'',
      '        values: "1x40"',
      '      - series: \'warren_archive_open_failures{consumer="clean"}\'',
      '        values: "0x40"',
      '      - series: \'warren_queue_messages_ready{consumer="clean",role="parked",queue="clean.parked"}\'',
      '        values: "0x40"',
      '    alert_rule_test:',
      '      - eval_time: 20m',
      '        alertname: WarrenMessagesParked',
      '        exp_alerts:',
      ...(
        [
          ['both', 7],
          ['drained', 3],
          ['plain', 4],
          ['store-only', 1],
        ] as const
      ).flatMap(([c, n]) => [
        `          - exp_labels: { severity: warning, consumer: ${c} }`,
        '            exp_annotations:',
        `              summary: ${JSON.stringify(`${n} failure(s) wait for consumer ${c} (parked queue and archive)`)}`,
        `              description: ${JSON.stringify(`See them grouped by cause with \`warren parked list ${c} --group\` (add \`--db URL\` with an archive); after the fix, \`warren parked replay ${c}\`.`)}`,
      ]),
    ].join('\n');
    writeFileSync(join(dir, 'test.yml'), test + '\n');
    const run = spawnSync(tool, ['test', 'rules', join(dir, 'test.yml')], { encoding: 'utf8' });
    expect(run.status, `promtool test rules:\n${run.stdout}${run.stderr}`).toBe(0);
  });

  it('a park copy that times out fires WarrenMovesFailing; confirmed copies and application publishes do not', () => {
    const tool = promtool();
    const dir = tempDir();
    const test = [
      'rule_files:',
      `  - ${JSON.stringify(RULES)}`,
      'evaluation_interval: 1m',
      'tests:',
      '  - interval: 1m',
      '    input_series:',
      '      - series: \'warren_publishes_total{kind="park",outcome="timed_out"}\'',
      '        values: "0+2x40"',
      '      - series: \'warren_publishes_total{kind="retry",outcome="confirmed"}\'',
      '        values: "0+50x40"',
      '      - series: \'warren_publishes_total{kind="publish",outcome="nacked"}\'',
      '        values: "0+5x40"',
      '    alert_rule_test:',
      '      - eval_time: 20m',
      '        alertname: WarrenMovesFailing',
      '        exp_alerts:',
      '          - exp_labels: { severity: warning, kind: park, outcome: timed_out }',
      '            exp_annotations:',
      '              summary: "park copies end timed_out (33.33m/s)"',
      '              description: "Consumers cannot move failed messages. Is the broker under a memory or disk alarm (`rabbitmq-diagnostics alarms`), or is a retry or parked queue missing?"',
    ].join('\n');
    writeFileSync(join(dir, 'test.yml'), test + '\n');
    const run = spawnSync(tool, ['test', 'rules', join(dir, 'test.yml')], { encoding: 'utf8' });
    expect(run.status, `promtool test rules:\n${run.stdout}${run.stderr}`).toBe(0);
  });
});
