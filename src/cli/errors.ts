/** Exit codes of the `warren` command; documented in `warren --help` and docs/cli.md. */
export const EXIT = {
  /** Done; every check passed. */
  ok: 0,
  /** A check failed (something parked, a queue with messages and no consumer, drift), or the command could not do all it was asked. */
  failed: 1,
  /** Usage error: a bad flag or value, an unknown consumer, a topology that cannot be loaded. */
  usage: 2,
  /** The broker could not be reached, or refused the credentials. */
  unreachable: 3,
  /** Stopped by Ctrl-C (SIGINT) or SIGTERM after settling what was under way. */
  interrupted: 130,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** An error the CLI prints as one line (no stack) and exits with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** A usage error (exit 2): the message names the flag or argument. */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = 'UsageError';
  }
}
