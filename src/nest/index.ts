/**
 * warren for NestJS: `import { WarrenModule, WarrenConsumer } from 'warren/nest'`.
 * Loads `@nestjs/common` and `@nestjs/core`; the root `warren` entry never does.
 * The terminus health indicator is in `warren/nest/terminus`. See docs/nest.md.
 */
export { WarrenModule } from './module.js';
export { WarrenConsumer, InjectWarren, InjectPublisher, WARREN_CONSUMER, type WarrenConsumerMetadata, type ConsumerMethodDecorator, type TransactionalContext } from './decorators.js';
export { WARREN_MODULE_OPTIONS } from './lifecycle.js';
export { WARREN_MODULE_ROUTES } from './module.js';
export { WARREN_SERVICE } from './http.js';
export { ConsumerHandlerError } from './errors.js';
export { nestLogger } from './logger.js';
export type { WarrenModuleOptions, WarrenModuleAsyncOptions, WarrenModuleExtras, WarrenModuleRoutes, GuardSource } from './options.js';
export type { WarrenService } from '../service/index.js';
