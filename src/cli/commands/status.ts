import { formatDuration } from '../../retry/ladder.js';
import { readStatus, type QueueState } from '../../status/index.js';
import type { Command } from '../command.js';
import { EXIT } from '../errors.js';
import { count, table } from '../format.js';

function n(value: number | undefined): string {
  return value === undefined ? '-' : count(value);
}

function rate(value: number | undefined): string {
  return value === undefined ? '-' : value.toFixed(2);
}

function row(role: string, q: QueueState): string[] {
  if (!q.exists) return [role, q.name, 'missing', '', '', ''];
  return [role, q.name, n(q.ready), n(q.unacked), n(q.consumers), rate(q.redeliverRate)];
}

export const status: Command = {
  path: ['status'],
  usage: '[CONSUMER...]',
  summary: 'queue depths, consumers and parked messages, per consumer',
  description: [
    'Shows a table per consumer: the work queue (ready, unacknowledged, consumers attached,',
    'redeliveries per second), each retry tier and the parked queue. Figures come from the',
    'management API when it answers; without it, depths and consumer counts come from AMQP',
    'and the output says what is missing.',
    '',
    'Exits 1 when anything is parked, a work queue has messages and no consumer, a',
    'declared queue or binding does not exist, or a work queue is bound from the exchange',
    'with a key the declaration does not name (bindings are read through the management',
    'API only): usable as a monitoring check.',
  ].join('\n'),
  flags: {},
  examples: ['warren status', 'warren status billing --json', 'warren status || page-oncall "warren status: $(warren status 2>&1 | tail -n 3)"'],
  async run(ctx) {
    const topology = await ctx.topology();
    const names = ctx.args.length ? [...ctx.args] : undefined;
    if (names) for (const name of names) topology.consumer(name);
    const report = await readStatus(await ctx.connection(), topology, { management: ctx.management(), ...(names ? { consumers: names } : {}) });
    if (ctx.json) {
      ctx.printJson(report);
      return report.ok ? EXIT.ok : EXIT.failed;
    }
    const header = ['', 'queue', 'ready', 'unacked', 'consumers', 'redeliver/s'];
    const align = ['left', 'left', 'right', 'right', 'right', 'right'] as const;
    report.consumers.forEach((c, i) => {
      if (i > 0) ctx.out();
      ctx.out(c.consumer);
      const rows = [row('work', c.work), ...c.retries.map((r) => row(`retry ${formatDuration(r.delayMs)}`, r)), row('parked', c.parked)];
      for (const line of table(header, rows, align)) ctx.out(`  ${line}`);
    });
    if (report.source === 'amqp') {
      ctx.out();
      const why = report.managementUnavailable ?? 'it is unavailable';
      ctx.out(`Management API not used: ${why.charAt(0).toLowerCase()}${why.slice(1)}`);
      ctx.out(`Without it, ${report.missing.join(' and ')} are not shown (-) and bindings are not checked; depths and consumer counts come from AMQP.`);
    }
    ctx.out();
    if (report.ok) ctx.out(`OK: nothing parked, every work queue with messages has a consumer${report.bindingsChecked ? ', every binding as declared' : ''}.`);
    else {
      ctx.out(`${report.problems.length} problem${report.problems.length === 1 ? '' : 's'}:`);
      for (const p of report.problems) ctx.out(`  ! ${p.consumer}: ${p.message}`);
    }
    return report.ok ? EXIT.ok : EXIT.failed;
  },
};
