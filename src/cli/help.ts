import { GLOBAL_FLAGS, type FlagSpecs } from './args.js';
import type { Command } from './command.js';

const EXIT_CODES = [
  '  0    done; every check passed',
  '  1    a check failed: something is parked, a work queue has messages and no consumer,',
  '       a queue is missing or differs from the declaration, a consumer is paused by hand',
  '       or its shared breaker is open (with --db); or the command could not do',
  '       all it was asked (a message not found, a replay that could not publish, a',
  "       database without warren's tables)",
  '  2    usage error: a bad flag or value, an unknown consumer or dependency, no topology',
  '       module, no database',
  '  3    the broker or the database is unreachable or refused the credentials',
  '  130  stopped by Ctrl-C or SIGTERM, after settling what was under way (nothing lost)',
];

const ENVIRONMENT = [
  '  WARREN_TOPOLOGY         topology module, as --topology',
  '  WARREN_AMQP_URL         AMQP URL, or a cluster\'s nodes separated by commas, as --url',
  '  WARREN_AMQP_USERNAME    AMQP user, as --username',
  '  WARREN_AMQP_PASSWORD    AMQP password (the default of --password-env)',
  '  WARREN_TLS_CA, WARREN_TLS_CERT, WARREN_TLS_KEY, WARREN_TLS_SERVERNAME',
  '                          as --tls-ca, --tls-cert, --tls-key, --tls-servername',
  '  WARREN_TLS_PASSPHRASE   passphrase of the TLS key (the default of --tls-passphrase-env)',
  '  WARREN_MANAGEMENT_URL   management API URL, or a cluster\'s nodes separated by commas, as --management-url',
  '  WARREN_DB               the database of the retry table, the outbox and the archive, as --db',
  '  WARREN_ACTOR            who makes retry-table changes, as --actor',
  '  Passwords (in these URLs, and the ones read from the environment) are never printed.',
];

/** Flags for every command that concern only the broker and the topology. */
const BROKER_FLAGS = new Set(['topology', 'url', 'management-url', 'username', 'password-env', 'tls-ca', 'tls-cert', 'tls-key', 'tls-passphrase-env', 'tls-servername', 'tls-insecure']);

/**
 * The flags for every command that matter to `c`: a command that takes --db works on the
 * database alone, so its help leaves out the topology and broker flags.
 */
function globalFlagsOf(c: Command): FlagSpecs {
  // The parked commands and `warren archive` read the broker and the topology, with --db or not.
  if (!('db' in c.flags) || 'listen' in c.flags || ['status', 'parked', 'archive'].includes(c.path[0] ?? '')) return GLOBAL_FLAGS;
  return Object.fromEntries(Object.entries(GLOBAL_FLAGS).filter(([name]) => !BROKER_FLAGS.has(name)));
}

function flagLines(flags: FlagSpecs): string[] {
  const entries = Object.values(flags);
  const width = Math.max(...entries.map((f) => f.label.length));
  return entries.map((f) => `  ${f.label.padEnd(width)}  ${f.help}`);
}

/** `warren --help`. */
export function mainHelp(commands: readonly Command[], version: string): string {
  const width = Math.max(...commands.map((c) => `${c.path.join(' ')} ${c.usage}`.trim().length));
  return [
    `warren ${version}: look after RabbitMQ consumers that fail well`,
    '',
    'Usage: warren COMMAND [ARGS] [FLAGS]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${`${c.path.join(' ')} ${c.usage}`.trim().padEnd(width)}  ${c.summary}`),
    '  help [COMMAND]'.padEnd(width + 2) + '  help for a command',
    '',
    'Flags for every command:',
    ...flagLines(GLOBAL_FLAGS),
    '',
    'The topology module is the one the application uses: a .js or .mjs file exporting',
    '`topology` (or a default export), made with defineTopology() or a plain object with',
    "`consumers`. A .ts module loads when the CLI runs under tsx (NODE_OPTIONS='--import tsx').",
    '',
    "The retry and outbox commands work on the application's database alone (--db or",
    'WARREN_DB: sqlite:PATH or postgres://…); they need neither the topology nor the broker.',
    'With --db, `warren status` adds the outbox and the retry table to its report.',
    '',
    'Environment:',
    ...ENVIRONMENT,
    '',
    'Exit codes:',
    ...EXIT_CODES,
    '',
    'Examples:',
    '  export WARREN_TOPOLOGY=dist/topology.js WARREN_AMQP_URL=amqp://app:secret@rabbit:5672',
    '  warren status',
    '  warren parked list billing --group',
    '  warren parked show billing 0190a1b2-7c3d-7000-8000-00000000002a',
    '  warren parked replay billing --error-class HttpError --rate 50',
    '  warren topology verify',
    '  export WARREN_DB=postgres://ops:secret@db.internal:5432/shop',
    '  warren retry pause --dependency carrier --actor alice',
    '  warren retry resume --dependency carrier --due-now',
    '',
    'Run `warren COMMAND --help` for the flags and examples of each command.',
  ].join('\n');
}

/** `warren parked --help` and the like: the commands under a group word. */
export function groupHelp(group: string, commands: readonly Command[]): string {
  const mine = commands.filter((c) => c.path[0] === group);
  const width = Math.max(...mine.map((c) => `${c.path.join(' ')} ${c.usage}`.trim().length));
  return [
    `Usage: warren ${group} SUBCOMMAND [ARGS] [FLAGS]`,
    '',
    ...mine.map((c) => `  ${`${c.path.join(' ')} ${c.usage}`.trim().padEnd(width)}  ${c.summary}`),
    '',
    `Run \`warren ${group} SUBCOMMAND --help\` for its flags and examples.`,
  ].join('\n');
}

/** `warren COMMAND --help`. */
export function commandHelp(c: Command): string {
  const own = Object.keys(c.flags).length ? ['Flags:', ...flagLines(c.flags), ''] : [];
  return [
    `Usage: warren ${c.path.join(' ')}${c.usage ? ` ${c.usage}` : ''} [FLAGS]`,
    '',
    c.description,
    '',
    ...own,
    'Flags for every command:',
    ...flagLines(globalFlagsOf(c)),
    '',
    'Examples:',
    ...c.examples.map((e) => `  ${e}`),
    '',
    'Exit codes:',
    ...EXIT_CODES,
  ].join('\n');
}
