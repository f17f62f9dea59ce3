import type { CanActivate, FactoryProvider, ModuleMetadata, Type } from '@nestjs/common';
import type { ConsumerOptions, IdempotencyGuard } from '../consume/types.js';
import { InvalidOptionError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { ServiceConsoleOptions, ServiceMetricsOptions, ServiceRelayOptions, ServiceSchedulerOptions } from '../service/index.js';
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
   * the transaction as `ctx.tx`. A store from `warren/sqlite` or `warren/postgres` also
   * runs the outbox relay (`outboxRelay`) and, if asked, the retry scheduler, feeds the
   * metrics, the console and the health indicator, and is closed on shutdown (`closeStore`).
   * @default none: handlers have no `ctx.tx`, and one that declares `requiresTx` is refused at start
   */
  store?: GuardSource<Tx>;
  /**
   * Run the store's outbox relay (publishing with the module's publisher) from the
   * application's bootstrap to its shutdown: `true`, or the relay's options.
   * @default true with a store from warren/sqlite or warren/postgres
   */
  outboxRelay?: boolean | ServiceRelayOptions;
  /**
   * Run the store's retry scheduler with the application: `true`, or its options
   * (`ratePerSecond`, `checks`, ...). It sends rows through the module's outbox relay.
   * @default false
   */
  retryScheduler?: boolean | ServiceSchedulerOptions;
  /**
   * Close the store on shutdown, after the consumers drained and the relay and scheduler
   * stopped (a store closed already is left as it is).
   * @default true
   */
  closeStore?: boolean;
  /**
   * Prometheus metrics (`warrenMetrics`, needs prom-client) of the Warren, the store and
   * the scheduler, served at `routes.metrics` (or read from `WARREN_SERVICE`'s `metrics`).
   * @default on when `routes.metrics` is set, else off
   */
  metrics?: boolean | Omit<ServiceMetricsOptions, 'path'>;
  /**
   * The operator console (needs hono and uplot), served at `routes.console`: who may use
   * it (`authorize`, required: `basicAuth(parseUsers(...))`, `tokenAuth(...)`,
   * `trustedHeaderAuth(...)`, `anyOf(...)` from `warren/console`) and its other options.
   * @default none
   */
  console?: Omit<ServiceConsoleOptions, 'path'>;
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
   * Paths the module serves, fixed where the module is declared (Nest registers
   * controllers then, before an async factory runs). They take Nest's global prefix like
   * any controller; the console's links need it excluded (see docs/nest.md).
   * @default none
   */
  routes?: WarrenModuleRoutes;
  /**
   * Make `Warren` and `Publisher` injectable in every module without importing
   * `WarrenModule` there. A global module also runs its start-up hooks before, and its
   * shutdown hooks after, those of every other module (see docs/nest.md).
   * @default true
   */
  isGlobal?: boolean;
}

/** What {@link WarrenModuleExtras.routes} serves. */
export interface WarrenModuleRoutes {
  /** `GET` here answers the Prometheus metrics, e.g. `/metrics`. @default none */
  readonly metrics?: string;
  /** The console, mounted here and below, e.g. `/ops/warren` (its `authorize` is in the options' `console`). @default none */
  readonly console?: string;
  /**
   * Nest guards run before the console (the application's own sign-in), on top of its
   * `authorize`.
   * @default []
   */
  readonly consoleGuards?: ReadonlyArray<Type<CanActivate> | CanActivate>;
}

/** Checks `routes` where the module is declared: each a path such as `/metrics`. */
export function checkRoutes(routes: WarrenModuleRoutes | undefined): WarrenModuleRoutes | undefined {
  if (routes === undefined) return undefined;
  if (typeof routes !== 'object' || routes === null) throw new InvalidOptionError('routes', "expected { metrics?, console?, consoleGuards? }", "Example: routes: { metrics: '/metrics', console: '/ops/warren' }");
  for (const key of ['metrics', 'console'] as const) {
    const p = routes[key];
    if (p !== undefined && (typeof p !== 'string' || !/^\/[A-Za-z0-9._~\-/]*[A-Za-z0-9._~-]$/.test(p))) throw new InvalidOptionError(`routes.${key}`, `${JSON.stringify(p)} is not a path such as ${key === 'metrics' ? '/metrics' : '/ops/warren'}`);
  }
  if (routes.consoleGuards !== undefined && !Array.isArray(routes.consoleGuards)) throw new InvalidOptionError('routes.consoleGuards', 'expected an array of guards (classes or instances)');
  if (routes.consoleGuards !== undefined && routes.console === undefined) throw new InvalidOptionError('routes.consoleGuards', 'guards a console that is not mounted', "Set routes.console too, e.g. '/ops/warren'.");
  return routes;
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
  for (const option of ['outboxRelay', 'retryScheduler', 'metrics'] as const) {
    const v = options[option];
    if (v !== undefined && typeof v !== 'boolean' && (typeof v !== 'object' || v === null)) throw new InvalidOptionError(option, 'expected true, false or an object of options');
  }
  if (options.closeStore !== undefined && typeof options.closeStore !== 'boolean') throw new InvalidOptionError('closeStore', 'expected true or false');
  if (options.console !== undefined && (typeof options.console !== 'object' || options.console === null || typeof options.console.authorize !== 'function')) {
    throw new InvalidOptionError('console.authorize', 'is required', "Who may use the console: basicAuth(parseUsers(text)), tokenAuth({ operator: token }), trustedHeaderAuth({ userHeader }) or anyOf(...) from 'warren/console'.");
  }
  if (options.store !== undefined && typeof (options.store as Partial<GuardSource<Tx>> | null)?.idempotency !== 'function') {
    throw new InvalidOptionError('store', 'expected a store with idempotency()', "Pass what sqliteStore() (warren/sqlite) or postgresStore() (warren/postgres) returns.");
  }
  return options;
}
