/**
 * The shop as a process: `SHOP_AMQP_URL=... SHOP_DATABASE_URL=... node --import tsx examples/nest/main.ts`.
 * SIGTERM (or SIGINT) drains the consumers before the process ends: handlers running
 * finish and are acked, messages not started go back to their queues.
 */
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

const app = await NestFactory.create(AppModule);
app.enableShutdownHooks();
await app.listen(Number(process.env['PORT'] ?? 3000), '127.0.0.1');
console.log(`shop listening on ${await app.getUrl()}`);
