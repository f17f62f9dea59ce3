import { WarrenError } from '../errors.js';

/**
 * The module found a mismatch between the topology and the handlers at start-up: a
 * consumer with no handler, a handler naming a consumer the topology does not declare,
 * two handlers for one consumer, or a handler on a provider that is not a singleton.
 * Every problem found is listed, each with what to do.
 */
export class ConsumerHandlerError extends WarrenError {
  /** One sentence per problem. */
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    const list = problems.length === 1 ? ` ${problems[0] ?? ''}` : `\n${problems.map((p) => `- ${p}`).join('\n')}`;
    super('CONSUMER_HANDLERS', `WarrenModule cannot start its consumers:${list}`);
    this.problems = Object.freeze([...problems]);
  }
}
