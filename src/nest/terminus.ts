/**
 * The `@nestjs/terminus` health indicator: `import { WarrenHealthIndicator } from
 * 'warren/nest/terminus'`. Apart from `warren/nest` so an application without terminus
 * never loads it.
 */
import { Inject, Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { healthOf, type HealthInput, type HealthReason } from '../health/index.js';
import { Warren } from '../warren.js';

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
   * a retry scheduler, `relayHealth(relay, { maxLagMs })`, a check of your own.
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
  ) {}

  /** Up when the probe's answer is yes; either way with `ready`, `live` and the reasons. */
  async isHealthy<const Key extends string = 'warren'>(key: Key = 'warren' as Key, options: WarrenHealthOptions = {}): Promise<HealthIndicatorResult<Key>> {
    const session = this.indicator.check(key);
    const report = await healthOf([this.warren, ...(options.include ?? [])]);
    const details: WarrenHealthDetails = { ready: report.ready, live: report.live, reasons: report.reasons };
    return report[options.probe ?? 'ready'] ? session.up(details) : session.down(details);
  }
}
