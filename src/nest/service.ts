import { InvalidOptionError } from '../errors.js';
import { warrenService, type ServiceOptions, type WarrenService } from '../service/index.js';
import type { Store } from '../store/index.js';
import type { Warren } from '../warren.js';
import type { WarrenModuleOptions, WarrenModuleRoutes } from './options.js';

function isStore(value: unknown): value is Store<unknown> {
  const s = value as Partial<Store<unknown>> | null | undefined;
  return typeof s === 'object' && s !== null && typeof s.relay === 'function' && typeof s.close === 'function' && typeof s.retryTable === 'object';
}

/**
 * The module's {@link WarrenService}: the relay, scheduler, metrics and console its
 * options ask for, on its Warren and store; started and stopped by the module's lifecycle.
 */
export function moduleService(options: WarrenModuleOptions<unknown>, warren: Warren, routes: WarrenModuleRoutes | undefined): WarrenService {
  const store = isStore(options.store) ? options.store : undefined;
  for (const option of ['retryScheduler', 'outboxRelay'] as const) {
    if (options[option] !== undefined && options[option] !== false && store === undefined) {
      throw new InvalidOptionError(option, 'needs a store from warren/sqlite or warren/postgres', 'Pass it as `store`: the one the outbox rows and the retry table are in.');
    }
  }
  if (routes?.console !== undefined && options.console === undefined) {
    throw new InvalidOptionError('console', `routes.console mounts the console at ${routes.console}, but the options have no \`console\``, "Give who may use it: console: { authorize: basicAuth(parseUsers(text)) } (from 'warren/console').");
  }
  if (options.console !== undefined && routes?.console === undefined) {
    throw new InvalidOptionError('routes.console', 'the options have a `console` but no path to serve it at', "Set routes: { console: '/ops/warren' } where the module is declared (forRoot or forRootAsync).");
  }
  if (routes?.metrics !== undefined && options.metrics === false) throw new InvalidOptionError('metrics', `is false, but routes.metrics serves them at ${routes.metrics}`);
  const metrics = options.metrics ?? routes?.metrics !== undefined;
  const service: ServiceOptions = {
    warren,
    health: false,
    outboxRelay: options.outboxRelay ?? store !== undefined,
    ...(store === undefined ? {} : { store }),
    ...(options.retryScheduler === undefined ? {} : { retryScheduler: options.retryScheduler }),
    ...(options.closeStore === undefined ? {} : { closeStore: options.closeStore }),
    ...(metrics === false ? {} : { metrics: { ...(metrics === true ? {} : metrics), ...(routes?.metrics === undefined ? {} : { path: routes.metrics }) } }),
    ...(options.console === undefined || routes?.console === undefined ? {} : { console: { ...options.console, path: routes.console } }),
  };
  return warrenService(service);
}
