import { createServer, type Server } from 'node:http';
import { isIP } from 'node:net';
import { createInterface } from 'node:readline';
import { DB_FLAGS, str } from '../args.js';
import type { Command, CommandContext } from '../command.js';
import type * as amqp from 'amqplib';
import { connect, databaseSettings, nodeOfConnection, openDatabase, type CliNode } from '../context.js';
import { CliError, EXIT, UsageError } from '../errors.js';

const DEFAULT_LISTEN = '127.0.0.1:8780';

/** `--listen host:port` read; host may be an IPv6 address in brackets. */
export function parseListen(raw: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(raw.trim());
  const host = m ? (m[1] ?? m[2] ?? '') : '';
  const port = m ? Number(m[3]) : NaN;
  if (!m || host === '' || port > 65535) throw new UsageError(`--listen: ${JSON.stringify(raw)} is not host:port, e.g. 127.0.0.1:8780, 0.0.0.0:8780 or [::1]:8780.`);
  return { host, port };
}

/** True for an address only this machine reaches. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  if (h === 'localhost' || h === '::1') return true;
  return isIP(h) === 4 && h.startsWith('127.');
}

/** A node as the console's page names it: host and port, with the server and its place in --url; never a password. */
export function nodeName(node: CliNode): string {
  const extra = [node.server, node.tls ? 'TLS' : undefined, node.of > 1 ? `node ${node.position} of ${node.of} in --url` : undefined].filter((x) => x !== undefined);
  return `${node.address}${extra.length ? ` (${extra.join(', ')})` : ''}`;
}

/** The host:port of each node in a --url list, as given (a bare host:port stays as it is). */
export function addressesOf(list: string): string[] {
  return list
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '')
    .map((item) => {
      // Read from the text, never parsed: a password with a raw / # or @ would be taken for the host.
      const rest = item.includes('://') ? item.slice(item.indexOf('://') + 3) : item;
      const host = rest.slice(rest.lastIndexOf('@') + 1).replace(/[/?#].*$/, '');
      // A host without a port takes the scheme's; anything else (host:port, or not a host at all) is shown as it is.
      if (!item.includes('://') || !/^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])$/.test(host)) return host;
      return `${host}:${item.toLowerCase().startsWith('amqps:') ? '5671' : '5672'}`;
    });
}

async function readPassword(ctx: CommandContext): Promise<string> {
  const stdin = ctx.io.stdin;
  if (stdin.isTTY) ctx.io.stderr.write('Password (not echoed is up to your terminal; pipe it in to be sure): ');
  const rl = createInterface({ input: stdin });
  try {
    for await (const line of rl) return line;
    return '';
  } finally {
    rl.close();
  }
}

export const consoleHashPassword: Command = {
  path: ['console', 'hash-password'],
  usage: '',
  summary: 'hash a password for the console users file',
  description: [
    'Reads a password from the first line of stdin and prints its scrypt hash. Put it in',
    'the users file that `warren console --users FILE` reads, one user per line:',
    '',
    '  alice:operator:scrypt$16384$8$1$...',
    '  bob:viewer:scrypt$16384$8$1$...',
  ].join('\n'),
  flags: {},
  examples: ["printf '%s\\n' \"$PASSWORD\" | warren console hash-password", 'echo "alice:operator:$(warren console hash-password < pw.txt)" >> console-users'],
  async run(ctx) {
    const password = await readPassword(ctx);
    if (password === '') throw new UsageError('No password on stdin: pipe one in, e.g. printf \'%s\\n\' "$PASSWORD" | warren console hash-password.');
    const { hashPassword } = await import('../../console/auth.js');
    ctx.out(await hashPassword(password));
    return EXIT.ok;
  },
};

export const consoleCommand: Command = {
  path: ['console'],
  usage: '',
  summary: 'serve the operator console, a web page over queues, parked messages, retry table and outbox',
  description: [
    'Serves the console on --listen (default 127.0.0.1:8780) until Ctrl-C: the overview',
    '(per consumer: work depth, parked, consumers, redeliveries, with an hour of history),',
    'the parked messages grouped by cause with replay, canary replay and purge, and, with',
    '--db, the retry table and the outbox. With --db the parked pages read the database\'s',
    'failure archive (exact groups, filters, history, actions on rows by id), and the console',
    'ingests the parked queues into it, unless --no-ingest (the application or `warren',
    'archive` does). Every change is recorded on its Actions page',
    '(and appended to --audit-file when given). It connects to the first node of --url',
    'that answers before it serves, and each page names that node (host:port).',
    '',
    'On a loopback address without an auth method, anyone on this machine is an operator.',
    'Any other address needs one of: --token (or WARREN_CONSOLE_TOKEN; a browser signs in',
    'with the token as password and is recorded as token:operator, whatever name it gives;',
    'beside --users, the names of that file are refused with a token), --users FILE (basic auth against',
    'scrypt hashes from `warren console hash-password`), or --trusted-header NAME (a proxy',
    'in front that authenticates and sets the user name; beyond loopback it also needs',
    '--trust-proxy-only, saying that nothing but the proxy can reach --listen).',
  ].join('\n'),
  flags: {
    ...DB_FLAGS,
    listen: { type: 'string', label: '--listen HOST:PORT', help: `address to serve on; default ${DEFAULT_LISTEN}` },
    token: { type: 'string', label: '--token TOKEN', help: 'operators sign in with this token (16+ characters); env WARREN_CONSOLE_TOKEN' },
    'viewer-token': { type: 'string', label: '--viewer-token TOKEN', help: 'viewers sign in with this token; env WARREN_CONSOLE_VIEWER_TOKEN' },
    users: { type: 'string', label: '--users FILE', help: 'basic auth: lines of name:viewer|operator:HASH (HASH from `warren console hash-password`)' },
    'trusted-header': { type: 'string', label: '--trusted-header NAME', help: 'take the user name from this header, set by an authenticating proxy' },
    'trust-proxy-only': { type: 'boolean', label: '--trust-proxy-only', help: 'with --trusted-header beyond loopback: say that only the proxy can reach --listen (anyone else could send the header)' },
    'trusted-role-header': { type: 'string', label: '--trusted-role-header NAME', help: 'with --trusted-header: the header that says viewer or operator; default everyone is a viewer' },
    'base-path': { type: 'string', label: '--base-path PATH', help: 'serve under this path, e.g. /warren behind a proxy; default /' },
    'no-ingest': { type: 'boolean', label: '--no-ingest', help: 'with --db: read the archive, but leave ingesting the parked queues to the application or `warren archive`' },
    'audit-file': { type: 'string', label: '--audit-file FILE', help: 'record actions as JSON lines in FILE (env WARREN_AUDIT_FILE); default the database\'s action record with --db, else memory' },
  },
  examples: [
    'warren console -t dist/topology.js',
    'warren console -t dist/topology.js --db postgres://ops@db.internal/shop',
    'WARREN_CONSOLE_TOKEN=$(openssl rand -hex 24) warren console -t dist/topology.js --listen 0.0.0.0:8780',
    'warren console -t dist/topology.js --listen 10.0.0.5:8780 --users /etc/warren/console-users',
  ],
  async run(ctx) {
    const { host, port } = parseListen(str(ctx.values, 'listen') ?? DEFAULT_LISTEN);
    const token = str(ctx.values, 'token') ?? ctx.io.env['WARREN_CONSOLE_TOKEN'];
    const viewerToken = str(ctx.values, 'viewer-token') ?? ctx.io.env['WARREN_CONSOLE_VIEWER_TOKEN'];
    const usersFile = str(ctx.values, 'users');
    const trusted = str(ctx.values, 'trusted-header');
    const roleHeader = str(ctx.values, 'trusted-role-header');
    if (roleHeader !== undefined && trusted === undefined) throw new UsageError('--trusted-role-header needs --trusted-header too.');
    const loopback = isLoopback(host);
    const hasAuth = token !== undefined || viewerToken !== undefined || usersFile !== undefined || trusted !== undefined;
    if (!loopback && !hasAuth) {
      throw new UsageError(
        `--listen ${host}:${port} is reachable from other machines, and no auth method is given, so anyone there could replay and purge. Give one: --token TOKEN (or WARREN_CONSOLE_TOKEN, e.g. $(openssl rand -hex 24)), --users FILE (lines name:operator:HASH from \`warren console hash-password\`), or --trusted-header NAME behind an authenticating proxy; or listen on 127.0.0.1.`,
      );
    }
    if (trusted !== undefined && !loopback && ctx.values['trust-proxy-only'] !== true) {
      throw new UsageError(
        `--trusted-header ${trusted} with --listen ${host}:${port}: anyone who can reach that address can send the header ${trusted}${roleHeader !== undefined ? ` (and ${roleHeader}: operator)` : ''} and be whoever they name. Give --trust-proxy-only once nothing but the authenticating proxy can reach it (a firewall, a private network, a sidecar), or listen on 127.0.0.1 behind a proxy on the same machine.`,
      );
    }
    if (ctx.values['trust-proxy-only'] === true && trusted === undefined) throw new UsageError('--trust-proxy-only goes with --trusted-header: without it, there is no proxy header to trust.');
    const topology = await ctx.topology();
    const mod = await import('../../console/index.js');
    const methods = [];
    try {
      const users = usersFile !== undefined ? await mod.readUsersFile(usersFile) : undefined;
      // A token holder is token:operator or token:viewer, and may not sign in under a name of --users.
      if (token !== undefined || viewerToken !== undefined) methods.push(mod.tokenAuth({ operator: token, viewer: viewerToken }, { reservedNames: users?.keys() ?? [] }));
      if (users !== undefined) methods.push(mod.basicAuth(users));
    } catch (error) {
      throw new UsageError(error instanceof Error ? error.message.replace(/^Invalid option `([^`]+)`/, (_m, o: string) => (o === 'users' ? '--users' : `--${o.replace(' ', '-')}`)) : String(error));
    }
    if (trusted !== undefined) methods.push(mod.trustedHeaderAuth({ userHeader: trusted, ...(roleHeader !== undefined ? { roleHeader } : {}) }));
    const authorize = methods.length > 0 ? mod.anyOf(...methods) : () => ({ user: 'local', role: 'operator' as const });
    const dbGiven = str(ctx.values, 'db') ?? ctx.io.env['WARREN_DB'];
    const db = dbGiven !== undefined && dbGiven.trim() !== '' ? databaseSettings(ctx.values, ctx.io, ctx.broker.connectTimeoutMs) : undefined;
    const store = db ? await openDatabase(db) : undefined;
    if (ctx.values['no-ingest'] === true && store === undefined) throw new UsageError('--no-ingest goes with --db: without a database there is no archive to ingest into.');
    const auditFile = str(ctx.values, 'audit-file') ?? (ctx.io.env['WARREN_AUDIT_FILE']?.trim() || undefined);
    // One AMQP connection on the first node of --url that answers, opened again after a loss.
    let live: Promise<amqp.ChannelModel> | undefined;
    // The node that connection is on, which the page names as its broker.
    let node: CliNode | undefined;
    const connection = (): Promise<amqp.ChannelModel> =>
      (live ??= connect(ctx.broker, ctx.io.cwd, ctx.err).then(
        (m) => {
          node = nodeOfConnection(m);
          m.on('close', () => {
            live = undefined;
            node = undefined;
          });
          return m;
        },
        (error: unknown) => {
          live = undefined;
          throw error;
        },
      ));
    // With a database the parked pages read its archive; this console ingests the parked queues into it too, unless told not to.
    const { Archive, ArchiveIngester } = await import('../../archive/index.js');
    const archive = store ? new Archive(store) : undefined;
    const ingester = store && ctx.values['no-ingest'] !== true ? new ArchiveIngester({ store, topology, connection }) : undefined;
    ingester?.on('behind', (e: { consumer: string; error: string }) => ctx.err(`${e.consumer}: the archive is behind: the database does not take batches (${e.error}); the parked queue keeps the messages.`));
    // The record is written to before anything is served: a console that cannot record refuses every action, so it does not start.
    const actionLog = auditFile !== undefined ? mod.fileActionLog(auditFile) : store?.actions;
    if (actionLog !== undefined) {
      try {
        await mod.checkActionLog(actionLog, {
          where: auditFile !== undefined ? `--audit-file ${auditFile}` : `the action record of --db ${db?.shown ?? ''}`,
          detail: { listen: `${host}:${port}`, pid: process.pid },
          hint:
            auditFile !== undefined
              ? 'Give --audit-file a file this user may create and append to (its directory is created when missing), or leave --audit-file out to record in the database (--db) or in memory.'
              : "Give the database user INSERT on the action record's table (warren migrations create it), or record to a file with --audit-file FILE.",
        });
      } catch (error) {
        await store?.close().catch(() => undefined);
        throw new CliError(`warren console not started: ${error instanceof Error ? error.message.replace(/^Invalid option `actionLog`: /, '') : String(error)}`, EXIT.usage);
      }
    }
    const server: Server = createServer();
    let ops: Awaited<ReturnType<typeof mod.warrenConsole>> | undefined;
    try {
      const bound = await new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => resolve((server.address() as { port: number }).port));
      }).catch((error: unknown) => {
        const code = (error as { code?: string }).code;
        throw new CliError(`--listen ${host}:${port}: ${code === 'EADDRINUSE' ? 'the port is in use; pick another' : code === 'EADDRNOTAVAIL' ? 'no such address on this machine' : error instanceof Error ? error.message : String(error)}.`, EXIT.usage);
      });
      const shownHost = host.includes(':') ? `[${host}]` : host;
      ops = mod.warrenConsole({
        topology,
        url: ctx.broker.url,
        connection,
        brokerName: () => (node ? nodeName(node) : `not connected (--url ${addressesOf(ctx.broker.url).join(', ')})`),
        management: ctx.management(),
        authorize,
        ...(store ? { store, databaseName: db?.shown ?? '' } : {}),
        ...(archive ? { archive } : {}),
        ...(ingester ? { ingester } : {}),
        ...(str(ctx.values, 'base-path') !== undefined ? { basePath: str(ctx.values, 'base-path') as string } : {}),
        ...(hasAuth ? { challenge: 'Basic realm="warren console", charset="UTF-8"' } : {}),
        // A console on loopback answers only to loopback names: a DNS-rebinding page cannot reach it.
        ...(loopback ? { allowedHosts: [`${shownHost}:${bound}`, `localhost:${bound}`, `127.0.0.1:${bound}`, `[::1]:${bound}`] } : {}),
        ...(actionLog !== undefined ? { actionLog } : {}),
      });
      server.on('request', mod.nodeListener(ops.fetch));
      // Connected before the address is given, so the first page names the node it reads; a
      // broker that does not answer is said at once, and the pages that need it try again.
      await connection().catch((error: unknown) => {
        // A --url that is no URL never gets better: refuse to start, as for any other wrong flag.
        if (error instanceof UsageError) throw error;
        ctx.err(`note: not connected to RabbitMQ yet: ${error instanceof Error ? error.message : String(error)} Pages that need it try again.`);
      });
      ingester?.start();
      const who = hasAuth ? 'sign in required' : 'anyone on this machine is an operator';
      ctx.out(`warren console: http://${shownHost}:${bound}${ops.basePath}/ (${who}; Ctrl-C to stop)`);
      await new Promise<void>((resolve) => {
        if (ctx.signal.aborted) return resolve();
        ctx.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      return EXIT.ok;
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await ops?.close();
      await ingester?.stop();
      await (await live?.catch(() => undefined))?.close().catch(() => undefined);
      await store?.close().catch(() => undefined);
    }
  },
};
