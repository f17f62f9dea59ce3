import { readFileSync } from 'node:fs';
import type * as amqp from 'amqplib';
import { InvalidOptionError, StoreSchemaError, StoreUnavailableError, UnknownConsumerError, WarrenError } from '../errors.js';
import type { ManagementClient } from '../management/client.js';
import { QueueNotFoundError, WalkInterruptedError } from '../park/errors.js';
import type { Topology } from '../topology/declaration.js';
import { duration, GLOBAL_FLAGS, parseStrict, positionalsOf, str, type FlagSpecs } from './args.js';
import type { Command, CommandContext } from './command.js';
import { archiveCommand } from './commands/archive.js';
import { consoleCommand, consoleHashPassword } from './commands/console.js';
import { CONSUMER_COMMANDS } from './commands/consumer.js';
import { parkedExport, parkedList, parkedPurge, parkedReplay, parkedResolve, parkedShow } from './commands/parked.js';
import { metrics } from './commands/metrics.js';
import { OUTBOX_COMMANDS } from './commands/outbox.js';
import { RETRY_COMMANDS } from './commands/retry.js';
import { status } from './commands/status.js';
import { topologyApply, topologyPlan, topologyVerify } from './commands/topology.js';
import { brokerSettings, connect, DEFAULT_AMQP_URL, loadTopology, management, scrub, secretsOf, settingSecrets, type BrokerSettings, type Io } from './context.js';
import { CliError, EXIT, UsageError, type ExitCode } from './errors.js';
import { commandHelp, groupHelp, mainHelp } from './help.js';

/** Every command, in the order help lists them. */
export const COMMANDS: readonly Command[] = [status, parkedList, parkedShow, parkedReplay, parkedPurge, parkedExport, parkedResolve, ...RETRY_COMMANDS, ...OUTBOX_COMMANDS, ...CONSUMER_COMMANDS, archiveCommand, topologyPlan, topologyApply, topologyVerify, metrics, consoleHashPassword, consoleCommand];

function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Every flag any command takes, so positionals can be found before the command is known. */
function allFlags(): FlagSpecs {
  const out: Record<string, FlagSpecs[string]> = { ...GLOBAL_FLAGS, version: { type: 'boolean', short: 'V', label: '--version', help: '' } };
  for (const c of COMMANDS) Object.assign(out, c.flags);
  return out;
}

function findCommand(words: readonly string[]): { command: Command | undefined; group: string | undefined } {
  for (const c of COMMANDS) if (c.path.every((w, i) => words[i] === w)) return { command: c, group: undefined };
  const group = COMMANDS.some((c) => c.path.length > 1 && c.path[0] === words[0]) ? words[0] : undefined;
  return { command: undefined, group };
}

/** Maps an error to one line and an exit code. No stack traces unless WARREN_DEBUG is set. */
function explain(error: unknown): { message: string; code: ExitCode } {
  if (error instanceof CliError) return { message: error.message, code: error.exitCode };
  if (error instanceof UnknownConsumerError) return { message: error.message, code: EXIT.usage };
  if (error instanceof InvalidOptionError) return { message: error.message, code: EXIT.usage };
  if (error instanceof QueueNotFoundError) return { message: error.message, code: EXIT.failed };
  if (error instanceof WalkInterruptedError) return { message: error.message, code: EXIT.failed };
  if (error instanceof WarrenError && error.code === 'BROKER_UNREACHABLE') return { message: error.message, code: EXIT.unreachable };
  // The retry commands explain these with the database's name; this is the fallback.
  if (error instanceof WarrenError && error.code === 'UNKNOWN_DEPENDENCY') return { message: error.message, code: EXIT.usage };
  if (error instanceof StoreUnavailableError) return { message: error.message, code: EXIT.unreachable };
  if (error instanceof StoreSchemaError) return { message: error.message, code: EXIT.failed };
  const e = error as { code?: unknown; message?: string };
  // A channel or connection closed under us (the broker went away mid-command).
  if (typeof e?.message === 'string' && /Connection closed|Channel closed|ECONNRESET|socket/i.test(e.message)) {
    return { message: `Lost the connection to RabbitMQ: ${e.message.split('\n')[0]}. Unacknowledged messages are back in their queues; run the command again.`, code: EXIT.unreachable };
  }
  return { message: error instanceof Error ? error.message : String(error), code: EXIT.failed };
}

/** Streams whose write errors are already handled (a stream gets one listener, however often run is called). */
const watched = new WeakMap<NodeJS.WritableStream, { closed: boolean }>();

/**
 * Tracks whether a stream can still be written. A reader that goes away (`warren status |
 * head -1`) makes the next write fail with EPIPE, emitted as an error event that would
 * otherwise crash the process with a stack trace. Output nobody reads is not a failure:
 * writing stops and the command ends with its own exit code.
 */
function watch(stream: NodeJS.WritableStream): { closed: boolean } {
  let state = watched.get(stream);
  if (!state) {
    const s = { closed: false };
    stream.on('error', () => {
      s.closed = true;
    });
    watched.set(stream, s);
    state = s;
  }
  return state;
}

/**
 * Runs the `warren` command line and returns the exit code. `io` is where it reads
 * and writes; a test or an embedding program may pass its own.
 */
export async function run(argv: readonly string[], io: Io): Promise<ExitCode> {
  const env = io.env;
  const url = env['WARREN_AMQP_URL'] ?? DEFAULT_AMQP_URL;
  let secrets = [...secretsOf(url, env['WARREN_MANAGEMENT_URL'], env['WARREN_DB']), ...[env['WARREN_AMQP_PASSWORD'], env['WARREN_TLS_PASSPHRASE']].filter((v): v is string => v !== undefined && v.length >= 3)];
  const stdout = watch(io.stdout);
  const stderr = watch(io.stderr);
  const err = (line = '') => {
    if (!stderr.closed && !io.stderr.destroyed) io.stderr.write(`${scrub(line, secrets)}\n`);
  };
  const out = (line = '') => {
    if (!stdout.closed && !io.stdout.destroyed) io.stdout.write(`${line}\n`);
  };

  let model: amqp.ChannelModel | undefined;
  const controller = new AbortController();
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      err('Stopping at once. Unacknowledged messages go back to their queues; nothing is lost.');
      process.exit(EXIT.interrupted);
    }
    err(`${signal}: finishing the message under way and putting back the rest (again to quit at once; nothing is lost either way).`);
    controller.abort();
  };
  try {
    const words = positionalsOf(argv, allFlags());
    if (argv.includes('--version') || argv.includes('-V')) {
      out(version());
      return EXIT.ok;
    }
    if (words[0] === 'help') {
      const { command, group } = findCommand(words.slice(1));
      if (command) out(commandHelp(command));
      else if (group) out(groupHelp(group, COMMANDS));
      else if (words.length > 1) throw new UsageError(`Unknown command \`${words.slice(1).join(' ')}\`. Run \`warren --help\` for the list.`);
      else out(mainHelp(COMMANDS, version()));
      return EXIT.ok;
    }
    const { command, group } = findCommand(words);
    const wantsHelp = argv.includes('--help') || argv.includes('-h');
    if (!command) {
      if (wantsHelp || words.length === 0) {
        if (group && words.length === 1) out(groupHelp(group, COMMANDS));
        else if (words.length === 0) out(mainHelp(COMMANDS, version()));
        else throw new UsageError(`Unknown command \`${words.join(' ')}\`. Run \`warren --help\` for the list.`);
        return words.length === 0 && !wantsHelp ? EXIT.usage : EXIT.ok;
      }
      if (group) throw new UsageError(`\`warren ${group}\` needs a subcommand: ${COMMANDS.filter((c) => c.path[0] === group).map((c) => c.path[1]).join(', ')}. Run \`warren ${group} --help\`.`);
      throw new UsageError(`Unknown command \`${words[0]}\`. Commands: ${[...new Set(COMMANDS.map((c) => c.path[0]))].join(', ')}. Run \`warren --help\`.`);
    }
    const name = command.path.join(' ');
    const parsed = parseStrict(argv, { ...GLOBAL_FLAGS, ...command.flags }, name);
    if (parsed.values['help'] === true) {
      out(commandHelp(command));
      return EXIT.ok;
    }
    // The command words come first among the positionals; the rest are its arguments.
    const args = parsed.positionals.slice(command.path.length);
    const broker: BrokerSettings = brokerSettings(parsed.values, io, duration(parsed.values, 'connect-timeout') ?? 5000);
    secrets = [...secrets, ...secretsOf(broker.url, broker.managementUrl, str(parsed.values, 'db') ?? env['WARREN_DB']), ...settingSecrets(broker)];
    let topology: Promise<Topology> | undefined;
    let api: ManagementClient | undefined;
    const ctx: CommandContext = {
      io,
      values: parsed.values,
      args,
      json: parsed.values['json'] === true,
      signal: controller.signal,
      broker,
      topology: () => (topology ??= loadTopology(str(parsed.values, 'topology'), io)),
      connection: async () => (model ??= await connect(broker, io.cwd, err)),
      management: () => (api ??= management(broker, err)),
      out,
      err,
      printJson: (value) => out(JSON.stringify(value, null, 2)),
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
    return await command.run(ctx);
  } catch (error) {
    const { message, code } = explain(error);
    err(`warren: ${message}`);
    if (env['WARREN_DEBUG'] && error instanceof Error && error.stack) err(error.stack);
    return code;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (model) await model.close().catch(() => undefined);
  }
}

