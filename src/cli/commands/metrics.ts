// `warren metrics`: a standalone Prometheus exporter of the broker-side figures of every
// queue of the topology (and, given a database, the outbox and retry table), for
// consumers that are not running and for setups with no metrics endpoint of their own.
import type * as amqp from 'amqplib';
import type { Store } from '../../store/index.js';
import { DB_FLAGS, duration, str } from '../args.js';
import { noExtraArgs, type Command } from '../command.js';
import { connect, databaseSettings, describeDatabaseError, openDatabase } from '../context.js';
import { CliError, EXIT, UsageError } from '../errors.js';

/** `HOST:PORT`, `[V6]:PORT` or `:PORT` (127.0.0.1), or a usage error. */
export function parseListen(raw: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(raw.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || !Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new UsageError(`--listen: ${JSON.stringify(raw)} is not HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464, or :9464 for 127.0.0.1).`);
  }
  const host = m[1] ?? (m[2] === '' || m[2] === undefined ? '127.0.0.1' : m[2]);
  return { host, port };
}

export const metrics: Command = {
  path: ['metrics'],
  usage: '',
  summary: 'serve the queues\' figures (and the outbox and retry table) to Prometheus',
  description: [
    'Runs a Prometheus exporter until Ctrl-C or SIGTERM: GET /metrics answers, for every',
    'queue of the topology (work, retry tiers, parked), messages ready and unacknowledged,',
    'consumers, and the broker\'s redelivery and publish counters, labelled by consumer and',
    'role. The figures come from the management API, or from passive declares over AMQP',
    'when it does not answer (then without unacknowledged counts and counters); a reading',
    'is reused for --cache, so frequent scrapes cost the broker little.',
    '',
    'Given --db (or WARREN_DB), it also serves the outbox lag and flagged rows and the',
    'retry table\'s rows due, paused and waiting, and the failure archive\'s open failures,',
    'rows and oldest row per consumer, read from the application\'s database.',
    '',
    'These are the figures the shipped alert rules and dashboard use (monitoring/); the',
    'names are listed in docs/metrics.md. Keep the address private: metrics name queues.',
  ].join('\n'),
  flags: {
    listen: { type: 'string', label: '--listen HOST:PORT', help: 'where to serve /metrics; default 127.0.0.1:9464' },
    cache: { type: 'string', label: '--cache DURATION', help: 'how long a reading of the broker and the database is reused (e.g. 5s, 500ms); default 5s' },
    ...DB_FLAGS,
  },
  examples: [
    'warren metrics --listen 127.0.0.1:9464',
    'warren metrics --listen :9464 --db postgres://metrics@db.internal:5432/shop',
    'curl -s 127.0.0.1:9464/metrics | grep warren_queue_messages_ready',
  ],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'metrics');
    const listen = parseListen(str(ctx.values, 'listen') ?? '127.0.0.1:9464');
    const cacheMs = duration(ctx.values, 'cache') ?? 5000;
    const topology = await ctx.topology();
    const dbGiven = typeof ctx.values['db'] === 'string' || (ctx.io.env['WARREN_DB'] ?? '').trim() !== '';
    const db = dbGiven ? databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs) : undefined;
    // prom-client is an optional dependency of warren: load it only here, and say what to do without it.
    let metricsModule: typeof import('../../metrics/index.js');
    try {
      metricsModule = await import('../../metrics/index.js');
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (/prom-client/.test(message)) throw new CliError('`warren metrics` needs prom-client, an optional dependency of warren: npm install prom-client', EXIT.failed);
      throw error;
    }
    // One AMQP connection, opened again after a loss; the first one must work.
    let model: amqp.ChannelModel | undefined = await connect(ctx.broker, ctx.io.cwd, ctx.err);
    const watch = (m: amqp.ChannelModel) => m.on('close', () => {
      if (model === m) model = undefined;
    });
    watch(model);
    const connection = async () => {
      if (model) return model;
      const m = await connect(ctx.broker, ctx.io.cwd, ctx.err);
      watch(m);
      model = m;
      return m;
    };
    let store: Store<unknown> | undefined;
    if (db) {
      store = await openDatabase(db);
      try {
        await store.outbox.lag();
      } catch (error) {
        await store.close().catch(() => undefined);
        throw describeDatabaseError(error, db) ?? error;
      }
    }
    const exporter = metricsModule.warrenMetrics({
      topology,
      connection,
      broker: { management: ctx.management(), cacheMs },
      ...(store ? { stores: [{ store, name: db?.backend === 'postgres' ? 'postgres' : 'sqlite' }], archive: { store } } : {}),
      storeCacheMs: cacheMs,
    });
    let server: Awaited<ReturnType<typeof metricsModule.serveMetrics>>;
    try {
      server = await metricsModule.serveMetrics(exporter.registry, listen);
    } catch (error) {
      await exporter.close();
      await store?.close().catch(() => undefined);
      await model?.close().catch(() => undefined);
      const e = error as { code?: string; message?: string };
      if (e.code === 'EADDRINUSE') throw new CliError(`--listen: ${listen.host}:${listen.port} is in use; pick another port.`, EXIT.failed);
      if (e.code === 'EADDRNOTAVAIL' || e.code === 'ENOTFOUND') throw new CliError(`--listen: ${listen.host} is not an address of this machine.`, EXIT.usage);
      throw error;
    }
    ctx.err(`serving metrics of ${topology.consumers.size} consumer${topology.consumers.size === 1 ? '' : 's'} on ${server.url}${store ? ` (and the database ${db?.shown})` : ''}; Ctrl-C to stop`);
    if (!ctx.signal.aborted) await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
    await server.close();
    await exporter.close();
    await store?.close().catch(() => undefined);
    await model?.close().catch(() => undefined);
    return EXIT.ok;
  },
};
