/**
 * A SQLite statement's `database` property is the connection itself. Through a statement
 * prepared on its `tx`, a timed-out handler kept the raw connection: after its own
 * transaction was rolled back, what it wrote through it landed in the next message's
 * transaction, and committed with that message.
 */
import { describe, expect, it } from 'vitest';
import { harness } from '../../src/store/testing/harness.js';
import { bumpEffect, createEffects, readEffects } from '../../src/store/testing/spec.js';

interface Statement {
  readonly database: { prepare(sql: string): { run(...params: unknown[]): unknown } };
}

describe('SQLite guard: a statement of a timed-out handler', () => {
  it("does not give the handler the connection: its late writes do not land in the next message's transaction", async () => {
    const h = await harness('sqlite');
    const store = h.store();
    await createEffects(h.spec, store);
    const guard = store.idempotency();
    const timeout = new AbortController();
    let kept: Statement['database'] | undefined;
    const stuck = guard.run(
      'm1',
      'c',
      async (tx) => {
        kept = (tx as { prepare(sql: string): Statement }).prepare('SELECT 1').database;
        await new Promise(() => undefined);
      },
      timeout.signal,
    );
    await expect.poll(() => kept !== undefined).toBe(true);
    timeout.abort(new Error('timed out'));
    await expect(stuck).rejects.toThrow('timed out');
    let lateError: unknown;
    await guard.run('m2', 'c', async (tx) => {
      await bumpEffect(h.spec, tx, 'm2');
      try {
        kept?.prepare(`INSERT INTO "${h.spec.tablePrefix}effects" (key, n) VALUES ('late', 1)`).run();
      } catch (error) {
        lateError = error;
      }
    });
    const effects = await readEffects(h.spec, store);
    expect(effects.get('m2')).toBe(1);
    expect(effects.has('late')).toBe(false);
    expect(String((lateError as Error).message)).toMatch(/rolled back/);
  });
});
