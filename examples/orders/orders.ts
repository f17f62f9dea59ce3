import { randomUUID } from 'node:crypto';
import { BadRequestException, Body, Controller, Get, HttpCode, Inject, Injectable, NotFoundException, Param, Post } from '@nestjs/common';
import { Database } from './database.js';
import type { OrderPlaced } from './topology.js';

/** What `POST /orders` takes. */
export interface PlaceOrder {
  readonly orderId?: string;
  readonly email: string;
  readonly amountCents: number;
}

/**
 * Places orders: the order row and its `order.placed` event commit in one transaction,
 * the event as an outbox row that the module's relay publishes once the broker has it.
 * Nothing here needs the broker, so orders are taken while it is down.
 */
@Injectable()
export class OrdersService {
  constructor(@Inject(Database) private readonly db: Database) {}

  async place(order: OrderPlaced): Promise<string> {
    return this.db.store.transaction(async (tx) => {
      await tx.query('INSERT INTO orders (order_id, email, amount_cents) VALUES ($1, $2, $3)', [order.orderId, order.email, order.amountCents]);
      return (await this.db.store.outbox.add(tx, 'order.placed', order)).messageId;
    });
  }

  async find(orderId: string): Promise<{ orderId: string; status: 'placed' | 'charged' } | undefined> {
    const { rows } = await this.db.store.transaction((tx) => tx.query<{ charged: boolean }>('SELECT c.order_id IS NOT NULL AS charged FROM orders o LEFT JOIN charges c USING (order_id) WHERE o.order_id = $1', [orderId]));
    const row = rows[0];
    return row && { orderId, status: row.charged ? 'charged' : 'placed' };
  }
}

@Controller('orders')
export class OrdersController {
  constructor(@Inject(OrdersService) private readonly orders: OrdersService) {}

  @Post()
  @HttpCode(201)
  async place(@Body() body: PlaceOrder): Promise<{ orderId: string; messageId: string }> {
    if (typeof body?.email !== 'string' || !Number.isInteger(body.amountCents) || body.amountCents <= 0) {
      throw new BadRequestException('expected { email, amountCents } with amountCents a whole number above 0');
    }
    const order: OrderPlaced = { orderId: body.orderId ?? randomUUID(), email: body.email, amountCents: body.amountCents };
    return { orderId: order.orderId, messageId: await this.orders.place(order) };
  }

  @Get(':id')
  async get(@Param('id') id: string): Promise<{ orderId: string; status: string }> {
    const found = await this.orders.find(id);
    if (!found) throw new NotFoundException(`no order ${id}`);
    return found;
  }
}
