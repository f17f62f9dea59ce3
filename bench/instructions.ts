/**
 * Instructions per message, for each client of the comparison (bench/clients.ts): its
 * process run under valgrind's callgrind at two sizes, the difference in instructions
 * divided by the difference in messages, so start-up, connecting and the warm-up cancel
 * out. Unlike CPU time, an instruction count does not move with what else runs on the
 * machine, which makes it the figure to compare a change with on a busy machine (it
 * does not see cache misses or system calls' kernel time: the timed comparison stays the
 * judge).
 *
 *   npx tsx bench/instructions.ts            (needs valgrind)
 *
 * WARREN_BENCH_CLIENTS (default amqplib,warren), WARREN_BENCH_PATTERNS (default
 * window,consume), WARREN_BENCH_BROKERS (the first that answers is used), sizes
 * WARREN_BENCH_INSTR_MESSAGES (default `2000,6000`).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as amqp from 'amqplib';
import { defineTopology, Warren } from '../src/index.js';
import { ensureBuilt } from './built.js';
import { benchBrokers, CLIENT_NAMES, fill, ROUTING_KEY, runChild } from './clients.js';
import { brokerVersion } from './report.js';

const CLIENTS = (process.env['WARREN_BENCH_CLIENTS'] ?? 'amqplib,warren').split(',').map((s) => s.trim()).filter(Boolean);
const PATTERNS = (process.env['WARREN_BENCH_PATTERNS'] ?? 'window,consume').split(',').map((s) => s.trim()).filter(Boolean);
const SIZES = (process.env['WARREN_BENCH_INSTR_MESSAGES'] ?? '2000,6000').split(',').map(Number);
const WARM = 500;

/** The instructions a client's process ran for `n` messages of `pattern` (callgrind's total). */
async function instructions(client: string, config: Record<string, unknown>, dir: string): Promise<number> {
  const out = join(dir, `${client}.${String(config['mode'])}.${String(config['n'])}.out`);
  await runChild(client, config, ['valgrind', '--tool=callgrind', '--smc-check=all-non-file', '--dump-line=no', '--dump-instr=no', '--compress-strings=no', `--callgrind-out-file=${out}`]);
  const totals = /^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(out, 'utf8'));
  if (totals === null) throw new Error(`no instruction total in ${out}`);
  return Number(totals[1]);
}

export async function benchInstructions(): Promise<void> {
  execFileSync('valgrind', ['--version']);
  ensureBuilt();
  let url: string | undefined;
  let model: amqp.ChannelModel | undefined;
  for (const b of benchBrokers()) {
    try {
      model = await amqp.connect(b.url, { timeout: 3000 });
      url = b.url;
      break;
    } catch {
      console.log(`RabbitMQ ${b.name} (${b.url.replace(/\/\/[^@]*@/, '//')}): not running; skipped`);
    }
  }
  if (model === undefined || url === undefined) throw new Error('no broker of WARREN_BENCH_BROKERS answers');
  const prefix = `bench.instr.${Date.now().toString(36)}${randomBytes(2).toString('hex')}`;
  const options = { exchange: `${prefix}.events`, consumers: { [`${prefix}.work`]: { bindings: ['bench.#'] } } };
  const topology = defineTopology(options);
  const c = [...topology.consumers.values()][0];
  if (c === undefined) throw new Error('bench topology has no consumer');
  const setup = await Warren.connect({ url, topology });
  await setup.close();
  const dir = mkdtempSync(join(tmpdir(), 'warren-instr-'));
  const admin = await model.createChannel();
  const filler = await model.createConfirmChannel();
  console.log(`instructions per message, RabbitMQ ${brokerVersion(model)}, sizes ${SIZES.join(' and ')} (+${WARM} warm), window 256, prefetch 100`);
  try {
    const base = { url, exchange: topology.exchange, routingKey: ROUTING_KEY, queue: c.queue, consumer: c.name, topology: options, window: 256, prefetch: 100, warm: WARM };
    for (const pattern of PATTERNS) {
      const per = new Map<string, number>();
      for (const client of CLIENTS) {
        const counts: number[] = [];
        for (const n of SIZES) {
          await admin.purgeQueue(c.queue);
          if (pattern === 'consume') await fill(filler, topology.exchange, WARM + n);
          counts.push(await instructions(client, { ...base, mode: pattern, n }, dir));
        }
        const perMessage = ((counts[1] as number) - (counts[0] as number)) / ((SIZES[1] as number) - (SIZES[0] as number));
        per.set(client, perMessage);
        const first = per.get(CLIENTS[0] as string) as number;
        console.log(`${pattern.padEnd(8)} ${(CLIENT_NAMES[client] ?? client).padEnd(30)} ${Math.round(perMessage).toLocaleString('en-US').padStart(9)}  ${(perMessage / first).toFixed(2)}`);
      }
    }
  } finally {
    await admin.purgeQueue(c.queue);
    for (const q of [c.queue, ...c.retryQueues, c.parkedQueue]) await admin.deleteQueue(q);
    await admin.deleteExchange(topology.exchange);
    await model.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await benchInstructions();
}
