/**
 * Console benchmark, through the console's own request handler (no browser, no socket):
 *
 * - the overview of a 50-consumer topology: the server's time to read the broker (through
 *   the management API) and render the page, median of several requests with no cache;
 * - a parked group replayed through the console's replay action at a chosen rate: the
 *   rate achieved (from the replayed copies' `warren-replayed-at`) beside the one chosen;
 * - the same action unthrottled: messages per second from the POST to the job's end;
 * - the JS and CSS the overview page loads, in bytes.
 *
 * Run alone with `npx tsx bench/console.ts`. Needs RabbitMQ with its management plugin
 * (WARREN_BENCH_AMQP_URL / WARREN_AMQP_URL, and WARREN_MANAGEMENT_URL, defaults on
 * 127.0.0.1); it works in queues of its own and removes them afterwards.
 */
import { randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { warrenConsole, type WarrenConsole } from '../src/console/index.js';
import { declareTopology, defineTopology, groupParked, HEADER, listParked, ManagementClient, type ConsumerTopology, type Topology } from '../src/index.js';
import { AMQP_URL, deleteTopology, printRows, type BenchRow } from './report.js';

const MANAGEMENT_URL = process.env['WARREN_BENCH_MANAGEMENT_URL'] ?? process.env['WARREN_MANAGEMENT_URL'] ?? 'http://guest:guest@127.0.0.1:15672';
const CONSUMERS = 50;
/** Paced run: 4 s at 250/s. */
const PACED = Number(process.env['WARREN_BENCH_CONSOLE_PACED'] ?? 1000);
const RATE = Number(process.env['WARREN_BENCH_CONSOLE_RATE'] ?? 250);
const UNTHROTTLED = Number(process.env['WARREN_BENCH_CONSOLE_MESSAGES'] ?? 10_000);
const BASE = 'http://console.bench';

function prefix(): string {
  return `wb.console.${Date.now().toString(36)}${randomBytes(3).toString('hex')}`;
}

function consoleOn(topology: Topology): WarrenConsole {
  return warrenConsole({
    topology,
    url: AMQP_URL,
    management: new ManagementClient({ url: MANAGEMENT_URL, timeoutMs: 10_000 }),
    authorize: () => ({ user: 'bench', role: 'operator' }),
    cacheMs: 0,
    sampleIntervalMs: 60_000,
  });
}

async function get(ops: WarrenConsole, path: string): Promise<{ status: number; body: Buffer }> {
  const res = await ops.fetch(new Request(`${BASE}${ops.basePath}${path}`));
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

async function park(model: amqp.ChannelModel, topology: Topology, c: ConsumerTopology, n: number): Promise<void> {
  const ch = await model.createConfirmChannel();
  try {
    const at = new Date().toISOString();
    for (let i = 0; i < n; i++) {
      const ok = ch.sendToQueue(c.parkedQueue, Buffer.from(JSON.stringify({ orderId: i })), {
        messageId: `bench-${i}`,
        contentType: 'application/json',
        persistent: true,
        headers: {
          [HEADER.attempts]: 3,
          [HEADER.exchange]: topology.exchange,
          [HEADER.routingKey]: 'order.created',
          [HEADER.consumer]: c.name,
          [HEADER.firstFailedAt]: at,
          [HEADER.lastFailedAt]: at,
          [HEADER.errorClass]: 'HttpError',
          [HEADER.errorMessage]: `carrier 503 for order ${i}`,
          [HEADER.errorStack]: 'at send (/app/carrier.js:10:5)',
          [HEADER.parkedReason]: 'max-attempts',
          [HEADER.parkedAt]: at,
        },
      });
      if (!ok) await new Promise((r) => ch.once('drain', r));
      if (i % 2000 === 1999) await ch.waitForConfirms();
    }
    await ch.waitForConfirms();
  } finally {
    await ch.close();
  }
}

/** Server time of the overview with 50 consumers (each: work queue, two tiers, parked queue), median of `runs`. */
async function overviewMs(model: amqp.ChannelModel, runs = 9): Promise<{ medianMs: number; bytes: number; assets: number }> {
  const p = prefix();
  const consumers = Object.fromEntries(Array.from({ length: CONSUMERS }, (_, i) => [`c${i}`, { queue: `${p}.c${i}`, bindings: [`order.${i}`] }]));
  const topology = defineTopology({ exchange: `${p}.events`, retry: { delays: ['5s', '1m'], maxAttempts: 3 }, consumers });
  await declareTopology(model, topology);
  const ops = consoleOn(topology);
  try {
    await park(model, topology, topology.consumer('c0'), 5);
    const first = await get(ops, '/');
    if (first.status !== 200) throw new Error(`the overview answered ${first.status}: ${first.body.toString().slice(0, 200)}`);
    const times: number[] = [];
    let html = '';
    for (let i = 0; i < runs; i++) {
      const t = performance.now();
      const r = await get(ops, '/');
      times.push(performance.now() - t);
      html = r.body.toString('utf8');
    }
    times.sort((a, b) => a - b);
    // What the page loads: its scripts and style sheets, as served.
    const refs = [...html.matchAll(/<script[^>]*\ssrc="([^"]+)"|<link[^>]*rel="stylesheet"[^>]*href="([^"]+)"|<link[^>]*href="([^"]+)"[^>]*rel="stylesheet"/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? '');
    let bytes = 0;
    for (const ref of new Set(refs.filter(Boolean))) {
      const path = ref.replace(/&amp;/g, '&').replace(ops.basePath, '');
      const r = await get(ops, path.startsWith('/') ? path : `/${path}`);
      if (r.status !== 200) throw new Error(`${ref} answered ${r.status}`);
      bytes += r.body.length;
    }
    // Inline <style> and <script> count too.
    for (const m of html.matchAll(/<(style|script)(?![^>]*\ssrc=)[^>]*>([\s\S]*?)<\/\1>/g)) bytes += Buffer.byteLength(m[2] ?? '');
    return { medianMs: times[Math.floor(times.length / 2)] ?? 0, bytes, assets: refs.length };
  } finally {
    await ops.close();
    await deleteTopology(topology);
  }
}

/** Replays a parked group through the console's replay action; returns messages/s achieved. */
async function consoleReplay(model: amqp.ChannelModel, n: number, rate: number | undefined): Promise<{ achieved: number; wallRate: number; replayed: number }> {
  const p = prefix();
  const topology = defineTopology({ exchange: `${p}.events`, retry: { delays: ['5s'], maxAttempts: 3 }, consumers: { billing: { queue: `${p}.billing`, bindings: ['order.created'] } } });
  await declareTopology(model, topology);
  const billing = topology.consumer('billing');
  const ops = consoleOn(topology);
  try {
    await park(model, topology, billing, n);
    const [group] = groupParked((await listParked(model, billing, { limit: 10 })).messages);
    if (!group) throw new Error('nothing parked');
    const page = (await get(ops, '/parked/billing')).body.toString('utf8');
    const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(page)?.[1];
    if (!csrf) throw new Error('no CSRF token on the parked page');
    const form = new URLSearchParams({ _csrf: csrf, scope: 'group', fingerprint: group.fingerprint, ...(rate !== undefined ? { rate: String(rate) } : {}) });
    const started = performance.now();
    const res = await ops.fetch(new Request(`${BASE}${ops.basePath}/parked/billing/replay`, { method: 'POST', body: form, headers: { host: 'console.bench' } }));
    const location = res.headers.get('location');
    if (res.status !== 303 || !location) throw new Error(`the replay action answered ${res.status}: ${await res.text()}`);
    const id = location.split('/').pop() as string;
    let state = 'running';
    let replayed = 0;
    while (state === 'running' || state === 'watching') {
      const job = JSON.parse((await get(ops, `/api/jobs/${id}`)).body.toString('utf8')) as { state: string; progress: { replayed: number }; message: string };
      state = job.state;
      replayed = job.progress.replayed;
      if (state === 'failed') throw new Error(`the replay job failed: ${job.message}`);
      if (state === 'running') await new Promise((r) => setTimeout(r, 20));
    }
    const seconds = (performance.now() - started) / 1000;
    // The pace of the publishes, from the copies' replay times: n copies span n - 1 intervals.
    const ch = await model.createChannel();
    const times: number[] = [];
    try {
      for (;;) {
        const m = await ch.get(billing.queue, { noAck: true });
        if (m === false) break;
        const at = Date.parse(String(m.properties.headers?.[HEADER.replayedAt] ?? ''));
        if (Number.isFinite(at)) times.push(at);
      }
    } finally {
      await ch.close();
    }
    times.sort((a, b) => a - b);
    const span = (times[times.length - 1] ?? 0) - (times[0] ?? 0);
    return { achieved: span > 0 ? ((times.length - 1) * 1000) / span : 0, wallRate: replayed / seconds, replayed };
  } finally {
    await ops.close();
    await deleteTopology(topology);
  }
}

export async function benchConsole(): Promise<BenchRow[]> {
  const model = await amqp.connect(AMQP_URL, { noDelay: true });
  try {
    const rows: BenchRow[] = [];
    const o = await overviewMs(model);
    rows.push({ group: `console overview (${CONSUMERS} consumers)`, metric: 'server ms to render, median', warren: o.medianMs, goal: '< 300 ms' });
    rows.push({ group: 'console overview page', metric: `JS + CSS bytes (${o.assets} files)`, warren: o.bytes, goal: '< 100 KB (102,400)' });
    const paced = await consoleReplay(model, PACED, RATE);
    rows.push({ group: `console group replay at ${RATE}/s (${PACED})`, metric: 'achieved messages/s', warren: paced.achieved, baseline: RATE, baselineName: 'chosen', goal: 'ratio 0.95-1.05' });
    const fast = await consoleReplay(model, UNTHROTTLED, undefined);
    rows.push({ group: `console group replay, no rate (${UNTHROTTLED})`, metric: 'messages/s, POST to job end', warren: fast.wallRate, goal: '>= 2000/s' });
    return rows;
  } finally {
    await model.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  printRows(await benchConsole());
}
