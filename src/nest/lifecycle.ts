import { Inject, Injectable, type BeforeApplicationShutdown, type OnApplicationBootstrap, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { ConsumerOptions, Handler } from '../consume/types.js';
import type { WarrenService } from '../service/index.js';
import { Warren } from '../warren.js';
import { WARREN_SERVICE } from './http.js';
import { ConsumerHandlerError } from './errors.js';
import { findHandlers, matchHandlers, transactionProblems, type FoundHandler } from './handlers.js';
import type { WarrenModuleOptions } from './options.js';

/** Token of the module's options (after the async factory, if any, has run). */
export const WARREN_MODULE_OPTIONS = Symbol('WARREN_MODULE_OPTIONS');

/**
 * Runs the Warren with the application:
 *
 * - `onModuleInit`: finds the handlers and checks them against the topology (no broker
 *   needed for that), then connects and declares the topology, so providers can publish
 *   from their own `onApplicationBootstrap`;
 * - `onApplicationBootstrap`: starts a consumer per handler, once every provider's
 *   `onModuleInit` has run (a database a handler uses is connected by then), then the
 *   outbox relay, the retry scheduler, the metrics and the console the options ask for;
 * - `beforeApplicationShutdown`: drains the consumers: no new deliveries, never-started
 *   messages back in their queues, running handlers finished and acked (within each
 *   consumer's `shutdownTimeoutMs`), then stops the scheduler and the relay; the
 *   publisher stays open for what the rest of the shutdown publishes (an HTTP request
 *   still being answered);
 * - `onApplicationShutdown`: closes the console, the metrics, the publisher and the
 *   connections, and the store last (`closeStore`).
 */
@Injectable()
export class WarrenLifecycle implements OnModuleInit, OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown {
  private handlers = new Map<string, FoundHandler & { handler: Handler<never, never> }>();

  constructor(
    @Inject(WARREN_MODULE_OPTIONS) private readonly options: WarrenModuleOptions<unknown>,
    @Inject(Warren) private readonly warren: Warren,
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
    @Inject(WARREN_SERVICE) private readonly service: WarrenService,
  ) {}

  async onModuleInit(): Promise<void> {
    const wrappers = [...this.discovery.getProviders(), ...this.discovery.getControllers()];
    const found = findHandlers(wrappers, (prototype) => this.scanner.getAllMethodNames(prototype));
    this.handlers = matchHandlers(this.warren.topology, this.options.handle, found);
    // Before connecting: a handler that needs a transaction nobody gives it fails here, not at each delivery.
    const problems = transactionProblems(this.handlers, (name) => this.consumerOptions(name, this.handlers.get(name)?.options ?? {}));
    if (problems.length > 0) throw new ConsumerHandlerError(problems);
    await this.warren.open();
  }

  async onApplicationBootstrap(): Promise<void> {
    for (const [name, found] of this.handlers) {
      await this.warren.consume(name, found.handler as unknown as Handler<unknown, unknown>, this.consumerOptions(name, found.options));
    }
    await this.service.start();
  }

  /** Lowest first: the store's guard, `consumerDefaults`, the decorator's, `consumerOptions[name]`. */
  private consumerOptions(name: string, fromDecorator: ConsumerOptions<never, never>): ConsumerOptions<unknown, unknown> {
    const guard = this.options.store?.idempotency();
    return {
      ...(guard === undefined ? {} : { idempotency: guard }),
      ...this.options.consumerDefaults,
      ...fromDecorator,
      ...this.options.consumerOptions?.[name],
    } as unknown as ConsumerOptions<unknown, unknown>;
  }

  async beforeApplicationShutdown(): Promise<void> {
    await this.service.drain();
  }

  async onApplicationShutdown(): Promise<void> {
    await this.service.close();
  }
}
