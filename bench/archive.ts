/**
 * Failure archive benchmark: an outage's worth of archived messages, per backend, in one run.
 *
 * On each backend (SQLite in a temporary file; PostgreSQL at WARREN_BENCH_PG_URL, default
 * postgres://postgres@127.0.0.1:5432/test, in a schema of its own, dropped after) it
 * seeds `--rows N` archived messages (default 100,000; the outage's size is
 * `--rows 1000000`, about 15 minutes a backend here) of one consumer: 10 failure
 * groups, spread over 7 days, ~600 B JSON bodies, a `tenant` header of 10 values
 * (named in the error text too). Then it times:
 *
 * - ingest: rows/s through the ingester's own path (each parked delivery made an archive
 *   row by `archiveRow`, stored by the store's `archive.insert` a batch of 500 at a time,
 *   two batches in flight, as `ArchiveIngester` does); the resident set size of the
 *   process at the start and end of it, and its peak;
 * - group: exact group counts of the consumer (`Archive.groups`);
 * - filter: the first page (50) of "error text contains 'tenant t4', failed in the last
 *   2 days", newest first;
 * - page: the page (50) after the 900,000th row (by cursor, newest first; 90% of the
 *   rows at other sizes);
 * - show: one message by row id (noted as viewed) with its history across parkings;
 * - replay: a group of 10,000 rows at any `--rows` (of a consumer of its own, in the
 *   same tables) replayed to the consumer's queue on RabbitMQ with confirms
 *   (`Archive.replay`, not paced), rows/s from the call to its return, with its ratio to
 *   the target and the process's CPU per row;
 * - ingest side by side, into the seeded table: 20,000 rows (or the rows, if fewer) by
 *   the direct insert above, then as many messages read by `ArchiveIngester` (its
 *   defaults) from a parked queue on RabbitMQ, from its start to the last row stored;
 *   the ratio of the two is what the broker, the acks and the ingester's batching cost.
 *
 * Reads are the median of 5 (after one untimed warm-up). Each backend prints one line:
 *
 *   archive sqlite: rows 1000000, ingest N/s, group N ms, filter N ms, page N ms, show N ms, replay N/s
 *
 * and the targets beside the figures, then the two ingest rates side by side:
 *
 *   archive sqlite ingest, 20000 rows into 100000: direct insert N/s, ArchiveIngester from the parked queue N/s (…), ratio R; load average L
 *
 * Run with `npm run bench -- archive` (`--rows 2000`
 * for a quick check, `--backend sqlite` or `--backend postgres` for one, `--replay` for
 * the replay of the 10,000-row group alone, on empty tables, in a minute), or alone with
 * `npx tsx bench/archive.ts --rows 2000`. Needs RabbitMQ (WARREN_BENCH_AMQP_URL, default
 * amqp://guest:guest@127.0.0.1:5672); its queues are removed afterwards.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import pg from 'pg';
import { Archive, archiveFilter, archiveIngester, archiveRow } from '../src/archive/index.js';
import { parkedRaw } from '../src/archive/testing/messages.js';
import { declareTopology, defineTopology, type Topology } from '../src/index.js';
import type { ArchiveRowInput, ArchiveStore } from '../src/store/archive.js';
import { postgresStore } from '../src/store/postgres/index.js';
import { sqliteStore } from '../src/store/sqlite/index.js';
import { AMQP_URL, cpuPer, deleteTopology, median, printRows, type BenchRow } from './report.js';

const PG_URL = process.env['WARREN_BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const DAY = 86_400_000;
const GROUPS = 10;
/** The ingester's defaults: rows per batch, batches in flight. */
const BATCH = 500;
const PARALLEL = 2;
const READS = 5;

/** Targets on the 2-core development machine. */
export const ARCHIVE_TARGETS = Object.freeze({ ingest: { sqlite: 5000, postgres: 10_000 }, readMs: 300, replay: 5000 });

/** Rows of the replayed group, whatever `--rows` is. */
const REPLAY_ROWS = 10_000;

interface Options {
  readonly rows: number;
  readonly backends: readonly ('sqlite' | 'postgres')[];
  /** Only the replay of the group, on empty tables. */
  readonly replayOnly: boolean;
}

function parseArgs(argv: readonly string[]): Options {
  let rows = 100_000;
  let backends: ('sqlite' | 'postgres')[] = ['sqlite', 'postgres'];
  let replayOnly = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    const [flag, inline] = a.includes('=') ? (a.split('=', 2) as [string, string]) : [a, undefined];
    if (flag === '--rows') {
      const v = inline ?? argv[++i];
      rows = Number(v);
      if (!Number.isInteger(rows) || rows < 2000 || rows > 20_000_000) throw new Error(`--rows ${JSON.stringify(v)} is not a whole number from 2000 to 20000000`);
    } else if (flag === '--backend') {
      const v = inline ?? argv[++i];
      if (v !== 'sqlite' && v !== 'postgres') throw new Error(`--backend ${JSON.stringify(v)} is not sqlite or postgres`);
      backends = [v];
    } else if (flag === '--replay') replayOnly = true;
  }
  return { rows, backends, replayOnly };
}

/** A backend under test: its store, and how to read the row at a position (untimed setup). */
interface Backend {
  readonly name: 'sqlite' | 'postgres';
  readonly store: { readonly archive: ArchiveStore; processed(consumer: string, ids: readonly string[]): Promise<ReadonlySet<string>> };
  /** The failure time and id of the row at `offset`, newest first. */
  rowAt(consumer: string, offset: number): Promise<{ failedAt: Date; id: string }>;
  /** What the archive takes on disk, for the line. */
  size(): Promise<number>;
  teardown(): Promise<void>;
}

async function sqliteBackend(): Promise<Backend> {
  const dir = mkdtempSync(join(tmpdir(), 'warren-bench-archive-'));
  const file = join(dir, 'archive.db');
  const store = sqliteStore({ filename: file, pruneIntervalMs: 0 });
  await store.migrate();
  return {
    name: 'sqlite',
    store,
    rowAt: (consumer, offset) =>
      store.transaction((db) => {
        const r = db.prepare(`SELECT failed_at, id FROM ${store.tables.archive} WHERE consumer = ? ORDER BY failed_at DESC, id DESC LIMIT 1 OFFSET ?`).get(consumer, offset) as { failed_at: number; id: number };
        return { failedAt: new Date(r.failed_at), id: String(r.id) };
      }),
    size: async () => ['', '-wal'].reduce((n, s) => n + (statSafe(file + s) ?? 0), 0),
    teardown: async () => {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function statSafe(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined;
  }
}

async function postgresBackend(): Promise<Backend> {
  const schema = `warren_bench_${randomBytes(4).toString('hex')}`;
  const store = postgresStore({ connectionString: PG_URL, schema, pruneIntervalMs: 0 });
  await store.migrate();
  return {
    name: 'postgres',
    store,
    rowAt: async (consumer, offset) => {
      const r = await store.transaction((c) => c.query(`SELECT failed_at, id::text AS id FROM ${store.tables.archive} WHERE consumer = $1 ORDER BY failed_at DESC, id DESC LIMIT 1 OFFSET $2`, [consumer, offset]));
      const row = r.rows[0] as { failed_at: Date; id: string };
      return { failedAt: row.failed_at, id: row.id };
    },
    size: async () => {
      const r = await store.transaction((c) => c.query(`SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::text AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, [schema]));
      return Number((r.rows[0] as { n: string }).n);
    },
    teardown: async () => {
      await store.close();
      const c = new pg.Client({ connectionString: PG_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).finally(() => c.end());
    },
  };
}

const ERRORS: readonly { errorClass: string; text: (tenant: string, i: number) => string }[] = [
  { errorClass: 'HttpError', text: (t, i) => `carrier 503 for tenant ${t}: order ${i} not shipped` },
  { errorClass: 'HttpError', text: (t, i) => `payment gateway 502 for tenant ${t} (charge ${i})` },
  { errorClass: 'TimeoutError', text: (t, i) => `inventory lookup timed out after 5000 ms for tenant ${t}, sku ${i % 977}` },
  { errorClass: 'ValidationError', text: (t, i) => `order ${i} of tenant ${t} has no shipping address` },
  { errorClass: 'DatabaseError', text: (t) => `deadlock detected while updating tenant ${t} ledger` },
  { errorClass: 'HttpError', text: (t, i) => `tax service 500 for tenant ${t}, invoice ${i}` },
  { errorClass: 'TypeError', text: (t) => `Cannot read properties of undefined (reading 'currency') for tenant ${t}` },
  { errorClass: 'ConnectionError', text: (t) => `ECONNREFUSED 10.0.4.17:6379 (session cache, tenant ${t})` },
  { errorClass: 'HttpError', text: (t, i) => `email provider 429 for tenant ${t}, message ${i}` },
  // The replay group: 1% of the rows (10,000 of 1,000,000).
  { errorClass: 'HttpError', text: (t, i) => `loyalty service 503 for tenant ${t}, points for order ${i}` },
];

const PAD = 'x'.repeat(400);

/** The seed's spread: row `i` of `n`. */
function seedSpec(i: number, n: number, now: number, consumer?: string) {
  const group = i % 100 === 0 ? GROUPS - 1 : i % (GROUPS - 1);
  const tenant = `t${Math.floor(i / 7) % 10}`;
  // Every thousandth message was parked twice: replayed once, failed again.
  const again = i % 1000 === 999;
  const e = ERRORS[group] as (typeof ERRORS)[number];
  const at = new Date(now - 7 * DAY + Math.floor((i * 7 * DAY) / n));
  const body = JSON.stringify({ orderId: i, tenant, customer: `c-${i % 9973}`, lines: [{ sku: `A-${i % 977}`, qty: 1 + (i % 5), price: 1999 }], address: { street: `${i % 300} Harbour Road`, city: 'Lisbon', zip: '1100-148' }, note: PAD });
  return parkedRaw({ ...(consumer !== undefined ? { consumer } : {}), id: again ? `m-${i - 1}` : `m-${i}`, errorClass: e.errorClass, error: e.text(tenant, i), at, body, headers: { tenant }, routingKey: `order.${group % 3 === 0 ? 'created' : 'paid'}`, attempts: 6, ...(again ? { replays: 1 } : {}) });
}

/** Seeds the replayed group: `REPLAY_ROWS` rows of `consumer`, all of the loyalty service's failure, through the store's insert. */
async function seedReplayGroup(backend: Backend, consumer: string): Promise<void> {
  const now = Date.now();
  for (let i = 0; i < REPLAY_ROWS; i += BATCH) {
    const archivedAt = new Date();
    const rows: ArchiveRowInput[] = [];
    // Every hundredth row of the seed is of the loyalty group.
    for (let j = i; j < Math.min(REPLAY_ROWS, i + BATCH); j++) rows.push(archiveRow(consumer, seedSpec(j * 100, REPLAY_ROWS * 100, now), archivedAt));
    const r = await backend.store.archive.insert(rows);
    if (r.inserted !== rows.length) throw new Error(`${backend.name}: ${r.inserted} of ${rows.length} replay rows were inserted`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** What the replay of the group measured. */
interface ReplayFigures {
  /** Rows/s from the call to its return. */
  readonly rate: number;
  /** This process's CPU (user and system) per row, µs. */
  readonly cpuUs: number;
}

/** Replays the seeded group of `consumer` with confirms, not paced. */
async function replayGroup(backend: Backend, model: amqp.ChannelModel, topology: Topology, consumer: string): Promise<ReplayFigures> {
  const archive = new Archive(backend.store);
  const group = (await archive.groups({ consumer }))[0];
  if (group === undefined || group.count !== REPLAY_ROWS) throw new Error(`${backend.name}: the replay group has ${group?.count ?? 0} rows, not ${REPLAY_ROWS}`);
  const { value: r, cpuUs } = await cpuPer(REPLAY_ROWS, () => archive.replay(model, topology.consumer(consumer), { filter: { consumer, fingerprint: group.fingerprint }, actor: 'bench' }));
  if (r.replayed !== REPLAY_ROWS || r.stopReason !== 'done') throw new Error(`${backend.name}: replayed ${r.replayed} of ${REPLAY_ROWS} (${r.stopReason}: ${r.error ?? ''})`);
  return { rate: r.replayed / (r.elapsedMs / 1000), cpuUs };
}

/** The replay of the group alone, on a fresh store. */
async function runReplayOnly(make: () => Promise<Backend>, log: (line: string) => void): Promise<ReplayFigures> {
  const backend = await make();
  const prefix = `bench.archive.${backend.name}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const consumer = `${prefix}.loyalty`;
  const topology = defineTopology({ exchange: `${prefix}.events`, retry: { delays: ['5s'], maxAttempts: 3 }, consumers: { [consumer]: { bindings: ['loyalty.#'] } } });
  let model: amqp.ChannelModel | undefined;
  try {
    log(`${backend.name}: seeding the ${REPLAY_ROWS.toLocaleString('en-US')}-row replay group…`);
    await seedReplayGroup(backend, consumer);
    model = await amqp.connect(AMQP_URL, { noDelay: true });
    model.on('error', (e: Error) => log(`${backend.name}: broker connection: ${e.message}`));
    await declareTopology(model, topology);
    return await replayGroup(backend, model, topology, consumer);
  } finally {
    if (model !== undefined) {
      await model.close().catch(() => undefined);
      await deleteTopology(topology).catch(() => undefined);
    }
    await backend.teardown();
  }
}

/** The replay's figures in words: the rate, its ratio to the target, the CPU per row. */
function replayText(f: ReplayFigures): string {
  const t = ARCHIVE_TARGETS.replay;
  return `replay of a ${REPLAY_ROWS.toLocaleString('en-US')}-row group ${Math.round(f.rate)}/s, ${(f.rate / t).toFixed(2)} of the ${t}/s target ${f.rate >= t ? 'ok' : 'MISSED'}, ${Math.round(f.cpuUs)} µs CPU a row in this process`;
}

/** Seeds `n` rows through the ingester's path; rows/s and RSS (MB) at start, end, peak. */
async function ingest(backend: Backend, consumer: string, n: number, log: (line: string) => void): Promise<{ rate: number; rss: Rss }> {
  const mb = () => process.memoryUsage().rss / 1048576;
  const start = mb();
  let peak = start;
  const now = Date.now();
  const inFlight = new Set<Promise<void>>();
  const began = performance.now();
  let stored = 0;
  let lastLog = began;
  for (let i = 0; i < n; i += BATCH) {
    const archivedAt = new Date();
    const rows: ArchiveRowInput[] = [];
    for (let j = i; j < Math.min(n, i + BATCH); j++) rows.push(archiveRow(consumer, seedSpec(j, n, now), archivedAt));
    const p: Promise<void> = backend.store.archive.insert(rows).then((r) => {
      if (r.inserted !== rows.length) throw new Error(`${backend.name}: ${r.inserted} of ${rows.length} rows were inserted`);
      stored += r.inserted;
      inFlight.delete(p);
    });
    inFlight.add(p);
    if (inFlight.size >= PARALLEL) await Promise.race(inFlight);
    // SQLite's inserts settle in microtasks: let timers and sockets have their turn.
    await new Promise((r) => setImmediate(r));
    peak = Math.max(peak, mb());
    if (performance.now() - lastLog > 30_000) {
      lastLog = performance.now();
      log(`${backend.name}: ${stored.toLocaleString('en-US')} rows, ${Math.round(stored / ((lastLog - began) / 1000))}/s, RSS ${Math.round(mb())} MB`);
    }
  }
  await Promise.all(inFlight);
  const seconds = (performance.now() - began) / 1000;
  return { rate: n / seconds, rss: { start, end: mb(), peak: Math.max(peak, mb()) } };
}

/** Median ms of `READS` runs of `read` after one warm-up; `check` sees the first result. */
async function timed<T>(read: () => Promise<T>, check: (value: T) => void): Promise<number> {
  check(await read());
  const ms: number[] = [];
  for (let i = 0; i < READS; i++) {
    const t = performance.now();
    await read();
    ms.push(performance.now() - t);
  }
  return median(ms);
}

/** Publishes `n` parked messages to `queue` with confirms. */
async function parkOnBroker(model: amqp.ChannelModel, queue: string, consumer: string, n: number): Promise<void> {
  const ch = await model.createConfirmChannel();
  try {
    const now = Date.now();
    for (let i = 0; i < n; i++) {
      const raw = seedSpec(i, n, now, consumer);
      const ok = ch.sendToQueue(queue, raw.content, { ...raw.properties, persistent: true } as amqp.Options.Publish);
      if (!ok) await new Promise((r) => ch.once('drain', r));
      if (i % 2000 === 1999) await ch.waitForConfirms();
    }
    await ch.waitForConfirms();
  } finally {
    await ch.close();
  }
}

/** Resident set size of the process, MB. */
interface Rss {
  readonly start: number;
  readonly end: number;
  readonly peak: number;
}

/** The ingester reading `n` messages from a parked queue: rows/s from its start to the last stored, batches, and RSS. */
async function ingestFromBroker(backend: Backend, model: amqp.ChannelModel, topology: Topology, consumer: string, n: number): Promise<{ rate: number; batches: number; rss: Rss }> {
  await parkOnBroker(model, topology.consumer(consumer).parkedQueue, consumer, n);
  const ingester = archiveIngester({ store: backend.store, topology, connection: async () => model }, { consumers: [consumer] });
  const mb = () => process.memoryUsage().rss / 1048576;
  const start = mb();
  let peak = start;
  let stored = 0;
  let batches = 0;
  const done = new Promise<void>((resolve) =>
    ingester.on('batch', (b: { inserted: number }) => {
      batches++;
      peak = Math.max(peak, mb());
      if ((stored += b.inserted) >= n) resolve();
    }),
  );
  const began = performance.now();
  ingester.start();
  await done;
  const seconds = (performance.now() - began) / 1000;
  await ingester.stop();
  return { rate: n / seconds, batches, rss: { start, end: mb(), peak: Math.max(peak, mb()) } };
}

interface Figures {
  readonly backend: string;
  readonly rows: number;
  readonly ingest: number;
  readonly rss: Rss;
  readonly groupMs: number;
  readonly filterMs: number;
  readonly pageMs: number;
  readonly showMs: number;
  readonly replay: ReplayFigures;
  /** Side by side into the seeded table: the direct insert, and ArchiveIngester from a parked queue. */
  readonly sideBySide: { readonly rows: number; readonly direct: number; readonly ingester: number; readonly batches: number; readonly rss: Rss; readonly load: number };
  readonly bytes: number;
}

async function runBackend(make: () => Promise<Backend>, n: number, log: (line: string) => void): Promise<Figures> {
  const backend = await make();
  const prefix = `bench.archive.${backend.name}.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const consumer = `${prefix}.billing`;
  const fromBroker = `${prefix}.shipping`;
  const direct = `${prefix}.invoicing`;
  const replayed = `${prefix}.loyalty`;
  const topology = defineTopology({ exchange: `${prefix}.events`, retry: { delays: ['5s'], maxAttempts: 3 }, consumers: { [consumer]: { bindings: ['order.#'] }, [fromBroker]: { bindings: ['shipment.#'] }, [replayed]: { bindings: ['loyalty.#'] } } });
  let model: amqp.ChannelModel | undefined;
  try {
    log(`${backend.name}: seeding ${n.toLocaleString('en-US')} rows…`);
    const seeded = await ingest(backend, consumer, n, log);
    // Connected after the seed, which keeps the event loop busy for minutes.
    model = await amqp.connect(AMQP_URL, { noDelay: true });
    model.on('error', (e: Error) => log(`${backend.name}: broker connection: ${e.message}`));
    await declareTopology(model, topology);
    log(`${backend.name}: ingest ${Math.round(seeded.rate)}/s; reading…`);
    const archive = new Archive(backend.store);

    const groupMs = await timed(
      () => archive.groups({ consumer }),
      (g) => {
        if (g.length !== GROUPS || g.reduce((s, x) => s + x.count, 0) !== n) throw new Error(`${backend.name}: groups ${g.length}, counting ${g.reduce((s, x) => s + x.count, 0)} rows, not ${GROUPS} and ${n}`);
      },
    );

    const filter = archiveFilter({ consumer, error: 'tenant t4', since: '2d' });
    const since = Date.now() - 2 * DAY;
    const filterMs = await timed(
      () => archive.page({ filter, limit: 50 }),
      (p) => {
        // About 1 in 35 rows matches: a full page from 5,000 rows on.
        if (p.rows.length === 0 || (n >= 5000 && p.rows.length !== 50)) throw new Error(`${backend.name}: the filtered page has ${p.rows.length} rows`);
        for (const r of p.rows) if (!(r.errorMessage ?? '').includes('tenant t4') || r.failedAt.getTime() < since) throw new Error(`${backend.name}: row ${r.id} does not match the filter`);
      },
    );

    const deep = Math.floor(n * 0.9);
    const edge = await backend.rowAt(consumer, deep - 1);
    const after = `${edge.failedAt.getTime()}.${edge.id}`;
    const expected = await backend.rowAt(consumer, deep);
    const pageMs = await timed(
      () => archive.page({ filter: { consumer }, after, limit: 50 }),
      (p) => {
        if (p.rows.length !== 50 || p.rows[0]?.id !== expected.id) throw new Error(`${backend.name}: the page after row ${deep} starts at ${p.rows[0]?.id}, not ${expected.id}`);
      },
    );

    // A message parked twice, in the middle of the table.
    const twice = `m-${Math.floor(n / 2000) * 1000 + 998}`;
    const first = (await archive.page({ filter: archiveFilter({ consumer, messageIds: [twice], states: ['open', 'replayed', 'resolved'] }), limit: 5 })).rows[0];
    if (first === undefined) throw new Error(`${backend.name}: no row of message ${twice}`);
    const showMs = await timed(
      async () => {
        const m = await archive.get(first.id, { viewed: true });
        const h = await archive.history(consumer, twice);
        return { m, h };
      },
      ({ m, h }) => {
        if (m?.id !== first.id || h.rows.length !== 2) throw new Error(`${backend.name}: message ${twice} shows ${h.rows.length} parkings, not 2`);
      },
    );

    // The replayed group is 10,000 rows at any size: a consumer of its own beside the seed.
    await seedReplayGroup(backend, replayed);
    const replay = await replayGroup(backend, model, topology, replayed);

    // The same number of rows of the same shape into the same table, one way after the other.
    const sideRows = Math.min(20_000, n);
    log(`${backend.name}: ingest side by side, ${sideRows.toLocaleString('en-US')} rows each…`);
    const bare = await ingest(backend, direct, sideRows, log);
    const fromQueue = await ingestFromBroker(backend, model, topology, fromBroker, sideRows);
    const bytes = await backend.size();
    return { backend: backend.name, rows: n, ingest: seeded.rate, rss: seeded.rss, groupMs, filterMs, pageMs, showMs, replay, sideBySide: { rows: sideRows, direct: bare.rate, ingester: fromQueue.rate, batches: fromQueue.batches, rss: fromQueue.rss, load: loadavg()[0] ?? 0 }, bytes };
  } finally {
    if (model !== undefined) {
      await model.close().catch(() => undefined);
      await deleteTopology(topology).catch(() => undefined);
    }
    await backend.teardown();
  }
}

const ms = (v: number) => (v >= 10 ? Math.round(v).toString() : v.toFixed(1));

/** The backend's line, targets beside the figures. */
export function archiveLine(f: Figures): string {
  const t = ARCHIVE_TARGETS;
  const ok = (good: boolean) => (good ? 'ok' : 'MISSED');
  const ingestTarget = t.ingest[f.backend as 'sqlite' | 'postgres'];
  return [
    `archive ${f.backend}: rows ${f.rows}, ingest ${Math.round(f.ingest)}/s, group ${ms(f.groupMs)} ms, filter ${ms(f.filterMs)} ms, page ${ms(f.pageMs)} ms, show ${ms(f.showMs)} ms, replay ${Math.round(f.replay.rate)}/s`,
    `  targets: ingest >= ${ingestTarget}/s ${ok(f.ingest >= ingestTarget)}, group ${ok(f.groupMs <= t.readMs)}, filter ${ok(f.filterMs <= t.readMs)}, page ${ok(f.pageMs <= t.readMs)}, show ${ok(f.showMs <= t.readMs)} (each <= ${t.readMs} ms), replay >= ${t.replay}/s ${ok(f.replay.rate >= t.replay)}; ${replayText(f.replay)}`,
    `  RSS at start of ingest ${Math.round(f.rss.start)} MB, at end ${Math.round(f.rss.end)} MB (peak ${Math.round(f.rss.peak)} MB); ${Math.round(f.bytes / 1048576)} MB on disk`,
    sideBySideLine(f),
  ].join('\n');
}

/** The two ingest rates into the seeded table, and their ratio. */
export function sideBySideLine(f: Figures): string {
  const s = f.sideBySide;
  return `archive ${f.backend} ingest, ${s.rows} rows into ${f.rows}: direct insert ${Math.round(s.direct)}/s, ArchiveIngester from the parked queue ${Math.round(s.ingester)}/s (${s.batches} batches, RSS ${Math.round(s.rss.start)} to ${Math.round(s.rss.end)} MB, peak ${Math.round(s.rss.peak)}), ratio ${(s.ingester / s.direct).toFixed(2)}; load average ${s.load.toFixed(1)}`;
}

/** The archive's figures on each backend, as rows, and its lines printed as they come. */
export async function benchArchive(argv: readonly string[] = process.argv.slice(2)): Promise<BenchRow[]> {
  const o = parseArgs(argv);
  const log = (line: string): void => void process.stderr.write(`bench/archive: ${line}\n`);
  const rows: BenchRow[] = [];
  const lines: string[] = [];
  if (o.replayOnly) {
    for (const name of o.backends) {
      const f = await runReplayOnly(name === 'sqlite' ? sqliteBackend : postgresBackend, log);
      console.log(`archive ${name}: ${replayText(f)}; load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
      rows.push({ group: `archive replay of a ${REPLAY_ROWS.toLocaleString('en-US')}-row group (${name})`, metric: 'rows/s with confirms', warren: f.rate, baseline: ARCHIVE_TARGETS.replay, baselineName: 'target', goal: '>= 1' });
    }
    return rows;
  }
  for (const name of o.backends) {
    const f = await runBackend(name === 'sqlite' ? sqliteBackend : postgresBackend, o.rows, log);
    const line = archiveLine(f);
    lines.push(line);
    console.log(line);
    const t = ARCHIVE_TARGETS;
    rows.push({ group: `archive ingest (${name}, ${o.rows.toLocaleString('en-US')} rows)`, metric: 'rows/s', warren: f.ingest, goal: `>= ${t.ingest[name]}` });
    for (const [what, v] of [['group counts', f.groupMs], ['filtered page', f.filterMs], ['deep page', f.pageMs], ['one message with history', f.showMs]] as const) rows.push({ group: `archive ${what} (${name})`, metric: 'ms, median', warren: v, goal: `<= ${t.readMs} ms` });
    rows.push({ group: `archive replay of a ${REPLAY_ROWS.toLocaleString('en-US')}-row group (${name})`, metric: 'rows/s with confirms', warren: f.replay.rate, baseline: t.replay, baselineName: 'target', goal: '>= 1' });
    rows.push({ group: `archive ingest from a parked queue (${name}, ${f.sideBySide.rows.toLocaleString('en-US')} rows)`, metric: 'rows/s', warren: f.sideBySide.ingester, baseline: f.sideBySide.direct, baselineName: 'direct insert', goal: `>= ${t.ingest[name]}` });
  }
  if (lines.length > 1) {
    console.log();
    for (const l of lines) console.log(l.split('\n')[0]);
    for (const l of lines) console.log(l.split('\n')[3]);
  }
  return rows;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printRows(await benchArchive());
}
