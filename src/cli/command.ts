import { createInterface } from 'node:readline';
import type * as amqp from 'amqplib';
import type { ManagementClient } from '../management/client.js';
import type { ConsumerTopology, Topology } from '../topology/declaration.js';
import type { FlagSpecs, ParsedValues } from './args.js';
import type { BrokerSettings, Io } from './context.js';
import { UsageError, type ExitCode } from './errors.js';

/** What a command gets to work with. Connections are opened on first use and closed by the caller. */
export interface CommandContext {
  readonly io: Io;
  readonly values: ParsedValues;
  /** Positional arguments after the command words. */
  readonly args: readonly string[];
  /** `--json` was given. */
  readonly json: boolean;
  /** Aborted on the first Ctrl-C (SIGINT) or SIGTERM. */
  readonly signal: AbortSignal;
  readonly broker: BrokerSettings;
  topology(): Promise<Topology>;
  connection(): Promise<amqp.ChannelModel>;
  management(): ManagementClient;
  /** A line on stdout. */
  out(line?: string): void;
  /** A line on stderr, with secrets masked. */
  err(line?: string): void;
  /** A JSON document on stdout. */
  printJson(value: unknown): void;
}

/** One `warren` command. */
export interface Command {
  /** The words that name it, e.g. `['parked', 'list']`. */
  readonly path: readonly string[];
  /** Positional arguments, for help, e.g. `CONSUMER`. */
  readonly usage: string;
  readonly summary: string;
  /** Paragraphs shown in the command's help. */
  readonly description: string;
  readonly flags: FlagSpecs;
  readonly examples: readonly string[];
  run(ctx: CommandContext): Promise<ExitCode>;
}

/** The consumer named by the first argument; an unknown name lists the known ones (exit 2). */
export async function consumerArg(ctx: CommandContext, command: string): Promise<ConsumerTopology> {
  const topology = await ctx.topology();
  const name = ctx.args[0];
  if (name === undefined) {
    throw new UsageError(`\`warren ${command}\` needs a CONSUMER, one of: ${[...topology.consumers.keys()].join(', ')}.`);
  }
  return topology.consumer(name);
}

/** Rejects positional arguments beyond `max`. */
export function noExtraArgs(ctx: CommandContext, max: number, command: string): void {
  if (ctx.args.length > max) throw new UsageError(`Unexpected argument ${JSON.stringify(ctx.args[max])} for \`warren ${command}\`. See \`warren ${command} --help\`.`);
}

/** Asks a yes/no question on stderr and reads the answer from stdin; anything but y or yes is no. */
export async function ask(ctx: CommandContext, question: string): Promise<boolean> {
  const rl = createInterface({ input: ctx.io.stdin, output: ctx.io.stderr });
  try {
    const answer = await new Promise<string>((resolve) => {
      rl.question(question, resolve);
      rl.once('close', () => resolve(''));
    });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
