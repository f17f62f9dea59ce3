/**
 * The `@nestjs/terminus` health indicator: `import { WarrenHealthIndicator } from
 * 'warren/nest/terminus'`. Apart from `warren/nest` so an application without terminus
 * never loads it.
 */
import { Controller, Get, Inject, Injectable, Module, Optional, type DynamicModule, type Type } from '@nestjs/common';
import { HealthCheck, HealthCheckService, HealthIndicatorService, TerminusModule, type HealthCheckResult, type HealthIndicatorResult } from '@nestjs/terminus';
import { InvalidOptionError } from '../errors.js';
import { healthOf, type HealthInput, type HealthReason } from '../health/index.js';
import type { WarrenService } from '../service/index.js';
import { Warren } from '../warren.js';
import { WARREN_SERVICE } from './http.js';

/** Options of {@link WarrenHealthIndicator.isHealthy}. */
export interface WarrenHealthOptions {
  /**
   * Which question the indicator answers. `ready`: down while a connection is down, the
   * broker blocks publishing, the topology failed to declare or a consumer is not
   * attached (for a readiness probe, or a single health endpoint). `live`: down only when
   * something reports `fails: 'live'`, which warren's own parts never do (for a liveness
   * probe: restarting does not bring a broker back). See docs/health.md.
   * @default 'ready'
   */
  probe?: 'ready' | 'live';
  /**
   * More to check with the Warren, anything `healthOf` takes: a store, an outbox relay,
   * a retry scheduler, `relayHealth(relay, { maxLagMs })`, a check of your own. The
   * module's own store, relay and scheduler are checked without being named here.
   * @default []
   */
  include?: readonly HealthInput[];
}

/** What the indicator reports under its key, up or down. */
export type WarrenHealthDetails = {
  readonly ready: boolean;
  readonly live: boolean;
  readonly reasons: readonly HealthReason[];
};

/**
 * `warren.health()` as a terminus indicator (terminus 11's `HealthIndicatorService`).
 * Add it to the providers of the module whose controller runs the checks; that module
 * imports `TerminusModule`, and `WarrenModule` is global (or imported there too).
 *
 * @example
 * ```ts
 * @Controller('health')
 * export class HealthController {
 *   constructor(
 *     @Inject(HealthCheckService) private readonly health: HealthCheckService,
 *     @Inject(WarrenHealthIndicator) private readonly warren: WarrenHealthIndicator,
 *   ) {}
 *
 *   @Get()
 *   @HealthCheck()
 *   check() {
 *     return this.health.check([() => this.warren.isHealthy('rabbitmq')]);
 *   }
 * }
 * // 200 { status: 'ok', info: { rabbitmq: { status: 'up', ready: true, live: true, reasons: [] } }, ... }
 * // 503 { status: 'error', error: { rabbitmq: { status: 'down', ready: false, reasons: [{ component: 'connection', ... }] } }, ... }
 * ```
 */
@Injectable()
export class WarrenHealthIndicator {
  constructor(
    @Inject(Warren) private readonly warren: Warren,
    @Inject(HealthIndicatorService) private readonly indicator: HealthIndicatorService,
    @Optional() @Inject(WARREN_SERVICE) private readonly service?: WarrenService,
  ) {}

  /**
   * Up when the probe's answer is yes; either way with `ready`, `live` and the reasons.
   * It checks the Warren and what the module runs (its store, outbox relay and retry
   * scheduler), and `include`.
   */
  async isHealthy<const Key extends string = 'warren'>(key: Key = 'warren' as Key, options: WarrenHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const session = this.indicator.check(key);
    const service = this.service;
    // What the module checks already is not checked twice.
    const more = (options.include ?? []).filter((input) => input !== this.warren && (service === undefined || (input !== service.store && input !== service.relay && input !== service.scheduler)));
    const report = await healthOf(service === undefined ? [this.warren, ...more] : [service, ...more]);
    const details: WarrenHealthDetails = { ready: report.ready, live: report.live, reasons: report.reasons };
    return report[options.probe ?? 'ready'] ? session.up(details) : session.down(details);
  }
}

/** Options of {@link WarrenHealthModule.forRoot}. */
export interface WarrenHealthModuleOptions {
  /**
   * Where the probes are: `GET <path>/ready` (readiness) and `GET <path>/live` (liveness).
   * @default 'health'
   */
  path?: string;
  /**
   * The key the indicator reports under in terminus's answer.
   * @default 'warren'
   */
  key?: string;
  /** More to check beside the module's own parts (see {@link WarrenHealthOptions.include}). @default [] */
  include?: readonly HealthInput[];
}

/**
 * Readiness and liveness through `@nestjs/terminus`, with no controller of your own:
 * `GET /health/ready` is 200 while the Warren, its store, its outbox relay and its retry
 * scheduler are ready and 503 with the reasons when not (the broker down, a consumer not
 * attached, the relay behind); `GET /health/live` fails only for what a restart would
 * fix, which warren's parts never report. Import it beside `WarrenModule`.
 *
 * @example
 * ```ts
 * @Module({ imports: [WarrenModule.forRoot({ url, topology }), WarrenHealthModule.forRoot()] })
 * export class AppModule {}
 * // GET /health/ready → 503 { status: 'error', error: { warren: { status: 'down', ready: false, reasons: [...] } } }
 * ```
 */
@Module({})
export class WarrenHealthModule {
  /** The module, with the indicator's options (names, what counts as down). */
  static forRoot(options: WarrenHealthModuleOptions = {}): DynamicModule {
    if (typeof options !== 'object' || options === null) throw new InvalidOptionError('WarrenHealthModule options', 'expected { path?, key?, include? }');
    const path = options.path ?? 'health';
    if (typeof path !== 'string' || !/^\/?[A-Za-z0-9._~\-/]*$/.test(path)) throw new InvalidOptionError('path', `${JSON.stringify(path)} is not a path such as 'health'`);
    const key = options.key ?? 'warren';
    if (typeof key !== 'string' || key === '') throw new InvalidOptionError('key', 'expected a non-empty name');
    const include = options.include ?? [];
    if (!Array.isArray(include)) throw new InvalidOptionError('include', 'expected an array of what healthOf takes');
    return { module: WarrenHealthModule, imports: [TerminusModule], controllers: [healthController(path, key, include)], providers: [WarrenHealthIndicator], exports: [WarrenHealthIndicator] };
  }
}

function healthController(path: string, key: string, include: readonly HealthInput[]): Type<unknown> {
  @Controller(path)
  class WarrenHealthController {
    constructor(
      @Inject(HealthCheckService) private readonly health: HealthCheckService,
      @Inject(WarrenHealthIndicator) private readonly warren: WarrenHealthIndicator,
    ) {}

    @Get('ready')
    @HealthCheck()
    ready(): Promise<HealthCheckResult> {
      return this.health.check([() => this.warren.isHealthy(key, { include })]);
    }

    @Get('live')
    @HealthCheck()
    live(): Promise<HealthCheckResult> {
      return this.health.check([() => this.warren.isHealthy(key, { probe: 'live', include })]);
    }
  }
  return WarrenHealthController;
}
