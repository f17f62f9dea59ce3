import { Module } from '@nestjs/common';
import { basicAuth, parseUsers } from '../../src/console/index.js';
import { WarrenModule } from '../../src/nest/index.js';
import { WarrenHealthModule } from '../../src/nest/terminus.js';
import { OrdersConfig } from './config.js';
import { Database } from './database.js';
import { BillingHandlers, EmailHandlers } from './handlers.js';
import { MailClient } from './mail.js';
import { OrdersController, OrdersService } from './orders.js';
import { ordersTopology } from './topology.js';

/** Configuration and the database, which WarrenModule's factory injects. */
@Module({
  providers: [{ provide: OrdersConfig, useFactory: () => OrdersConfig.fromEnv() }, Database],
  exports: [OrdersConfig, Database],
})
export class CoreModule {}

@Module({
  imports: [
    CoreModule,
    WarrenModule.forRootAsync({
      imports: [CoreModule],
      inject: [OrdersConfig, Database],
      useFactory: (config: OrdersConfig, db: Database) => ({
        url: config.amqpUrl,
        topology: ordersTopology(config.prefix, config.emailRetry),
        store: db.store, // the idempotency guard, the outbox relay; closed on shutdown
        startWithoutBroker: true,
        console: { authorize: basicAuth(parseUsers(config.consoleUsers, 'ORDERS_CONSOLE_USERS')), challenge: 'Basic realm="orders"' },
      }),
      routes: { metrics: '/metrics', console: '/ops/warren' },
    }),
    WarrenHealthModule.forRoot(), // GET /health/ready, GET /health/live
  ],
  controllers: [OrdersController],
  providers: [OrdersService, MailClient, BillingHandlers, EmailHandlers],
})
export class AppModule {}
