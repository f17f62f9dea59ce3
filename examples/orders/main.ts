/**
 * The orders service as a process: `node --import tsx examples/orders/main.ts`, or built
 * with tsc and run with node. Configured from ORDERS_* variables (see config.ts); starts
 * while RabbitMQ is down. SIGTERM drains: running handlers finish, the rest wait in the broker.
 */
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const app = await NestFactory.create(AppModule);
app.enableShutdownHooks();
await app.listen(Number(process.env['PORT'] ?? 3000), '127.0.0.1');
console.log(`orders listening on ${(await app.getUrl()).replace('[::1]', '127.0.0.1')}`);
