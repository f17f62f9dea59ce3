import { Module, type DynamicModule, type ModuleMetadata, type Provider } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { InvalidOptionError } from '../errors.js';
import { Publisher } from '../publish/publisher.js';
import { Warren } from '../warren.js';
import { WARREN_MODULE_OPTIONS, WarrenLifecycle } from './lifecycle.js';
import { nestLogger } from './logger.js';
import { checkModuleOptions, type WarrenModuleAsyncOptions, type WarrenModuleExtras, type WarrenModuleOptions } from './options.js';

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
    const { isGlobal, ...rest } = options;
    return build(isGlobal, [{ provide: WARREN_MODULE_OPTIONS, useValue: checkModuleOptions(rest) }], []);
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
    return build(options.isGlobal, [provider, ...(options.providers ?? [])], options.imports ?? []);
  }
}

function build(isGlobal: boolean | undefined, providers: Provider[], imports: NonNullable<ModuleMetadata['imports']>): DynamicModule {
  if (isGlobal !== undefined && typeof isGlobal !== 'boolean') throw new InvalidOptionError('isGlobal', 'expected true or false');
  return {
    module: WarrenModule,
    global: isGlobal ?? true,
    imports: [DiscoveryModule, ...imports],
    providers: [
      ...providers,
      {
        provide: Warren,
        useFactory: (options: WarrenModuleOptions<unknown>) => Warren.create({ ...options, logger: options.logger ?? nestLogger() }),
        inject: [WARREN_MODULE_OPTIONS],
      },
      { provide: Publisher, useFactory: (warren: Warren) => warren.publisher, inject: [Warren] },
      WarrenLifecycle,
    ],
    exports: [Warren, Publisher],
  };
}
