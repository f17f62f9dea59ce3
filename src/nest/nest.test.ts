/**
 * WarrenModule in Nest's testing module: handlers checked against the topology at
 * start-up (before any connection), injection by class and by decorator, async options,
 * global or not, option merging, and what each entry point loads.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Controller, Injectable, Module, Scope, type OnApplicationBootstrap } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { AMQP_URL, onTeardown, testTopology, waitFor } from '../../test/helpers.js';
import { defineTopology, HandlerTimeoutError, InvalidOptionError, Publisher, silentLogger, Warren, type IdempotencyGuard, type MessageContext, type Outcome, type Topology } from '../index.js';
import { ConsumerHandlerError, InjectPublisher, InjectWarren, WarrenConsumer, WarrenModule, type WarrenModuleOptions } from './index.js';

/** A topology that is never declared: start-up checks run before any connection. */
const offline = defineTopology({
  exchange: 'wt.nest.offline',
  consumers: { billing: { bindings: ['order.created'] }, email: { bindings: ['order.*'] } },
});

/** The same consumer names on queues of this test's own, deleted after it. */
function liveTopology(): Topology {
  return testTopology(({ exchange, name }) => ({
    exchange,
    consumers: {
      billing: { queue: name('billing'), bindings: ['order.created'], retry: { delays: ['50ms'], maxAttempts: 2 } },
      email: { queue: name('email'), bindings: ['order.*'] },
    },
  }));
}

function options(topology: Topology, more: Partial<WarrenModuleOptions> = {}): WarrenModuleOptions {
  return { url: AMQP_URL, topology, connectTimeoutMs: 5000, logger: silentLogger, ...more };
}

/** Compiles and initialises an application of these modules and providers; closed after the test. */
async function start(imports: unknown[], providers: unknown[] = [], controllers: unknown[] = []) {
  const moduleRef = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[], controllers: controllers as never[] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  onTeardown(() => app.close());
  await app.init();
  return app;
}

/** The error `app.init()` fails with; the Warren must not have connected. */
async function startupError(imports: unknown[], providers: unknown[]): Promise<ConsumerHandlerError> {
  const moduleRef = await Test.createTestingModule({ imports: imports as never[], providers: providers as never[] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  onTeardown(() => app.close());
  const error = await app.init().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConsumerHandlerError);
  expect(app.get(Warren).connection.ready).toBe(false);
  return error as ConsumerHandlerError;
}

@Injectable()
class BillingOnly {
  @WarrenConsumer('billing')
  charge(): void {}
}

@Injectable()
class EmailOnly {
  @WarrenConsumer('email')
  send(): void {}
}

describe('start-up checks of the handlers against the topology', { timeout: 60_000 }, () => {
  it('a consumer without a handler fails app.init() before connecting, naming it and the `handle` that would leave it out', async () => {
    const error = await startupError([WarrenModule.forRoot(options(offline))], [BillingOnly]);
    expect(error.code).toBe('CONSUMER_HANDLERS');
    expect(error.problems).toHaveLength(1);
    expect(error.message).toContain("consumer 'email' has no handler");
    expect(error.message).toContain("@WarrenConsumer('email')");
    expect(error.message).toContain("handle: ['billing']");
  });

  it('a decorator naming a consumer the topology does not declare fails, with the closest name', async () => {
    @Injectable()
    class Misspelt {
      @WarrenConsumer('biling')
      charge(): void {}
    }
    const error = await startupError([WarrenModule.forRoot(options(offline))], [Misspelt, EmailOnly]);
    expect(error.message).toContain("Misspelt.charge has @WarrenConsumer('biling'), a consumer the topology does not declare. Did you mean 'billing'?");
    expect(error.message).toContain("consumer 'billing' has no handler");
    expect(error.problems).toHaveLength(2);
  });

  it('two handlers for one consumer fail, naming both', async () => {
    @Injectable()
    class Again {
      @WarrenConsumer('billing')
      chargeToo(): void {}
    }
    const error = await startupError([WarrenModule.forRoot(options(offline))], [BillingOnly, Again, EmailOnly]);
    expect(error.problems).toEqual([expect.stringContaining("consumer 'billing' has 2 handlers: BillingOnly.charge, Again.chargeToo")]);
  });

  it('a handler on a request-scoped or transient provider fails: a consumer needs one instance', async () => {
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @WarrenConsumer('billing')
      charge(): void {}
    }
    @Injectable({ scope: Scope.TRANSIENT })
    class Transient {
      @WarrenConsumer('email')
      send(): void {}
    }
    const error = await startupError([WarrenModule.forRoot(options(offline))], [PerRequest, Transient]);
    expect(error.message).toContain("PerRequest.charge handles 'billing' but its provider is request-scoped");
    expect(error.message).toContain("Transient.send handles 'email' but its provider is transient");
  });

  it('`handle` limits the consumers this application runs; a handler for one it leaves out fails', async () => {
    const error = await startupError([WarrenModule.forRoot(options(offline, { handle: ['billing'] }))], [BillingOnly, EmailOnly]);
    expect(error.problems).toEqual([expect.stringContaining("EmailOnly.send handles 'email', which the module's `handle` option leaves out")]);
  });

  it('bad options fail where the module is declared, naming the option', () => {
    expect(() => WarrenModule.forRoot({ url: AMQP_URL } as WarrenModuleOptions)).toThrow(InvalidOptionError);
    expect(() => WarrenModule.forRoot({ url: AMQP_URL } as WarrenModuleOptions)).toThrow(/`topology`: expected what defineTopology\(\) returns/);
    expect(() => WarrenModule.forRoot(options(offline, { handle: ['emial'] }))).toThrow(/`handle\[0\]`: 'emial' is not a consumer of the topology\. Did you mean 'email'\?/);
    expect(() => WarrenModule.forRoot(options(offline, { consumerOptions: { bill: {} } }))).toThrow(/`consumerOptions\.bill`/);
    expect(() => WarrenModule.forRootAsync({} as never)).toThrow(/`useFactory`/);
    expect(() => WarrenConsumer('')).toThrow(/@WarrenConsumer/);
  });

  it('options from an async factory are checked when the factory has run', async () => {
    const compiled = Test.createTestingModule({ imports: [WarrenModule.forRootAsync({ useFactory: async () => options(offline, { handle: ['sms'] }) })] }).compile();
    await expect(compiled).rejects.toThrow(/`handle\[0\]`: 'sms' is not a consumer/);
  });
});

describe('WarrenModule with a broker', { timeout: 120_000 }, () => {
  it('binds handlers to their provider (its dependencies injected), injects Warren and Publisher by class and by decorator, and starts consuming on init', async () => {
    const topology = liveTopology();

    @Injectable()
    class Ledger {
      readonly entries: string[] = [];
    }

    @Injectable()
    class Handlers {
      readonly seen: Array<{ attempt: number; messageId: string | undefined; tx: unknown }> = [];
      // No @Inject: vitest's transformer (oxc, reading tsconfig.json) emits the metadata.
      constructor(readonly ledger: Ledger) {}

      @WarrenConsumer<{ id: number }>('billing')
      charge(order: { id: number }, ctx: MessageContext<unknown>): void {
        this.ledger.entries.push(`charged ${order.id}`);
        this.seen.push({ attempt: ctx.attempt, messageId: ctx.messageId, tx: ctx.tx });
      }

      @WarrenConsumer('email')
      async send(): Promise<void> {}
    }

    @Injectable()
    class Orders {
      constructor(
        readonly byClass: Warren,
        @InjectWarren() readonly byDecorator: Warren,
        @InjectPublisher() readonly publisher: Publisher,
      ) {}
    }

    const app = await start([WarrenModule.forRoot(options(topology))], [Ledger, Handlers, Orders]);
    const orders = app.get(Orders);
    expect(orders.byClass).toBeInstanceOf(Warren);
    expect(orders.byDecorator).toBe(orders.byClass);
    expect(orders.publisher).toBe(orders.byClass.publisher);
    expect(orders.byClass.listConsumers().map((c) => c.name)).toEqual(['billing', 'email']);

    const { messageId } = await orders.publisher.publish('order.created', { id: 7 });
    const handlers = app.get(Handlers);
    await waitFor(() => app.get(Ledger).entries.length === 1, 'the handler to run on its provider', 30_000);
    expect(app.get(Ledger).entries).toEqual(['charged 7']);
    expect(handlers.seen).toEqual([{ attempt: 1, messageId, tx: undefined }]);
  });

  it('forRootAsync: the factory injects providers of the modules it imports; a provider deeper in the tree can publish from its own onApplicationBootstrap', async () => {
    const topology = liveTopology();
    class Settings {
      constructor(readonly url: string) {}
    }
    @Module({ providers: [{ provide: Settings, useValue: new Settings(AMQP_URL) }], exports: [Settings] })
    class SettingsModule {}

    const handled: number[] = [];
    @Injectable()
    class Handlers {
      @WarrenConsumer<{ n: number }>('billing')
      charge(p: { n: number }): void {
        handled.push(p.n);
      }
      @WarrenConsumer('email')
      send(): void {}
    }

    @Injectable()
    class Announcer implements OnApplicationBootstrap {
      constructor(@InjectWarren() private readonly warren: Warren) {}
      async onApplicationBootstrap(): Promise<void> {
        await this.warren.publish('order.created', { n: 1 });
      }
    }
    @Module({ providers: [Announcer] })
    class Inner {}
    @Module({ imports: [Inner], providers: [Handlers] })
    class Feature {}

    await start([
      WarrenModule.forRootAsync({
        imports: [SettingsModule],
        inject: [Settings],
        useFactory: (settings: Settings) => options(topology, { url: settings.url }),
      }),
      Feature,
    ]);
    await waitFor(() => handled.length === 1, 'the message published at bootstrap to be handled', 30_000);
  });

  it('isGlobal: false: only a module that imports WarrenModule can inject Warren', async () => {
    const topology = liveTopology();
    @Injectable()
    class NeedsWarren {
      constructor(@InjectWarren() readonly warren: Warren) {}
    }
    @Module({ providers: [NeedsWarren] })
    class Elsewhere {}
    const local = WarrenModule.forRoot({ ...options(topology, { handle: [] }), isGlobal: false });

    await expect(Test.createTestingModule({ imports: [local, Elsewhere] }).compile()).rejects.toThrow(/Nest can't resolve dependencies of the NeedsWarren/);

    @Module({ imports: [local], providers: [NeedsWarren] })
    class Importing {}
    const app = await start([Importing]);
    expect(app.get(NeedsWarren).warren).toBeInstanceOf(Warren);
  });

  it('a handler that declares requiresTx fails app.init() before connecting when the module has no store, and starts with one', async () => {
    @Injectable()
    class Receipts {
      @WarrenConsumer('billing', { requiresTx: true })
      record(_order: unknown, ctx: MessageContext<{ query(sql: string): void }>): void {
        ctx.tx.query('INSERT INTO receipts DEFAULT VALUES');
      }
    }
    const error = await startupError([WarrenModule.forRoot(options(offline, { handle: ['billing'] }))], [Receipts]);
    expect(error.problems).toEqual([
      "Receipts.record handles 'billing' with requiresTx: true (it uses ctx.tx), but the module has no store to give it a transaction. Pass `store` (postgresStore() or sqliteStore()) to WarrenModule, or an `idempotency` guard in consumerOptions.billing.",
    ]);
    // A guard from consumerOptions is as good as a store.
    const queries: string[] = [];
    const guard: IdempotencyGuard<{ query(sql: string): void }> = { run: async (_id, _c, work) => (await work({ query: (sql) => void queries.push(sql) }), 'done') };
    const t = liveTopology();
    const app = await start([WarrenModule.forRoot(options(t, { handle: ['billing'], consumerOptions: { billing: { idempotency: guard } } }))], [Receipts]);
    await app.get(Warren).publish('order.created', { id: 1 });
    await waitFor(() => queries.length === 1, 'the handler to run in the guard');
  });

  it('handle: [] runs no consumer, for an application that only publishes', async () => {
    const topology = liveTopology();
    const app = await start([WarrenModule.forRoot(options(topology, { handle: [] }))]);
    const warren = app.get(Warren);
    expect(warren.listConsumers()).toEqual([]);
    await warren.publish('order.created', { id: 1 });
  });

  it('options merge: consumerDefaults, then the decorator, then consumerOptions; handlers on controllers count, an alias (useExisting) once', async () => {
    const topology = liveTopology();
    const outcomes: Outcome[] = [];

    @Controller()
    class Slow {
      // The module's consumerOptions (timeoutMs: 100) override the decorator's.
      @WarrenConsumer('billing', { timeoutMs: 30_000 })
      async charge(_: unknown, ctx: MessageContext): Promise<void> {
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
      }
    }
    @Injectable()
    class Email {
      @WarrenConsumer('email')
      send(): void {}
    }

    const app = await start(
      [
        WarrenModule.forRoot(
          options(topology, {
            consumerDefaults: { onOutcome: (o) => outcomes.push(o), timeoutMs: 20_000 },
            consumerOptions: { billing: { timeoutMs: 100 } },
          }),
        ),
      ],
      [Email, { provide: 'alias', useExisting: Email }],
      [Slow],
    );
    await app.get(Warren).publish('order.created', { id: 1 });
    await waitFor(() => outcomes.some((o) => o.kind === 'retried'), 'the billing handler to time out', 30_000);
    const retried = outcomes.find((o) => o.kind === 'retried');
    expect(retried?.kind === 'retried' && retried.error).toBeInstanceOf(HandlerTimeoutError);
    // order.created also goes to email (order.*): the onOutcome of consumerDefaults saw it.
    await waitFor(() => outcomes.some((o) => o.kind === 'acked'), 'email to ack', 30_000);
  });
});

describe('what each entry point loads', () => {
  const root = fileURLToPath(new URL('../..', import.meta.url));

  /** The `@nestjs` packages loaded after importing `entry` in a fresh Node process. */
  function nestPackagesAfter(entry: string): Promise<string[]> {
    const script = `
      import { createRequire } from 'node:module';
      await import(${JSON.stringify(entry)});
      const loaded = Object.keys(createRequire(import.meta.url).cache);
      const packages = new Set(loaded.map((p) => /node_modules\\/(@nestjs\\/[^/]+)/.exec(p)?.[1]).filter(Boolean));
      console.log(JSON.stringify([...packages].sort()));
    `;
    return new Promise((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: root }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout.trim().split('\n').pop() ?? '[]') as string[]);
      });
    });
  }

  it('warren loads no @nestjs package; warren/nest loads common and core, not terminus; warren/nest/terminus loads terminus', async () => {
    const [rootEntry, nest, terminus] = await Promise.all([
      nestPackagesAfter('./src/index.ts'),
      nestPackagesAfter('./src/nest/index.ts'),
      nestPackagesAfter('./src/nest/terminus.ts'),
    ]);
    expect(rootEntry).toEqual([]);
    expect(nest).toEqual(['@nestjs/common', '@nestjs/core']);
    expect(terminus).toContain('@nestjs/terminus');
  }, 180_000);
});
