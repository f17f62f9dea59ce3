// `warren archive`: a dedicated ingester process. It moves every message that reaches a
// consumer's parked queue into the archive of the application's store, until SIGINT or
// SIGTERM, and says what it does on a line every few seconds.
import type * as amqp from 'amqplib';
import { ArchiveIngester } from '../../archive/ingest.js';
import type { ArchiveIngestState, ArchiveRetention } from '../../archive/types.js';
import type { Logger } from '../../logger.js';
import { DB_FLAGS, duration, list, str, wholeNumber, type FlagSpecs } from '../args.js';
import { noExtraArgs, type Command, type CommandContext } from '../command.js';
import { connect, databaseSettings, describeDatabaseError, openDatabase } from '../context.js';
import { EXIT, UsageError } from '../errors.js';
import { count, plural, span } from '../format.js';

const UNITS_MS = { m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** `--keep 14d`: a retention age of minutes, hours or days, from one minute to ten years. */
export function retentionAge(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const m = /^\s*(\d{1,6})\s*(m|h|d)\s*$/.exec(raw);
  const ms = m ? Number(m[1]) * UNITS_MS[m[2] as keyof typeof UNITS_MS] : NaN;
  if (!Number.isFinite(ms) || ms < 60_000 || ms > 3650 * 86_400_000) throw new UsageError(`--keep: ${JSON.stringify(raw)} is not an age from 1m to 3650d (e.g. 30m, 12h, 14d).`);
  return ms;
}

/** A logger for the ingester's own words (database outages, retention warnings): one line each on stderr. */
function lineLogger(ctx: CommandContext, debug: boolean): Logger {
  const line = (level: string) => (message: string, fields?: Record<string, unknown>) => {
    const extra = fields === undefined ? '' : Object.entries(fields).map(([k, v]) => ` ${k}=${typeof v === 'string' ? JSON.stringify(v) : String(v)}`).join('');
    ctx.err(`${level}: ${message}${extra}`);
  };
  return { debug: debug ? line('debug') : () => undefined, info: line('info'), warn: line('warn'), error: line('error') };
}

/** One progress line: the totals, the rate since the last line, and each consumer. */
export function progressText(states: readonly ArchiveIngestState[], depths: ReadonlyMap<string, number | undefined>, previous: number, elapsedMs: number): string {
  const archived = states.reduce((n, s) => n + s.archived, 0);
  const copies = states.reduce((n, s) => n + s.duplicates, 0);
  const rate = elapsedMs > 0 ? ((archived - previous) * 1000) / elapsedMs : 0;
  const each = states.map((s) => {
    const depth = depths.get(s.consumer);
    return `${s.consumer} ${count(s.archived)} (${s.status}${depth === undefined ? '' : `, ${count(depth)} in ${s.queue}`})`;
  });
  return `archived ${count(archived)} (+${count(archived - previous)}, ${count(Math.round(rate))}/s), ${plural(copies, 'copy', 'copies')} recognised; ${each.join('; ')}`;
}

const ARCHIVE_FLAGS: FlagSpecs = {
  ...DB_FLAGS,
  consumer: { type: 'string', multiple: true, label: '--consumer NAME[,NAME]', help: 'ingest the parked queues of these consumers only (repeatable); default every consumer of the topology' },
  'batch-size': { type: 'string', label: '--batch-size N', help: 'messages stored per transaction and acknowledged with one ack; default 500' },
  keep: { type: 'string', label: '--keep AGE', help: 'retention: delete rows that failed longer ago than AGE (30m, 12h, 14d), once an hour; default kept until purged' },
  'max-rows': { type: 'string', label: '--max-rows N', help: 'retention: keep at most N rows per consumer, the newest' },
  progress: { type: 'string', label: '--progress DURATION', help: 'how often a progress line is printed while messages arrive (e.g. 10s, 500ms); default 10s' },
};

export const archiveCommand: Command = {
  path: ['archive'],
  usage: '',
  summary: 'move every parked message into the database\'s archive, until stopped',
  description: [
    "Runs an ingester: every message in a consumer's parked queue, those parked already and",
    "those that arrive, is stored in the archive of the application's database (--db) and",
    'then acknowledged: insert first (committed), ack second, a batch per transaction. A',
    'crash between the two leaves the messages in the queue; they come again and the archive',
    'keeps each once, so several `warren archive` processes (and applications ingesting',
    'themselves) may run at once.',
    '',
    'While the database does not answer, the parked queue keeps the messages and ingestion',
    'resumes by itself once it does. A line every --progress says how far it is. SIGINT or',
    'SIGTERM stops it: what it holds is stored and acknowledged first, or left in the queue.',
    '',
    'Read the archive with `warren parked list|show|export CONSUMER --db URL`.',
  ].join('\n'),
  flags: ARCHIVE_FLAGS,
  examples: [
    'warren archive -t dist/topology.js --db postgres://ops@db.internal:5432/shop',
    'warren archive -t dist/topology.js --db sqlite:data/app.db --consumer billing',
    'warren archive -t dist/topology.js --db $WARREN_DB --keep 14d --max-rows 1000000',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'archive');
    const topology = await ctx.topology();
    const db = databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs);
    const consumers = list(ctx.values, 'consumer')?.flatMap((c) => c.split(',')).map((c) => c.trim()).filter(Boolean);
    for (const c of consumers ?? []) topology.consumer(c);
    const batchSize = wholeNumber(ctx.values, 'batch-size', 1, 10_000);
    const maxAgeMs = retentionAge(str(ctx.values, 'keep'));
    const maxRows = wholeNumber(ctx.values, 'max-rows', 1, 1_000_000_000);
    const everyMs = duration(ctx.values, 'progress') ?? 10_000;
    const retention: ArchiveRetention | undefined = maxAgeMs === undefined && maxRows === undefined ? undefined : { ...(maxAgeMs !== undefined ? { maxAgeMs } : {}), ...(maxRows !== undefined ? { maxRows } : {}) };
    const store = await openDatabase(db);
    // One AMQP connection, opened again after a loss: the ingester asks for it each time it reads a queue again.
    let live: Promise<amqp.ChannelModel> | undefined;
    const connection = (): Promise<amqp.ChannelModel> =>
      (live ??= connect(ctx.broker, ctx.io.cwd, ctx.err).then(
        (m) => {
          m.on('error', () => undefined);
          m.on('close', () => (live = undefined));
          return m;
        },
        (error: unknown) => {
          live = undefined;
          throw error;
        },
      ));
    let ingester: ArchiveIngester | undefined;
    let ticker: NodeJS.Timeout | undefined;
    try {
      // The tables first: a database without them (or unreachable) is said at once, with its exit code.
      await store.archive.lastId().catch((error: unknown) => {
        throw describeDatabaseError(error, db) ?? error;
      });
      await connection();
      ingester = new ArchiveIngester(
        { store, topology, connection },
        { ...(consumers !== undefined && consumers.length > 0 ? { consumers } : {}), ...(batchSize !== undefined ? { batchSize } : {}), ...(retention !== undefined ? { retention } : {}), logger: lineLogger(ctx, ctx.io.env['WARREN_DEBUG'] !== undefined) },
      );
      const names = ingester.state().map((s) => s.consumer);
      ingester.on('behind', (e: { consumer: string; error: string }) => ctx.err(`${e.consumer}: the archive is behind: the database does not take batches (${e.error}); the parked queue keeps the messages.`));
      ingester.on('caught-up', (e: { consumer: string }) => ctx.err(`${e.consumer}: the database takes batches again; ingestion goes on.`));
      ingester.start();
      const started = Date.now();
      if (!ctx.json) ctx.out(`warren archive: ingesting the parked queues of ${names.join(', ')} into ${db.shown}${retention ? ` (retention: ${[maxAgeMs !== undefined ? `keep ${span(maxAgeMs)}` : '', maxRows !== undefined ? `at most ${count(maxRows)} rows per consumer` : ''].filter(Boolean).join(', ')})` : ''}; Ctrl-C to stop.`);
      const i = ingester;
      let shown = 0;
      let shownArchived = 0;
      let shownAt = started;
      const depths = async (): Promise<Map<string, number | undefined>> => {
        const out = new Map<string, number | undefined>();
        const model = await live?.catch(() => undefined);
        for (const s of i.state()) {
          let n: number | undefined;
          if (model !== undefined) {
            const ch = await model.createChannel().catch(() => undefined);
            if (ch !== undefined) {
              ch.on('error', () => undefined);
              n = await ch.checkQueue(s.queue).then((q) => q.messageCount, () => undefined);
              await ch.close().catch(() => undefined);
            }
          }
          out.set(s.consumer, n);
        }
        return out;
      };
      let ticking = false;
      const tick = async (last = false) => {
        if (ticking && !last) return;
        ticking = true;
        try {
          const states = i.state();
          const archived = states.reduce((n, s) => n + s.archived + s.duplicates, 0);
          if (archived === shown && !last) return;
          const d = await depths();
          const now = Date.now();
          if (ctx.json) ctx.out(JSON.stringify({ at: new Date(now).toISOString(), consumers: states.map((s) => ({ ...s, queueDepth: d.get(s.consumer) ?? null })) }));
          else ctx.out(progressText(states, d, shownArchived, now - shownAt));
          shown = archived;
          shownArchived = states.reduce((n, s) => n + s.archived, 0);
          shownAt = now;
        } finally {
          ticking = false;
        }
      };
      ticker = setInterval(() => void tick().catch(() => undefined), everyMs);
      await new Promise<void>((resolve) => {
        if (ctx.signal.aborted) return resolve();
        ctx.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      clearInterval(ticker);
      ticker = undefined;
      await ingester.stop();
      await tick(true);
      const states = ingester.state();
      const held = states.reduce((n, s) => n + s.held, 0);
      if (ctx.json) ctx.out(JSON.stringify({ stopped: true, consumers: states }));
      else {
        ctx.out(`Stopped after ${span(Date.now() - started)}: ${plural(states.reduce((n, s) => n + s.archived, 0), 'message')} archived, ${plural(states.reduce((n, s) => n + s.duplicates, 0), 'copy', 'copies')} recognised as archived already.`);
        if (held > 0) ctx.out(`${plural(held, 'message')} not stored ${held === 1 ? 'stays' : 'stay'} in ${held === 1 ? 'its' : 'their'} parked queue for the next ingester.`);
      }
      return EXIT.ok;
    } finally {
      if (ticker) clearInterval(ticker);
      await ingester?.stop().catch(() => undefined);
      await (await live?.catch(() => undefined))?.close().catch(() => undefined);
      await store.close().catch(() => undefined);
    }
  },
};
