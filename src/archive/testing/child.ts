/**
 * An archive ingester in its own process, for tests that kill it. Run with
 * `node --import tsx src/archive/testing/child.ts` and:
 *
 * - WARREN_STORE: the store as JSON ({ spec }, see src/store/testing/spec.ts)
 * - WARREN_AMQP_URL, WARREN_TOPOLOGY (topology options as JSON)
 * - WARREN_BATCH: batch size (default 20)
 * - WARREN_CRASH=after-commit:<n>: SIGKILL itself once the n-th batch is committed,
 *   before it is acknowledged
 *
 * - WARREN_CHILD_ROLE=replay: replays every open row of WARREN_CONSUMER instead, at
 *   WARREN_RATE per second (0: not paced), with WARREN_LEASE_MS claims; writes
 *   `replayed <n>` after each batch. WARREN_CRASH=before-mark:<n>: SIGKILL itself when
 *   the n-th batch is to be marked replayed, its copies confirmed by the broker
 *
 * It writes `ready`, then `committed <total rows>` after each batch the database took.
 * stdout is a pipe, written synchronously on Linux, so a line is out before the kill.
 */
import * as amqp from 'amqplib';
import { defineTopology, type TopologyOptions } from '../../index.js';
import type { ArchiveRowInput, ArchiveStore } from '../../store/archive.js';
import { openStore, type StoreSpec } from '../../store/testing/spec.js';
import { Archive } from '../archive.js';
import { ArchiveIngester } from '../ingest.js';

function need(name: string): string {
  const v = process.env[name];
  if (v === undefined || v === '') throw new Error(`${name} is not set`);
  return v;
}

const say = (line: string) => process.stdout.write(`${line}\n`);
const { spec } = JSON.parse(need('WARREN_STORE')) as { spec: StoreSpec };
const store = openStore(spec, { pruneIntervalMs: 0 });
const topology = defineTopology(JSON.parse(need('WARREN_TOPOLOGY')) as TopologyOptions);
const crash = process.env['WARREN_CRASH'] ?? '';
const crashAfter = crash.startsWith('after-commit:') ? Number(crash.slice('after-commit:'.length)) : 0;
const crashBeforeMark = crash.startsWith('before-mark:') ? Number(crash.slice('before-mark:'.length)) : 0;
let batches = 0;
let rows = 0;
// The store's archive, with a word after each commit (and the kill, when asked).
const archive = Object.create(store.archive) as ArchiveStore;
archive.insert = async (input: readonly ArchiveRowInput[]) => {
  const r = await store.archive.insert(input);
  batches++;
  rows += r.inserted;
  say(`committed ${rows}`);
  if (crashAfter > 0 && batches >= crashAfter) process.kill(process.pid, 'SIGKILL');
  return r;
};
const model = await amqp.connect(need('WARREN_AMQP_URL'), { noDelay: true });
model.on('error', () => undefined);
if (process.env['WARREN_CHILD_ROLE'] === 'replay') {
  const consumer = need('WARREN_CONSUMER');
  let marks = 0;
  archive.markReplayed = async (ids, mark) => {
    if (crashBeforeMark > 0 && ++marks >= crashBeforeMark) process.kill(process.pid, 'SIGKILL');
    return store.archive.markReplayed(ids, mark);
  };
  say('ready');
  const rate = Number(process.env['WARREN_RATE'] ?? 100);
  const r = await new Archive({ archive, processed: (c, ids) => store.processed(c, ids) }).replay(model, topology.consumer(consumer), {
    filter: { consumer },
    actor: 'child',
    batchSize: Number(process.env['WARREN_BATCH'] ?? 20),
    ...(rate > 0 ? { ratePerSecond: rate } : {}),
    leaseMs: Number(process.env['WARREN_LEASE_MS'] ?? 60_000),
    onProgress: (p) => say(`replayed ${p.replayed}`),
  });
  say(`done ${r.replayed}`);
  process.exit(0);
}
const ingester = new ArchiveIngester({ store: { archive }, topology, connection: async () => model }, { batchSize: Number(process.env['WARREN_BATCH'] ?? 20), maxBatchDelayMs: 5 });
ingester.start();
say('ready');
