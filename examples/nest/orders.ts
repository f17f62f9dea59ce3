import { Body, Controller, HttpCode, Inject, Injectable, Post } from '@nestjs/common';
import type { Publisher } from '../../src/index.js';
import { InjectPublisher } from '../../src/nest/index.js';
import type { OrderPlaced } from './topology.js';

/** Places orders: a publish with confirm, so a placed order is in the broker when this resolves. */
@Injectable()
export class OrdersService {
  constructor(@InjectPublisher() private readonly publisher: Publisher) {}

  /** Returns the message id, which billing uses as the payment's idempotency key. */
  async place(order: OrderPlaced): Promise<string> {
    const { messageId } = await this.publisher.publish('order.placed', order);
    return messageId;
  }
}

@Controller('orders')
export class OrdersController {
  constructor(@Inject(OrdersService) private readonly orders: OrdersService) {}

  @Post()
  @HttpCode(202)
  async place(@Body() order: OrderPlaced): Promise<{ messageId: string }> {
    return { messageId: await this.orders.place(order) };
  }
}
