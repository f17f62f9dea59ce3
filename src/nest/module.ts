import { Module, type DynamicModule, type ModuleMetadata, type Provider } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { InvalidOptionError } from '../errors.js';
import { Publisher } from '../publish/publisher.js';
import { Warren } from '../warren.js';
import { WARREN_MODULE_OPTIONS, WarrenLifecycle } from './lifecycle.js';
import { nestLogger } from './logger.js';
import { consoleController, metricsController, WARREN_SERVICE } from './http.js';
import { checkModuleOptions, checkRoutes, type WarrenModuleAsyncOptions, type WarrenModuleExtras, type WarrenModuleOptions, type WarrenModuleRoutes } from './options.js';
import { moduleService } from './service.js';

/** Token of the module's `routes` (as declared). */
export const WARREN_MODULE_ROUTES = Symbol('WARREN_MODULE_ROUTES');

/**
 * warren in a Nest application: a `Warren` and its `Publisher` to inject, a consumer
 * started for each `@WarrenConsumer` handler, all of it drained on `app.close()` (and on
 * a signal with `app.enableShutdownHooks()`). Import it once, in the root module.
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [WarrenModule.forRoot({ url: process.env.AMQP_URL, topology })],
 *   providers: [BillingHandlers, OrdersService],
 * })
 * export class AppModule {}
 * ```
 */
@Module({})
export class WarrenModule {
  /** The module with options known up front. Checks them now: a mistake fails where the module is declared. */
  static forRoot<Tx = unknown>(options: WarrenModuleOptions<Tx> & WarrenModuleExtras): DynamicModule {
    const { isGlobal, routes, ...rest } = options;
    return build(isGlobal, checkRoutes(routes), [{ provide: WARREN_MODULE_OPTIONS, useValue: checkModuleOptions(rest) }], []);
  }

  /** The module with options a factory makes, from injected providers (configuration, a store). */
  static forRootAsync<Tx = unknown>(options: WarrenModuleAsyncOptions<Tx>): DynamicModule {
    if (typeof options !== 'object' || options === null || typeof options.useFactory !== 'function') {
      throw new InvalidOptionError('useFactory', 'WarrenModule.forRootAsync needs a factory that returns the options', 'Example: WarrenModule.forRootAsync({ inject: [ConfigService], useFactory: (config: ConfigService) => ({ url: config.get(\'AMQP_URL\'), topology }) })');
    }
    const factory = options.useFactory as (...args: unknown[]) => WarrenModuleOptions<Tx> | Promise<WarrenModuleOptions<Tx>>;
    const provider: Provider = {
      provide: WARREN_MODULE_OPTIONS,
      useFactory: async (...args: unknown[]) => checkModuleOptions(await factory(...args)),
      inject: options.inject ?? [],
    };
    return build(options.isGlobal, checkRoutes(options.routes), [provider, ...(options.providers ?? [])], options.imports ?? []);
  }
}

function build(isGlobal: boolean | undefined, routes: WarrenModuleRoutes | undefined, providers: Provider[], imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
  if (isGlobal !== undefined && typeof isGlobal !== 'boolean') throw new InvalidOptionError('isGlobal', 'expected true or false');
  const controllers = [
    ...(routes?.metrics === undefined ? [] : [metricsController(routes.metrics)]),
    ...(routes?.console === undefined ? [] : [consoleController(routes.console, routes.consoleGuards ?? [])]),
  ];
  return {
    module: WarrenModule,
    global: isGlobal ?? true,
    imports: [DiscoveryModule, ...imports],
    controllers,
    providers: [
      { provide: WARREN_MODULE_ROUTES, useValue: routes },
      ...providers,
      {
        provide: Warren,
        useFactory: (options: WarrenModuleOptions<unknown>) => Warren.create({ ...options, logger: options.logger ?? nestLogger() }),
        inject: [WARREN_MODULE_OPTIONS],
      },
      { provide: Publisher, useFactory: (warren: Warren) => warren.publisher, inject: [Warren] },
      {
        provide: WARREN_SERVICE,
        useFactory: (options: WarrenModuleOptions<unknown>, warren: Warren, declared: WarrenModuleRoutes | undefined) => moduleService(options, warren, declared),
        inject: [WARREN_MODULE_OPTIONS, Warren, WARREN_MODULE_ROUTES],
      },
      WarrenLifecycle,
    ],
    exports: [Warren, Publisher, WARREN_SERVICE],
  };
}
