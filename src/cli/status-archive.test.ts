/**
 * `warren status --db` with a failure archive, on both backends and the real broker,
 * through the built executable: once the parked queue drains into the archive it reads 0,
 * and status shows the archive's open failures beside it and exits 1 for them; resolved,
 * they no longer count.
 */
import { relative } from 'node:path';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { connectWarren, depth, rawConnection, waitFor } from '../../test/helpers.js';
import { PermanentError } from '../errors.js';
import { BACKENDS, harness, type Harness } from '../store/testing/harness.js';
import { assertBuilt, ROOT, topologyModule, warren } from './testing/run.js';

vi.setConfig({ testTimeout: 180_000 });
beforeAll(() => assertBuilt());

function dbFlags(h: Harness): string[] {
  const s = h.spec;
  if (s.backend === 'sqlite') return ['--db', `sqlite:${relative(ROOT, s.filename)}`, '--table-prefix', s.tablePrefix];
  return ['--db', s.connectionString, '--schema', s.schema, '--table-prefix', s.tablePrefix];
}

interface StatusJson {
  ok: boolean;
  problems: Array<{ consumer: string; queue: string; kind: string; message: string }>;
  database?: { archive: Array<{ consumer: string; open: number }> };
}

describe.each(BACKENDS)('warren status --db with an archive: %s', (backend) => {
  it('shows the open failures beside the drained parked queue and exits 1 for them; resolved, it exits 0', async () => {
    const h = await harness(backend);
    const store = h.store();
    let billing!: string;
    const mod = await topologyModule(({ exchange, name }) => {
      billing = name('billing');
      return { exchange, consumers: { [billing]: { bindings: ['order.*'] } } };
    });
    const app = await connectWarren(mod.topology, { archive: { store, batchSize: 10, maxBatchDelayMs: 5 } });
    await app.consume(billing, async () => {
      throw new PermanentError('card declined');
    });
    await app.publish('order.created', { n: 1 });
    await app.publish('order.created', { n: 2 });
    const parkedQueue = mod.topology.consumer(billing).parkedQueue;
    await waitFor(async () => (await store.archive.counts(billing))[0]?.open === 2, 'two failures archived');
    const conn = await rawConnection();
    await waitFor(async () => (await depth(conn, parkedQueue)) === 0, 'the parked queue drained');
    const db = dbFlags(h);
    const cli = (args: readonly string[]) => warren(args, { env: mod.env });

    // Without --db the parked queue reads 0: nothing seems wrong.
    expect((await cli(['status', billing])).code).toBe(0);

    const js = await cli(['status', billing, ...db, '--json']);
    expect(js.code).toBe(1);
    const s = JSON.parse(js.stdout) as StatusJson;
    expect(s.ok).toBe(false);
    expect(s.database?.archive.find((a) => a.consumer === billing)?.open).toBe(2);
    expect(s.problems).toEqual([{ consumer: billing, queue: 'archive', kind: 'parked', message: `2 open failures in the archive; see warren parked list ${billing} --db URL --group` }]);

    const text = await cli(['status', billing, ...db]);
    expect(text.code).toBe(1);
    expect(text.stdout).toMatch(new RegExp(`parked\\s+${parkedQueue.replace(/[.]/g, '\\.')}\\s+0\\s`));
    expect(text.stdout).toMatch(/archive\s+open, oldest \S+\s+2/);
    expect(text.stdout).toContain('2 open failures in the archive');

    expect(await store.archive.resolve({ consumer: billing }, { actor: 'ops', reason: 'refunded by hand', at: new Date() }, 10)).toBe(2);
    const after = await cli(['status', billing, ...db]);
    expect(after.stdout).toMatch(/archive\s+open\s+0/);
    expect(after.code).toBe(0);
  });
});
