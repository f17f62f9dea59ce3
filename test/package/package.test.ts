/**
 * warren as a user gets it: packed from a clean copy of the tree (the prepack script
 * builds it), checked with publint and attw, installed from the tarball into a fresh
 * project, then imported, required, compiled against and run.
 *
 * Every check walks package.json's "exports", so an entry added there is covered
 * without touching this file. warren is ESM-only: CommonJS users load it with
 * `require()`, which Node runs for ES modules from 20.19 and 22.12 on (engines says so)
 * and TypeScript types from 5.8 on under `module: nodenext`. attw bundles an older
 * TypeScript that knows neither, so its one complaint, CJSResolvesToESM for
 * node16-cjs, is expected and asserted; a real `require()` and a compiled `.cts`
 * consumer below prove the decision holds.
 *
 * Everything runs once per file (one pack, one install): about a minute on a quiet machine.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, existsSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codeEntries, packWorkingTree, ROOT, sh, targets, type Entry, type Packed } from './pack.js';

const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
/** TypeScript 7, the native compiler (what `npm install typescript` gives now), installed beside 5.9 as `typescript-7`. */
const TSC7 = join(ROOT, 'node_modules/typescript-7/bin/tsc');
const COMPILERS = [['5.9', TSC], ['7', TSC7]] as const;
const ATTW = join(ROOT, 'node_modules/@arethetypeswrong/cli/dist/index.js');
/** Entries that are a framework's module (NestJS) or a server built on one (the console on Hono). */
const FRAMEWORK_ENTRIES = new Set(['warren/nest', 'warren/nest/terminus', 'warren/console']);

let work: string;
let packed: Packed;
let entries: Entry[];

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'warren-package-'));
  packed = await packWorkingTree(work);
  entries = codeEntries(packed.manifest);
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true, maxRetries: 5 });
});

describe('npm pack', () => {
  it('ships every exports target, the bin, and no tests', () => {
    const files = new Set(packed.files);
    expect(entries.map((e) => e.key)).toContain('.');
    for (const [key, target] of Object.entries(packed.manifest.exports)) {
      for (const path of targets(target)) expect(files.has(path.replace(/^\.\//, '')), `exports["${key}"] -> ${path}`).toBe(true);
    }
    for (const [name, path] of Object.entries(packed.manifest.bin ?? {})) expect(files.has(path.replace(/^\.\//, '')), `bin ${name} -> ${path}`).toBe(true);
    // Test files and warren's own test helpers (src/<area>/testing/); `warren/testing` itself is an entry.
    expect(packed.files.filter((f) => /\.test\./.test(f) || (/\/testing\//.test(f) && !/^(dist|src)\/testing\//.test(f)))).toEqual([]);
  });

  it('ships the sources that its source maps and declaration maps name', () => {
    const files = new Set(packed.files);
    const extracted = join(work, 'extracted');
    mkdirSync(extracted);
    return sh('tar', ['-xzf', packed.tarball, '-C', extracted], work).then(() => {
      const maps = packed.files.filter((f) => f.endsWith('.map'));
      expect(maps.length).toBeGreaterThan(0);
      const missing: string[] = [];
      for (const map of maps) {
        const { sources } = JSON.parse(readFileSync(join(extracted, 'package', map), 'utf8')) as { sources: string[] };
        for (const source of sources) {
          const path = join(dirname(map), source).replace(/\\/g, '/');
          if (!files.has(path)) missing.push(`${map} -> ${source}`);
        }
      }
      expect(missing).toEqual([]);
    });
  });

  it('passes publint, warnings counted as errors', async () => {
    const { stdout } = await sh(process.execPath, [join(ROOT, 'node_modules/publint/src/cli.js'), 'run', packed.tarball, '--strict', '--level', 'suggestion'], work);
    expect(stdout).toMatch(/All good!/);
  });

  it('attw: types resolve for ESM and bundlers; CommonJS only through require(esm)', async () => {
    // Without --ignore-rules, so the JSON lists every problem; the verdict is asserted here.
    // Into a file: attw exits while a large report to a pipe may still be unwritten.
    const out = join(work, 'attw.json');
    await sh('sh', ['-c', '"$0" "$1" "$2" --format json --profile node16 > "$3" || true', process.execPath, ATTW, packed.tarball, out], work);
    const stdout = readFileSync(out, 'utf8');
    const report = JSON.parse(stdout) as { analysis: { problems: Array<{ kind: string; entrypoint: string; resolutionKind?: string }> } };
    // node10 (moduleResolution "node") has no "exports": the profile leaves it out.
    const problems = report.analysis.problems.filter((p) => p.resolutionKind !== 'node10');
    const expected = entries.map((e) => ({ kind: 'CJSResolvesToESM', entrypoint: e.key, resolutionKind: 'node16-cjs' }));
    const sort = (list: Array<{ entrypoint: string }>) => [...list].sort((a, b) => a.entrypoint.localeCompare(b.entrypoint));
    expect(sort(problems)).toEqual(sort(expected));
  }, 120_000);
});

describe('installed from the tarball', () => {
  let project: string;
  const peers = () => Object.keys(packed.manifest.peerDependencies ?? {});
  const installed = (name: string) => existsSync(join(project, 'node_modules', name));

  /** Runs `node args` in the project; never throws: the test reads the outcome. */
  const node = async (args: string[]) => {
    try {
      const { stdout, stderr } = await sh(process.execPath, args, project);
      return { ok: true, stdout, stderr };
    } catch (error) {
      return { ok: false, stdout: '', stderr: (error as Error).message };
    }
  };

  /** Imports one specifier in a fresh process: its export names, or the error. */
  const importEntry = async (specifier: string, how: 'import' | 'require') => {
    const script = how === 'import' ? 'import(process.argv[1]).then((m) => console.log(JSON.stringify({ names: Object.keys(m) })), (e) => console.log(JSON.stringify({ error: String(e && e.message), code: e && e.code })))' : 'try { console.log(JSON.stringify({ names: Object.keys(require(process.argv[1])) })) } catch (e) { console.log(JSON.stringify({ error: String(e && e.message), code: e && e.code })) }';
    const result = await node(['-e', script, specifier]);
    if (!result.ok) throw new Error(result.stderr);
    return JSON.parse(result.stdout) as { names?: string[]; error?: string; code?: string };
  };

  /** Links a package from warren's own node_modules (already built: better-sqlite3 is a native addon). */
  const link = (name: string) => {
    const from = join(ROOT, 'node_modules', name);
    const to = join(project, 'node_modules', name);
    if (!existsSync(from) || existsSync(to)) return;
    mkdirSync(dirname(to), { recursive: true });
    symlinkSync(realpathSync(from), to, 'dir');
  };

  const tsc = (config: object, name: string, compiler: string = TSC) => {
    writeFileSync(join(project, `tsconfig.${name}.json`), JSON.stringify(config, null, 2));
    return sh(process.execPath, [compiler, '-p', `tsconfig.${name}.json`], project);
  };

  beforeAll(async () => {
    project = join(work, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'warren-consumer', private: true, type: 'module' }));
    // Only warren and its dependencies come from the registry (or npm's cache); no
    // optional peer is installed yet.
    await sh('npm', ['install', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error', packed.tarball], project);
    link('@types/node');
  }, 240_000);

  it('imports every entry, or says which optional peer to install', async () => {
    expect(peers().filter(installed)).toEqual([]);
    for (const { specifier } of entries) {
      const r = await importEntry(specifier, 'import');
      if (r.names) {
        expect(r.names.length, specifier).toBeGreaterThan(0);
        continue;
      }
      // A failure must name a missing peer and how to get it, not Node's bare "Cannot find package",
      // except for the entries built on a framework, which cannot load without it at all
      // (decorators and routes are made at import): for those, Node's message names the peer.
      const framework = FRAMEWORK_ENTRIES.has(specifier);
      const named = peers().filter((p) => !installed(p) && (r.error?.includes(`npm install ${p}`) || (framework && r.error?.includes(`Cannot find package '${p}'`))));
      expect(named, `import('${specifier}') failed with: ${r.error}`).not.toEqual([]);
    }
  }, 120_000);

  it('the store and metrics entries name the peer they need on first use', async () => {
    const script = `
      const out = [];
      const { sqliteStore } = await import('warren/sqlite');
      await sqliteStore({ filename: ':memory:' }).migrate().catch((e) => out.push(e.message));
      const { postgresStore } = await import('warren/postgres');
      await postgresStore({ connectionString: 'postgres://127.0.0.1:1/none' }).migrate().catch((e) => out.push(e.message));
      const { warrenMetrics } = await import('warren/metrics');
      try { warrenMetrics({}); } catch (e) { out.push(e.message); }
      console.log(JSON.stringify(out));`;
    const r = await node(['--input-type=module', '-e', script]);
    expect(r.ok, r.stderr).toBe(true);
    const messages = JSON.parse(r.stdout) as string[];
    expect(messages).toEqual([expect.stringContaining('npm install better-sqlite3'), expect.stringContaining('npm install pg'), expect.stringContaining('npm install prom-client')]);
  }, 120_000);

  it('compiles a consumer of the main entry with no optional peer installed', async () => {
    writeFileSync(join(project, 'main-only.ts'), `import * as warren from 'warren';\nexport const names: string[] = Object.keys(warren);\n`);
    for (const [version, compiler] of COMPILERS) {
      await tsc({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, skipLibCheck: false, types: ['node'] }, files: ['main-only.ts'] }, `main-only-${version}`, compiler);
    }
  }, 240_000);

  describe('with the optional peers installed', () => {
    beforeAll(() => {
      for (const peer of peers()) link(peer);
    });

    it('imports every entry', async () => {
      for (const { specifier } of entries) {
        const r = await importEntry(specifier, 'import');
        expect(r.error, specifier).toBeUndefined();
        expect(r.names?.length, specifier).toBeGreaterThan(0);
      }
    }, 120_000);

    it('requires every entry from CommonJS (require of ES modules)', async () => {
      for (const { specifier } of entries) {
        const esm = await importEntry(specifier, 'import');
        const cjs = await importEntry(specifier, 'require');
        expect(cjs.error, specifier).toBeUndefined();
        expect(cjs.names?.filter((n) => n !== 'module.exports').sort(), specifier).toEqual(esm.names?.sort());
      }
    }, 120_000);

    it('compiles a TypeScript consumer under nodenext (ESM and CommonJS) and bundler resolution, with TypeScript 5.9 and 7', async () => {
      const imports = entries.map((e, i) => `import * as entry${i} from '${e.specifier}';`).join('\n');
      const requires = entries.map((e, i) => `import entry${i} = require('${e.specifier}');`).join('\n');
      const list = `export const entries: object[] = [${entries.map((_e, i) => `entry${i}`).join(', ')}];`;
      // A small consumer of the main entry and a store, as the README shows them.
      const consumer = `
import { defineTopology, PermanentError, Warren, type MessageContext } from 'warren';
import { sqliteStore, type SqliteDatabase } from 'warren/sqlite';
import { postgresStore } from 'warren/postgres';

export const topology = defineTopology({
  exchange: 'shop.events',
  consumers: { billing: { bindings: ['order.created'], retry: { delays: ['5s', '1m'], maxAttempts: 4 } } },
});

export async function start(url: string): Promise<Warren> {
  const store = sqliteStore({ filename: 'warren.db' });
  const warren = await Warren.connect({ url, topology });
  await warren.consume<{ orderId: number }, SqliteDatabase>(
    'billing',
    async (order, ctx: MessageContext<SqliteDatabase>) => {
      if (order.orderId < 0) throw new PermanentError('negative order id');
      ctx.tx.prepare('INSERT INTO charges (order_id) VALUES (?)').run(order.orderId);
    },
    { idempotency: store.idempotency() },
  );
  return warren;
}

// The stores' internals are not part of the published types.
export function internals(store: ReturnType<typeof sqliteStore>, pg: ReturnType<typeof postgresStore>): void {
  // @ts-expect-error the SQLite store's connection is its own
  void store.write;
  // @ts-expect-error the PostgreSQL store's pool is its own
  void pg.withClient;
  // @ts-expect-error transaction takes the work only
  void pg.transaction(async () => undefined, 'doing', 'SELECT 1');
}
`;
      writeFileSync(join(project, 'entries.ts'), `${imports}\n${list}\n`);
      writeFileSync(join(project, 'entries.cts'), `${requires}\n${list}\n`);
      writeFileSync(join(project, 'consumer.ts'), consumer);
      const strict = { strict: true, noEmit: true, skipLibCheck: false, types: ['node'], exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true };
      const files = ['entries.ts', 'entries.cts', 'consumer.ts'];
      for (const [version, compiler] of COMPILERS) {
        await tsc({ compilerOptions: { ...strict, module: 'nodenext', moduleResolution: 'nodenext' }, files }, `nodenext-${version}`, compiler);
        await tsc({ compilerOptions: { ...strict, module: 'esnext', moduleResolution: 'bundler' }, files: ['entries.ts', 'consumer.ts'] }, `bundler-${version}`, compiler);
      }
    }, 600_000);

    it('compiles a NestJS application, a warren/testing unit test and a warren/service setup, with TypeScript 5.9 and 7', async () => {
      const app = `
import { Inject, Injectable, Module } from '@nestjs/common';
import { defineTopology, PermanentError, type IdempotencyGuard, type MessageContext } from 'warren';
import { basicAuth, parseUsers } from 'warren/console';
import { InjectPublisher, WarrenConsumer, WarrenModule, WARREN_SERVICE, type WarrenService } from 'warren/nest';
import { WarrenHealthModule } from 'warren/nest/terminus';
import type { Publisher } from 'warren';

interface Order { readonly orderId: number }
interface Client { query(sql: string, values?: unknown[]): Promise<unknown> }
export const topology = defineTopology({ exchange: 'shop.events', consumers: { billing: { bindings: ['order.placed'] }, email: { bindings: ['order.placed'] } } });
declare const guard: IdempotencyGuard<Client>;

@Injectable()
export class Handlers {
  constructor(@InjectPublisher() private readonly publisher: Publisher, @Inject(WARREN_SERVICE) readonly service: WarrenService) {}

  @WarrenConsumer<Order>('billing', { requiresTx: true })
  async charge(order: Order, ctx: MessageContext<Client>): Promise<void> {
    await ctx.tx.query('INSERT INTO charges (order_id) VALUES ($1)', [order.orderId]);
    await this.publisher.publish('order.charged', order);
  }

  @WarrenConsumer<Order>('email')
  send(order: Order, ctx: MessageContext): void {
    if (order.orderId < 0) throw new PermanentError('negative id at attempt ' + String(ctx.attempt));
  }
}

@Module({
  imports: [
    WarrenModule.forRoot({
      topology, startWithoutBroker: true, consumerDefaults: { idempotency: guard },
      console: { authorize: basicAuth(parseUsers('')) },
      routes: { metrics: '/metrics', console: '/ops/warren' },
    }),
    WarrenHealthModule.forRoot(),
  ],
  providers: [Handlers],
})
export class AppModule {}
`;
      const unit = `
import { defineTopology, PermanentError, type MessageContext } from 'warren';
import { messageContext, runDelivery } from 'warren/testing';
import { warrenService } from 'warren/service';
import { Warren } from 'warren';

const topology = defineTopology({ consumers: { email: { bindings: ['order.placed'] } } });
async function send(order: { orderId: number }, ctx: MessageContext): Promise<void> {
  if (order.orderId < 0) throw new PermanentError('negative id at attempt ' + String(ctx.attempt));
}
export async function check(): Promise<string> {
  await send({ orderId: 1 }, messageContext({ attempt: 2 }));
  const outcome = await runDelivery(topology.consumer('email'), send, { payload: { orderId: -1 } });
  const service = warrenService({ warren: Warren.create({ topology }), metrics: true });
  return outcome.decision.kind + String(service.paths.metrics);
}
`;
      writeFileSync(join(project, 'app.module.ts'), app);
      writeFileSync(join(project, 'unit.ts'), unit);
      const strict = { strict: true, noEmit: true, skipLibCheck: false, types: ['node'], exactOptionalPropertyTypes: true, noUncheckedIndexedAccess: true, module: 'nodenext', moduleResolution: 'nodenext' };
      for (const [version, compiler] of COMPILERS) {
        await tsc({ compilerOptions: { ...strict, experimentalDecorators: true, emitDecoratorMetadata: true }, files: ['app.module.ts'] }, `nest-${version}`, compiler);
        await tsc({ compilerOptions: strict, files: ['unit.ts'] }, `unit-${version}`, compiler);
      }
    }, 600_000);

    it('runs `npx warren --help` from the installed package', async () => {
      const { stdout } = await sh('npx', ['--no-install', 'warren', '--help'], project);
      expect(stdout).toMatch(/^warren \d+\.\d+\.\d+/);
      expect(stdout).toMatch(/parked show CONSUMER ID/);
    }, 120_000);

    it("records stack frames in warren's code that name existing files, with or without source maps", async () => {
      // describeFailure is what the consumer stores in a parked message's headers and
      // what `warren parked show` prints; an InvalidOptionError is thrown inside warren.
      const script = `
        const { defineTopology, describeFailure } = await import('warren');
        try { defineTopology({ consumers: { 'not a name!': {} } }); } catch (e) { console.log(describeFailure(e).stack); }`;
      for (const flags of [['--enable-source-maps'], []]) {
        const r = await node([...flags, '--input-type=module', '-e', script]);
        expect(r.ok, r.stderr).toBe(true);
        const frames = r.stdout
          .split('\n')
          .map((line) => /\(((?:file:\/\/)?\/[^()]+):(\d+):\d+\)$/.exec(line))
          .filter((m): m is RegExpExecArray => m !== null && m[1]!.includes('/node_modules/warren/'))
          .map(([, at, line]) => [at!.startsWith('file:') ? fileURLToPath(at!) : at!, Number(line)] as const);
        expect(frames.length, r.stdout).toBeGreaterThan(0);
        for (const [file, line] of frames) {
          expect(existsSync(file), `${file} (${flags.join(' ') || 'no flags'})`).toBe(true);
          expect(readFileSync(file, 'utf8').split('\n').length).toBeGreaterThanOrEqual(line);
        }
        const [top, line] = frames[0]!;
        expect(top).toMatch(flags.length ? /\/node_modules\/warren\/src\/.*\.ts$/ : /\/node_modules\/warren\/dist\/.*\.js$/);
        // The first frame is the line that threw.
        expect(readFileSync(top, 'utf8').split('\n')[line - 1]).toMatch(/throw new InvalidOptionError/);
      }
    }, 120_000);
  });
});
