import { Controller, Get, Inject } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { WarrenHealthIndicator } from '../../src/nest/terminus.js';
import { ShopDatabase } from './database.js';

/** GET /health: 200 while warren and the database are ready, 503 with the reasons when not. */
@Controller('health')
export class HealthController {
  constructor(
    @Inject(HealthCheckService) private readonly health: HealthCheckService,
    @Inject(WarrenHealthIndicator) private readonly warren: WarrenHealthIndicator,
    @Inject(ShopDatabase) private readonly db: ShopDatabase,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.warren.isHealthy('rabbitmq', { include: [this.db.store] })]);
  }
}
