/**
 * `warren topology plan | apply | verify` on a topology of several exchanges, one of them
 * passive (owned by another team): missing, then present. Runs the built executable.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { onTeardown, rawConnection, uniqueName } from '../../../test/helpers.js';
import { assertBuilt, topologyModule, warren } from '../testing/run.js';

describe('warren topology with several exchanges', () => {
  beforeAll(() => assertBuilt());

  it('a missing passive exchange: plan says missing, apply and verify exit 1 naming it; once it exists, apply and verify pass', async () => {
    const foreign = `${uniqueName('payments')}.events`;
    const names = { commands: '', billing: '', refunds: '' };
    const { env } = await topologyModule(({ exchange, name }) => {
      Object.assign(names, { commands: `${exchange}.commands`, billing: name('billing'), refunds: name('refunds') });
      return {
        exchange,
        exchanges: { [names.commands]: { type: 'direct' }, [foreign]: { passive: true } },
        retry: { delays: ['1s'] },
        consumers: {
          [names.billing]: { bindings: ['order.created', { exchange: names.commands, keys: ['invoice.send'] }] },
          [names.refunds]: { bindings: [{ exchange: foreign, keys: ['payment.refunded'] }] },
        },
      };
    });

    const plan = await warren(['topology', 'plan'], { env });
    expect(plan.code).toBe(0);
    expect(plan.stdout).toMatch(/Topology of exchanges \S+\.events \(default\), \S+\.commands, \S+ \(compared/);
    expect(plan.stdout).toMatch(new RegExp(`missing\\s+exchange\\s+${foreign.replace(/\./g, '\\.')}\\s+passive \\(owned elsewhere\\): does not exist, never created by warren`));
    expect(plan.stdout).toMatch(/1 passive missing\./);

    const apply = await warren(['topology', 'apply'], { env });
    expect(apply.code).toBe(1);
    expect(apply.stderr).toMatch(/Not applied: Exchange '\S+' does not exist\. The topology declares it passive/);
    expect(apply.stderr).toContain(`Consumers bound to it: ${names.refunds}.`);

    const verify = await warren(['topology', 'verify'], { env });
    expect(verify.code).toBe(1);
    expect(verify.stdout).toContain(`exchange ${foreign}: does not exist; it is passive (owned elsewhere), so warren never creates it: ask its owner to declare it`);

    // The payments team declares it.
    const conn = await rawConnection();
    const ch = await conn.createChannel();
    await ch.assertExchange(foreign, 'topic', { durable: true });
    onTeardown(async () => {
      const c = await (await rawConnection()).createChannel();
      await c.deleteExchange(foreign).catch(() => undefined);
    });
    const applied = await warren(['topology', 'apply'], { env });
    expect(applied.code, applied.stderr).toBe(0);
    expect(applied.stdout).toContain(`created binding ${foreign} -> ${names.refunds} with routing key payment.refunded`);
    expect(applied.stdout).toContain(`created binding ${names.commands} -> ${names.billing} with routing key invoice.send`);
    expect(applied.stdout).not.toContain(`created exchange ${foreign}`);
    const verified = await warren(['topology', 'verify'], { env });
    expect(verified.code, verified.stdout).toBe(0);
    expect(verified.stdout).toMatch(/The broker matches the declaration: exchanges .*\(default\)/);
  }, 90_000); // six runs of the executable, each a Node start on a loaded machine
});
