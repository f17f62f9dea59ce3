/**
 * Compile tests of the handler's context: `ctx.tx` exists only where an idempotency guard
 * gives it, typed as that guard's transaction. Every `@ts-expect-error` here is a mistake
 * that must not compile; `test/types/types.test.ts` checks that each one fails for its
 * own line (with the directives taken out) under TypeScript 5.9 and 7, and that the rest
 * compiles. Nothing here runs.
 */
import type pg from 'pg';
import type { ConsumerTopology, IdempotencyGuard, MessageContext, Warren } from '../../src/index.js';
import { WarrenConsumer } from '../../src/nest/index.js';
import type { SqliteDatabase } from '../../src/store/sqlite/index.js';
import { messageContext, runDelivery } from '../../src/testing/index.js';

declare const warren: Warren;
declare const pgGuard: IdempotencyGuard<pg.PoolClient>;
declare const sqliteGuard: IdempotencyGuard<SqliteDatabase>;
declare const client: pg.PoolClient;
declare const billing: ConsumerTopology;
interface Order {
  readonly orderId: number;
}

export async function consume(): Promise<void> {
  // With a guard, `tx` is its transaction, from the options: no annotation needed.
  await warren.consume('billing', async (order: Order, ctx) => {
    const tx: pg.PoolClient = ctx.tx;
    await tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
  }, { idempotency: pgGuard });
  await warren.consume('billing', (order: Order, ctx: MessageContext<SqliteDatabase>) => {
    ctx.tx.prepare('INSERT INTO charges (order_id) VALUES (?)').run(order.orderId);
  }, { idempotency: sqliteGuard, requiresTx: true });

  // Without one, there is no `tx` to read.
  await warren.consume('email', (_order: Order, ctx) => {
    // @ts-expect-error no guard, no tx
    return ctx.tx;
  });
  await warren.consume('email', (order: Order, ctx) => `${order.orderId} ${ctx.messageId ?? ''} ${ctx.attempt}`, { concurrency: 2 });

  // A handler that needs a transaction, where no guard gives one: what used to compile and
  // fail at each delivery with a TypeError (retried, then parked).
  // @ts-expect-error a handler typed with a transaction, and no guard
  await warren.consume('billing', async (order: Order, ctx: MessageContext<pg.PoolClient>) => {
    await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
  });
  await warren.consume(
    'billing',
    // @ts-expect-error the same, with options that set no guard
    async (order: Order, ctx: MessageContext<pg.PoolClient>) => {
      await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
    },
    { concurrency: 2 },
  );
  await warren.consume(
    'billing',
    // @ts-expect-error a handler for PostgreSQL's client under SQLite's guard
    async (order: Order, ctx: MessageContext<pg.PoolClient>) => {
      await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
    },
    { idempotency: sqliteGuard },
  );

  // MessageContext<unknown> fits every handler, with a guard or without; its tx may be absent.
  const any = (_order: Order, ctx: MessageContext<unknown>) => ctx.messageId;
  await warren.consume('email', any);
  await warren.consume('billing', any, { idempotency: pgGuard });
}

export class BillingHandlers {
  @WarrenConsumer<Order>('billing')
  charge(order: Order, ctx: MessageContext): string {
    return `${order.orderId} ${ctx.attempt}`;
  }

  @WarrenConsumer<Order>('receipts', { requiresTx: true })
  async record(order: Order, ctx: MessageContext<pg.PoolClient>): Promise<void> {
    await ctx.tx.query('INSERT INTO receipts (order_id) VALUES ($1)', [order.orderId]);
  }

  // A method may declare it and not read tx.
  @WarrenConsumer<Order>('audit', { requiresTx: true })
  audit(order: Order): number {
    return order.orderId;
  }

  // @ts-expect-error uses ctx.tx without declaring requiresTx: the module could not refuse it at start
  @WarrenConsumer<Order>('shipping')
  async ship(order: Order, ctx: MessageContext<pg.PoolClient>): Promise<void> {
    await ctx.tx.query('INSERT INTO shipments (order_id) VALUES ($1)', [order.orderId]);
  }
}

export async function testing(): Promise<void> {
  const plain = messageContext({ attempt: 2 });
  // @ts-expect-error a context made without tx has none
  void plain.tx;
  const withTx = messageContext({ tx: client });
  await withTx.tx.query('SELECT 1');
  await runDelivery(billing, async (order: Order, ctx) => {
    await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
  }, { payload: { orderId: 1 } }, { idempotency: pgGuard });
  // @ts-expect-error runDelivery as consume(): a handler that needs a transaction needs the guard
  await runDelivery(billing, async (order: Order, ctx: MessageContext<pg.PoolClient>) => {
    await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
  }, { payload: { orderId: 1 } });
}
