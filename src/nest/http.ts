import type { IncomingMessage, ServerResponse } from 'node:http';
import { All, Controller, Get, Inject, Req, Res, UseGuards, type CanActivate, type Type } from '@nestjs/common';
import { nodeListener } from '../console/node.js';
import type { WarrenService } from '../service/index.js';

/** Token of the module's {@link WarrenService}: the relay, scheduler, metrics and console it runs. */
export const WARREN_SERVICE = Symbol('WARREN_SERVICE');

function unavailable(res: ServerResponse, what: string): void {
  res.writeHead(503, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' }).end(`starting: ${what} until the application has bootstrapped\n`);
}

/**
 * A controller answering `GET <path>` with the module's Prometheus metrics. Made per
 * path, since a controller's path is fixed where its class is declared. Express platform.
 */
export function metricsController(path: string): Type<unknown> {
  @Controller(path)
  class WarrenMetricsController {
    constructor(@Inject(WARREN_SERVICE) private readonly service: WarrenService) {}

    @Get()
    async metrics(@Res() res: ServerResponse): Promise<void> {
      const metrics = this.service.metrics;
      if (metrics === undefined) return unavailable(res, 'no metrics');
      try {
        const text = await metrics.registry.metrics();
        res.writeHead(200, { 'content-type': metrics.registry.contentType, 'cache-control': 'no-store' }).end(text);
      } catch (error) {
        res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' }).end(`collecting the metrics failed: ${error instanceof Error ? error.message : String(error)}\n`);
      }
    }
  }
  return WarrenMetricsController;
}

/**
 * A controller that hands every request at `<path>` and below to the module's console
 * (whose own `authorize` signs people in), behind the application's Nest guards if any.
 * Express platform: its body parsers' work is put back together for the console.
 */
export function consoleController(path: string, guards: ReadonlyArray<Type<CanActivate> | CanActivate>): Type<unknown> {
  @Controller(path)
  class WarrenConsoleController {
    private listener: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;

    constructor(@Inject(WARREN_SERVICE) private readonly service: WarrenService) {}

    @All()
    root(@Req() req: IncomingMessage, @Res() res: ServerResponse): void {
      this.serve(req, res);
    }

    @All('*path')
    page(@Req() req: IncomingMessage, @Res() res: ServerResponse): void {
      this.serve(req, res);
    }

    private serve(req: IncomingMessage, res: ServerResponse): void {
      const ops = this.service.console;
      if (ops === undefined) return unavailable(res, 'no console');
      this.listener ??= nodeListener(ops.fetch);
      this.listener(req, res);
    }
  }
  if (guards.length > 0) UseGuards(...guards)(WarrenConsoleController);
  return WarrenConsoleController;
}
