import type { FactoryProvider, ModuleMetadata } from '@nestjs/common';
import type { ConsumerOptions, IdempotencyGuard } from '../consume/types.js';
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { WarrenOptions } from '../warren.js';
import { suggestion } from './names.js';

/**
 * What the module needs of a store: its idempotency guard. Any store from
 * `warren/sqlite` or `warren/postgres` fits.
 */
export interface GuardSource<Tx> {
  /** The guard each delivery's transaction runs under. */
  idempotency(): IdempotencyGuard<Tx>;
}

/**
 * Options of {@link WarrenModule.forRoot}: those of `Warren.connect` (`url`, `topology`,
 * `publisher`, `management`, `connectionName`, `reconnect`, ...), and what the module adds.
 */
export interface WarrenModuleOptions<Tx = unknown> extends WarrenOptions {
  /**
   * The store whose idempotency guard every consumer runs under: each delivery runs in a
   * transaction of this store, with its `(messageId, consumer)` row, and the handler gets
   * the transaction as `ctx.tx`. The module does not close the store: you opened it.
   * @default none: handlers get `ctx.tx` undefined
   */
  store?: GuardSource<Tx>;
  /**
   * The consumers of the topology this application handles; each needs one handler
   * (`@WarrenConsumer(name)`). Leave out the consumers another application runs; `[]`
   * for an application that only publishes.
   * @default every consumer the topology declares
   */
  handle?: readonly string[];
  /**
   * Options for every consumer, under those of the decorator and of `consumerOptions`.
   * @default {}
   */
  consumerDefaults?: ConsumerOptions<never, Tx>;
  /**
   * Options per consumer, over those of the decorator: what depends on configuration or
   * on other providers (a retry table, a concurrency read from the environment).
   *
   * @example
   * consumerOptions: { shipping: { concurrency: 4, retryTable: { table: store.retryTable } } }
   * @default {}
   */
  consumerOptions?: Readonly<Record<string, ConsumerOptions<never, Tx>>>;
  /**
   * Where warren logs. A Nest application's own logger (`Logger` of `@nestjs/common`,
   * context `Warren`) unless set; `silentLogger` from `warren` drops everything.
   * @default nestLogger('Warren')
   */
  logger?: Logger;
}

/** What `forRoot` takes besides the options: whether the module is global. */
export interface WarrenModuleExtras {
  /**
   * Make `Warren` and `Publisher` injectable in every module without importing
   * `WarrenModule` there. A global module also runs its start-up hooks before, and its
   * shutdown hooks after, those of every other module (see docs/nest.md).
   * @default true
   */
  isGlobal?: boolean;
}

/**
 * Options of {@link WarrenModule.forRootAsync}: a factory that may inject providers
 * (configuration, a store) and return the options, possibly through a promise.
 *
 * @example
 * WarrenModule.forRootAsync({
 *   imports: [ConfigModule],
 *   inject: [ConfigService, STORE],
 *   useFactory: (config: ConfigService, store: Store<Database>) => ({ url: config.get('AMQP_URL'), topology, store }),
 * })
 */
export interface WarrenModuleAsyncOptions<Tx = unknown> extends WarrenModuleExtras, Pick<ModuleMetadata, 'imports'> {
  /** Providers the factory gets, in this order. @default [] */
  inject?: FactoryProvider['inject'];
  /** Returns the module's options, given the providers named in `inject`, in order. */
  useFactory: (...args: never[]) => WarrenModuleOptions<Tx> | Promise<WarrenModuleOptions<Tx>>;
  /** Further providers for the module's scope, e.g. one the factory injects. @default [] */
  providers?: ModuleMetadata['providers'];
}

/**
 * Checks what the module adds to warren's own options (warren checks the rest when it
 * connects), with errors naming the option and what to do.
 */
export function checkModuleOptions<Tx>(options: WarrenModuleOptions<Tx>): WarrenModuleOptions<Tx> {
  if (typeof options !== 'object' || options === null) throw new InvalidOptionError('WarrenModule options', `expected an object, got ${options === null ? 'null' : typeof options}`, 'Return { url, topology } from forRootAsync\'s useFactory.');
  const topology = options.topology as Partial<WarrenOptions['topology']> | undefined;
  if (typeof topology !== 'object' || topology === null || typeof topology.consumer !== 'function' || !(topology.consumers instanceof Map)) {
    throw new InvalidOptionError('topology', 'expected what defineTopology() returns', "Declare it once with defineTopology({ exchange, consumers }) from 'warren' and pass it here.");
  }
  const declared = [...topology.consumers.keys()];
  const known = (name: string, option: string) => {
    if (!topology.consumers?.has(name)) throw new InvalidOptionError(option, `'${name}' is not a consumer of the topology`, `${suggestion(name, declared)}The topology declares: ${declared.join(', ')}.`);
  };
  if (options.handle !== undefined) {
    if (!Array.isArray(options.handle)) throw new InvalidOptionError('handle', 'expected an array of consumer names', "Example: handle: ['billing']");
    options.handle.forEach((name, i) => known(name, `handle[${i}]`));
  }
  if (options.consumerOptions !== undefined) {
    if (typeof options.consumerOptions !== 'object' || options.consumerOptions === null) throw new InvalidOptionError('consumerOptions', 'expected an object keyed by consumer name');
    for (const name of Object.keys(options.consumerOptions)) known(name, `consumerOptions.${name}`);
  }
  if (options.store !== undefined && typeof (options.store as Partial<GuardSource<Tx>> | null)?.idempotency !== 'function') {
    throw new InvalidOptionError('store', 'expected a store with idempotency()', "Pass what sqliteStore() (warren/sqlite) or postgresStore() (warren/postgres) returns.");
  }
  return options;
}
