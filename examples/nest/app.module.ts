import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { WarrenModule } from '../../src/nest/index.js';
import { WarrenHealthIndicator } from '../../src/nest/terminus.js';
import { BillingHandlers } from './billing.handlers.js';
import { ShopConfig } from './config.js';
import { ShopDatabase } from './database.js';
import { HealthController } from './health.controller.js';
import { OrdersController, OrdersService } from './orders.js';
import { PaymentGateway } from './payments.js';
import { shopTopology } from './topology.js';

/** Configuration and the database, which the Warren module's factory injects. */
@Module({
  providers: [{ provide: ShopConfig, useFactory: () => ShopConfig.fromEnv() }, ShopDatabase],
  exports: [ShopConfig, ShopDatabase],
})
export class ShopCoreModule {}

@Module({
  imports: [
    ShopCoreModule,
    // Global (the default): Warren and Publisher can be injected in any module.
    WarrenModule.forRootAsync({
      imports: [ShopCoreModule],
      inject: [ShopConfig, ShopDatabase],
      useFactory: (config: ShopConfig, db: ShopDatabase) => ({
        url: config.amqpUrl,
        topology: shopTopology(config.prefix),
        store: db.store, // every handler runs under its idempotency guard and gets ctx.tx
        connectionName: `shop ${config.prefix}`,
        reconnect: { initialDelayMs: config.reconnectMs, maxDelayMs: config.reconnectMs * 10 },
      }),
    }),
    TerminusModule,
  ],
  controllers: [OrdersController, HealthController],
  providers: [PaymentGateway, BillingHandlers, OrdersService, WarrenHealthIndicator],
})
export class AppModule {}
