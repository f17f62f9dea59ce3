import { ExchangeNotFoundError, TopologyDriftError, migrationHint, type TopologyDifference } from '../../errors.js';
import { declareTopology, planTopology, type PlanEntry, type TopologyPlan } from '../../topology/apply.js';
import { topologySpec } from '../../topology/plan.js';
import type { Topology } from '../../topology/declaration.js';
import { noExtraArgs, type Command, type CommandContext } from '../command.js';
import { EXIT } from '../errors.js';
import { table } from '../format.js';

/** A value as the broker means it: numbers read from a 406 error text arrive as strings. */
function show(value: unknown): string {
  if (value === undefined) return 'not set';
  if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) return value;
  return JSON.stringify(value);
}

/** One difference in words: which queue, which argument, both values. */
export function describeDifference(d: TopologyDifference): string {
  if (d.kind === 'binding') return `binding ${d.name}: on the broker, not in the declaration`;
  if (d.argument === 'exists') return `${d.kind} ${d.name}: does not exist; it is passive (owned elsewhere), so warren never creates it: ask its owner to declare it`;
  return `${d.kind} ${d.name}: ${d.argument} is ${show(d.actual)} on the broker, the declaration wants ${show(d.expected)}`;
}

/** The topology's exchanges in words: `exchange shop.events`, or `exchanges shop.events (default), shop.commands`. */
function exchangesText(topology: Topology): string {
  const names = [...topology.exchanges.keys()];
  if (names.length === 1) return `exchange ${topology.exchange}`;
  return `exchanges ${names.map((n) => (n === topology.exchange ? `${n} (default)` : n)).join(', ')}`;
}

function method(plan: TopologyPlan): string {
  return plan.method === 'management'
    ? 'compared through the management API: every argument and binding'
    : 'compared through AMQP: the first differing argument of each queue only, and no bindings (the management API did not answer)';
}

/** Said whenever the bindings were not compared, so a pass is never read as covering them. */
function uncheckedBindings(topology: Topology): string {
  return `Bindings could not be checked: only the management API lists them, and it did not answer (check --management-url or WARREN_MANAGEMENT_URL). ${topologySpec(topology).bindings.length} bindings are declared; apply declares them again, which is harmless.`;
}

function planRows(plan: TopologyPlan): string[][] {
  return plan.entries.map((e: PlanEntry) => [
    e.status,
    e.kind,
    e.name,
    e.status === 'extra' ? 'not in the declaration' : e.status === 'missing' ? 'passive (owned elsewhere): does not exist, never created by warren' : e.differences.map((d) => `${d.argument}: broker ${show(d.actual)}, declared ${show(d.expected)}`).join('; '),
  ]);
}

function extraLines(plan: TopologyPlan): string[] {
  const extra = plan.entries.filter((e) => e.status === 'extra');
  if (!extra.length) return [];
  return [
    `${extra.length === 1 ? 'A binding' : 'Bindings'} the declaration does not name ${extra.length === 1 ? 'sends' : 'send'} the consumer messages its handler may not expect. warren never removes anything: add ${extra.length === 1 ? 'it' : 'them'} to the declaration, or remove ${extra.length === 1 ? 'it' : 'them'} yourself:`,
    ...extra.map((e) => `  ${e.hint ?? e.name}`),
  ];
}

function planJson(topology: Topology, plan: TopologyPlan) {
  return {
    exchange: topology.exchange,
    exchanges: [...topology.exchanges.values()],
    method: plan.method,
    bindingsChecked: plan.bindingsChecked,
    entries: plan.entries,
    toCreate: plan.toCreate.map((e) => ({ kind: e.kind, name: e.name })),
    drift: plan.drift,
    bindings: topologySpec(topology).bindings,
  };
}

async function makePlan(ctx: CommandContext): Promise<{ topology: Topology; plan: TopologyPlan }> {
  const topology = await ctx.topology();
  const plan = await planTopology(await ctx.connection(), topology, ctx.management());
  return { topology, plan };
}

function printPlan(ctx: CommandContext, topology: Topology, plan: TopologyPlan): void {
  ctx.out(`Topology of ${exchangesText(topology)} (${method(plan)})`);
  for (const line of table(['status', 'kind', 'name', 'difference'], planRows(plan))) ctx.out(`  ${line}`);
  const ok = plan.entries.filter((e) => e.status === 'ok').length;
  const differs = plan.entries.filter((e) => e.status === 'differs').length;
  const extra = plan.entries.filter((e) => e.status === 'extra').length;
  const missing = plan.entries.filter((e) => e.status === 'missing');
  ctx.out();
  ctx.out(`${plan.toCreate.length} to create, ${differs} differ${differs === 1 ? 's' : ''}, ${extra} not declared, ${ok} as declared${missing.length ? `, ${missing.length} passive missing` : ''}.`);
  for (const e of missing) ctx.out(e.hint ?? `exchange ${e.name} does not exist`);
  if (!plan.bindingsChecked) ctx.out(uncheckedBindings(topology));
  for (const line of extraLines(plan)) ctx.out(line);
}

export const topologyPlan: Command = {
  path: ['topology', 'plan'],
  usage: '',
  summary: 'what apply would create, and what differs; changes nothing',
  description: [
    'Compares the broker with the topology module: each exchange, queue and binding is "create"',
    '(missing), "ok", or "differs" (exists with other arguments, each difference named); a',
    'binding from one of its exchanges to a work queue that the declaration does not name is',
    '"extra"; a passive exchange (owned by another team) that does not exist is "missing".',
    'Changes nothing. Uses the management API when it answers (every argument and binding',
    'compared), else AMQP (the first differing argument of each queue; bindings unchecked).',
  ].join('\n'),
  flags: {},
  examples: ['warren topology plan --topology dist/topology.js', 'warren topology plan --json | jq .toCreate'],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'topology plan');
    const { topology, plan } = await makePlan(ctx);
    if (ctx.json) ctx.printJson(planJson(topology, plan));
    else printPlan(ctx, topology, plan);
    return EXIT.ok;
  },
};

export const topologyApply: Command = {
  path: ['topology', 'apply'],
  usage: '',
  summary: 'declare the exchanges, queues and bindings (idempotent; never deletes)',
  description: [
    'Declares everything the topology module declares, as the application does on start,',
    'and lists what it created (bindings included). Idempotent. A passive exchange (owned by',
    'another team) is only checked: if it does not exist, the command names it and exits 1.',
    'A queue that exists with other',
    'arguments is reported with the argument, both values and how to migrate, and the command',
    'exits 1. A binding the declaration does not name is reported with the command that removes',
    'it; nothing is ever deleted.',
  ].join('\n'),
  flags: {},
  examples: ['warren topology apply --topology dist/topology.js', 'WARREN_TOPOLOGY=dist/topology.js warren topology apply --url amqp://app:secret@rabbit:5672/shop'],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'topology apply');
    const { topology, plan } = await makePlan(ctx);
    try {
      await declareTopology(await ctx.connection(), topology);
    } catch (error) {
      if (error instanceof ExchangeNotFoundError) {
        if (ctx.json) ctx.printJson({ applied: false, missingExchange: error.exchange, consumers: error.consumers, error: error.message });
        else ctx.err(`Not applied: ${error.message}`);
        return EXIT.failed;
      }
      if (!(error instanceof TopologyDriftError)) throw error;
      if (ctx.json) ctx.printJson({ applied: false, drift: error.differences });
      else {
        ctx.err('Not applied: the broker differs from the declaration.');
        for (const d of error.differences) ctx.err(`  ${describeDifference(d)}`);
        const first = error.differences[0];
        if (first) ctx.err(migrationHint(first));
      }
      return EXIT.failed;
    }
    const created = plan.toCreate;
    const extra = plan.entries.filter((e) => e.status === 'extra');
    if (ctx.json) {
      ctx.printJson({
        applied: true,
        bindingsChecked: plan.bindingsChecked,
        created: created.map((e) => ({ kind: e.kind, name: e.name })),
        notDeclared: extra.map((e) => ({ kind: e.kind, name: e.name, hint: e.hint })),
        bindings: topologySpec(topology).bindings,
      });
      return EXIT.ok;
    }
    for (const e of created) ctx.out(`created ${e.kind} ${e.name}`);
    const spec = topologySpec(topology);
    ctx.out(`Applied: ${exchangesText(topology)}, ${spec.queues.length} queues, ${spec.bindings.length} bindings (${created.length} created, the rest already as declared).`);
    if (!plan.bindingsChecked) {
      ctx.out(
        'Bindings could not be checked (only the management API lists them, and it did not answer): all were declared again, so none is missing now, but the count above does not include any that were missing, and a binding the declaration does not name goes unseen.',
      );
    }
    for (const e of extra) ctx.out(`binding ${e.name}: not in the declaration, left in place (warren never removes anything): ${e.hint ?? ''}`);
    return EXIT.ok;
  },
};

export const topologyVerify: Command = {
  path: ['topology', 'verify'],
  usage: '',
  summary: 'exit 1 when the broker differs from the declaration, naming each difference',
  description: [
    'Like plan, but a check: exits 1 when any exchange, queue or binding is missing, a queue',
    'has other arguments than declared, or a work queue has a binding from the exchange that',
    'the declaration does not name; each difference is named. Exits 0 when the broker matches.',
    'Bindings are compared through the management API only; without it the output says that',
    'they could not be checked.',
  ].join('\n'),
  flags: {},
  examples: ['warren topology verify --topology dist/topology.js', 'warren topology verify --json > drift.json || echo "drift"'],
  async run(ctx) {
    noExtraArgs(ctx, 0, 'topology verify');
    const { topology, plan } = await makePlan(ctx);
    const ok = plan.drift.length === 0 && plan.toCreate.length === 0;
    if (ctx.json) {
      ctx.printJson({ ok, ...planJson(topology, plan) });
      return ok ? EXIT.ok : EXIT.failed;
    }
    const queues = plan.entries.filter((e) => e.kind === 'queue').length;
    const bindings = plan.entries.filter((e) => e.kind === 'binding').length;
    if (ok && plan.bindingsChecked) {
      ctx.out(`The broker matches the declaration: ${exchangesText(topology)}, ${queues} queues and ${bindings} bindings (${method(plan)}).`);
      return EXIT.ok;
    }
    if (ok) {
      // Exit 0: everything that could be compared matches; the line says what was not.
      ctx.out(`The ${exchangesText(topology)} and ${queues} queues match the declaration (${method(plan)}).`);
      ctx.out(uncheckedBindings(topology));
      return EXIT.ok;
    }
    ctx.out(`The broker differs from the declaration (${method(plan)}):`);
    for (const e of plan.toCreate) ctx.out(`  ${e.kind} ${e.name}: missing (warren topology apply creates it)`);
    for (const d of plan.drift) ctx.out(`  ${describeDifference(d)}`);
    if (!plan.bindingsChecked) ctx.out(uncheckedBindings(topology));
    for (const line of extraLines(plan)) ctx.out(line);
    const first = plan.drift.find((d) => d.kind !== 'binding');
    if (first) ctx.out(migrationHint(first));
    return EXIT.failed;
  },
};
