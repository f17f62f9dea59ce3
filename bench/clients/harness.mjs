// The side of the client comparison (bench/clients.ts) that runs in a process of its
// own, in plain JavaScript with no TypeScript loader: one client, one pattern, one
// round. Each client module (amqplib.mjs, warren.mjs, ...) gives `connect()`, the
// publish of message number i (with a callback or as a promise) and a consumer; this
// file holds the patterns and the measuring, the same for every client.
//
//   node bench/clients/CLIENT.mjs '{"mode":"window","url":...,"n":50000,...}'
//
// Modes: `window` (at most `window` publishes unconfirmed, the caller keeps them),
// `burst` (all n started at once, then awaited), `serial` (each confirmed before the
// next), `consume` (drain n messages from `queue`, prefetch `prefetch`, one ack each,
// the JSON body parsed). Before measuring, `warm` messages go the same way (JIT); the
// figures are for the n after them. It prints one line: {"rate","cpuUs","n"}, messages
// per second and this process's own user + system CPU per message, in microseconds.
import { performance } from 'node:perf_hooks';
import { setImmediate } from 'node:timers';
import process from 'node:process';

/** The body every client sends: about 100 bytes of JSON, one field changed per message. */
export const PAYLOAD = Object.freeze({ orderId: 0, customer: 'c-000042', items: [{ sku: 'SKU-1', qty: 2 }], note: 'x'.repeat(24) });

/** Message number i, as the caller hands it to the client. */
export const message = (i) => ({ ...PAYLOAD, orderId: i });

/** The run's settings, as the driver passes them. */
export const config = JSON.parse(process.argv[2] ?? '{}');

function fail(error) {
  process.stderr.write(`${config.client ?? 'client'} ${config.mode}: ${error?.stack ?? error}\n`);
  process.exit(1);
}
process.on('unhandledRejection', fail);

/** `count` publishes through `publishCb(i, cb)`, at most `window` unconfirmed. */
function callbackWindow(publishCb, from, count, window) {
  return new Promise((resolve, reject) => {
    let next = from;
    let done = 0;
    const end = from + count;
    const confirmed = (err) => {
      if (err) return reject(err);
      if (++done === count) return resolve();
      if (next < end) publishCb(next++, confirmed);
    };
    while (next < end && next - from < window) publishCb(next++, confirmed);
  });
}

/** `count` publishes through `publishCb`, all started at once. */
function callbackBurst(publishCb, from, count) {
  return new Promise((resolve, reject) => {
    let done = 0;
    const confirmed = (err) => {
      if (err) return reject(err);
      if (++done === count) resolve();
    };
    for (let i = from; i < from + count; i++) publishCb(i, confirmed);
  });
}

/** `count` publishes through `publishCb`, each confirmed before the next. */
function callbackSerial(publishCb, from, count) {
  return new Promise((resolve, reject) => {
    let next = from;
    const end = from + count;
    const confirmed = (err) => {
      if (err) return reject(err);
      if (next === end) return resolve();
      publishCb(next++, confirmed);
    };
    publishCb(next++, confirmed);
  });
}

/** `count` publishes through `publish(i)` (a promise): `window` callers, each awaiting its publish before the next. */
async function promiseWindow(publish, from, count, window) {
  let next = from;
  const end = from + count;
  const caller = async () => {
    while (next < end) await publish(next++);
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, caller));
}

async function promiseBurst(publish, from, count) {
  const all = new Array(count);
  for (let i = 0; i < count; i++) all[i] = publish(from + i);
  await Promise.all(all);
}

async function promiseSerial(publish, from, count) {
  for (let i = from; i < from + count; i++) await publish(i);
}

/** Runs `count` publishes from number `from` in the configured pattern. */
function publishSome(client, from, count) {
  const { mode, window } = config;
  if (client.publishCb !== undefined) {
    if (mode === 'window') return callbackWindow(client.publishCb, from, count, window);
    if (mode === 'burst') return callbackBurst(client.publishCb, from, count);
    return callbackSerial(client.publishCb, from, count);
  }
  if (mode === 'window') return promiseWindow(client.publish, from, count, window);
  if (mode === 'burst') return promiseBurst(client.publish, from, count);
  return promiseSerial(client.publish, from, count);
}

/** Measures `work` (from its first step to its end): rate and CPU per message for `n`. */
function report(n, startedAt, cpuStart) {
  const ms = performance.now() - startedAt;
  const cpu = process.cpuUsage(cpuStart);
  return { rate: n / (ms / 1000), cpuUs: (cpu.user + cpu.system) / n, n };
}

/**
 * Consumes `warm + n` messages: `client.consume(handled)` starts the client's consumer,
 * which calls `handled()` once per message after its ack was written (or, for a client
 * that acks after the handler returns, from the handler, with `client.acked()` counting
 * the acks). The clock and the CPU count start at the first message after the warm ones.
 */
function consumeAll(client) {
  const { n, warm } = config;
  const total = warm + n;
  return new Promise((resolve, reject) => {
    let count = 0;
    let startedAt = 0;
    let cpuStart;
    const finish = () => {
      const acked = client.acked?.() ?? count;
      if (acked >= total) resolve(report(n, startedAt, cpuStart));
      else setImmediate(finish);
    };
    const handled = () => {
      count += 1;
      if (count === warm + 1) {
        startedAt = performance.now();
        cpuStart = process.cpuUsage();
      }
      if (count === total) finish();
    };
    Promise.resolve(client.consume(handled)).catch(reject);
  });
}

/** Runs one client's round as `config` says, prints its figures, and exits. */
export async function runClient(connect) {
  try {
    const client = await connect(config);
    let figures;
    if (config.mode === 'consume') {
      figures = await consumeAll(client);
    } else {
      const { n, warm } = config;
      if (warm > 0) await publishSome(client, 0, warm);
      const startedAt = performance.now();
      const cpuStart = process.cpuUsage();
      await publishSome(client, warm, n);
      figures = report(n, startedAt, cpuStart);
    }
    if (client.returned?.() > 0) throw new Error(`${client.returned()} publishes were returned unroutable`);
    await client.close();
    process.stdout.write(`${JSON.stringify(figures)}\n`);
    process.exit(0);
  } catch (error) {
    fail(error);
  }
}
