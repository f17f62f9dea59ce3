// Parked-queue commands against interference: consumers parking more while a command
// runs, the command killed with SIGKILL, its connection closed by the broker. Each
// message is counted by identity before and after: nothing the command did not target
// is lost or duplicated, and everything it targeted is handled exactly once.
import { readdir, readFile, readlink } from 'node:fs/promises';
import type { ChildProcess } from 'node:child_process';
import type * as amqp from 'amqplib';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { depth, MGMT_URL, queueCounts } from '../../../test/helpers.js';
import { HEADER } from '../../headers.js';
import type { ConsumerTopology, Topology } from '../../topology/declaration.js';
import { declared, failures, fastConnection, parkedHeaders, peekIds, publishParked, takeAll } from '../../park/testing/fixtures.js';
import { assertBuilt, topologyModule, warren } from '../testing/run.js';

beforeAll(() => assertBuilt());
// Thousands of messages read one by one, some runs twice: a quorum queue on a busy machine takes a minute.
vi.setConfig({ testTimeout: 240_000 });

function build(queueType: 'classic' | 'quorum') {
  return ({ exchange, name }: { exchange: string; name: (c: string) => string }) => ({
    exchange,
    queueType,
    retry: { delays: ['20ms'] as const, maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
  });
}

/** How many times each id is in the list. */
function census(ids: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

/** Ids in the list more than once. */
function twice(ids: readonly string[]): string[] {
  return [...census(ids)].filter(([, n]) => n > 1).map(([id]) => id);
}

/**
 * A consumer parking HttpError messages (ids `late-N`) one after another, each confirmed,
 * until stopped; returns the ids it parked, in order.
 */
function parker(conn: amqp.ChannelModel, topology: Topology, consumer: ConsumerTopology) {
  const ids: string[] = [];
  let stopped = false;
  const running = (async () => {
    const ch = await conn.createConfirmChannel();
    try {
      while (!stopped) {
        const id = `late-${String(ids.length + 1).padStart(5, '0')}`;
        ch.sendToQueue(consumer.parkedQueue, Buffer.from('{}'), { messageId: id, persistent: true, headers: parkedHeaders(consumer, topology.exchange, { errorClass: 'HttpError' }) });
        await ch.waitForConfirms();
        ids.push(id);
        await new Promise((r) => setTimeout(r, 2));
      }
    } finally {
      await ch.close().catch(() => undefined);
    }
  })();
  return {
    ids,
    async stop(): Promise<string[]> {
      stopped = true;
      await running;
      return ids;
    },
  };
}

/** Resolves once `count` parked messages or more have been parked by `p`. */
async function parkedAtLeast(p: { ids: string[] }, count: number): Promise<void> {
  while (p.ids.length < count) await new Promise((r) => setTimeout(r, 5));
}

/** `initial` parked messages, every other one a TimeoutError (ids `m-N`). */
async function setup(queueType: 'classic' | 'quorum', initial: number) {
  const mod = await topologyModule(build(queueType));
  const conn = await declared(mod.topology);
  const billing = mod.topology.consumer('billing');
  const ids = await publishParked(conn, mod.topology, billing, failures(initial, (i) => (i % 2 === 0 ? { errorClass: 'TimeoutError', message: `timed out after ${i} ms` } : {})));
  const timeouts = ids.filter((_, i) => i % 2 === 0);
  const others = ids.filter((_, i) => i % 2 !== 0);
  return { ...mod, conn, billing, ids, timeouts, others };
}

/** Polls until `check` holds, then calls `act` (with the child, once it runs). */
function when(check: () => Promise<boolean>, act: (child: ChildProcess) => void | Promise<void>): (child: ChildProcess) => void {
  return (child) => {
    void (async () => {
      while (child.exitCode === null && child.signalCode === null) {
        if (await check().catch(() => false)) {
          await act(child);
          return;
        }
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
  };
}

/** Ready messages in a queue (held or unacknowledged ones not counted). */
const ready = depth;

/**
 * Waits until the queues have no consumer and hold at least `atLeast` ready messages
 * between them, the count the same ten reads in a row, 30 ms apart: a killed command's
 * held messages are back. The broker returns them some time after the connection has
 * left the management API (150 ms and more on a busy machine), and a queue drops a
 * consumer and takes back what it held in one step, so no consumer means all is back.
 */
async function stable(conn: amqp.ChannelModel, queues: readonly string[], atLeast = 0): Promise<void> {
  let last = -1;
  let same = 0;
  for (let tries = 0; same < 10; tries++) {
    let sum = 0;
    let readers = 0;
    for (const q of queues) {
      const counts = await queueCounts(conn, q);
      sum += counts.ready;
      readers += counts.consumers;
    }
    same = sum === last && sum >= atLeast && readers === 0 ? same + 1 : 0;
    last = sum;
    if (tries > 1000) throw new Error(readers > 0 ? `${queues.join(' and ')} still have ${readers} consumers` : `${queues.join(' and ')} hold ${sum} ready messages, not the ${atLeast} or more expected: messages were lost`);
    await new Promise((r) => setTimeout(r, 30));
  }
}

/** The local TCP ports a process has open (from /proc), to find its AMQP connection. */
async function localPorts(pid: number): Promise<Set<number>> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [] as string[])) {
    const link = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const m = /^socket:\[(\d+)\]$/.exec(link);
    if (m) inodes.add(m[1] as string);
  }
  const ports = new Set<number>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(file, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length > 9 && inodes.has(cols[9] as string)) ports.add(parseInt((cols[1] as string).split(':')[1] as string, 16));
    }
  }
  return ports;
}

/** The management API: base address and authorization header. */
function mgmtApi(): { base: string; auth: string } {
  const mgmt = new URL(MGMT_URL);
  return { base: `${mgmt.protocol}//${mgmt.host}`, auth: `Basic ${Buffer.from(`${decodeURIComponent(mgmt.username)}:${decodeURIComponent(mgmt.password)}`).toString('base64')}` };
}

/**
 * Kills the child with SIGKILL, noting its local ports first; {@link settled} then waits
 * until the broker has dropped that connection (and so returned what it held).
 */
function killer() {
  let ports = new Set<number>();
  return {
    async kill(child: ChildProcess): Promise<void> {
      ports = await localPorts(child.pid as number);
      child.kill('SIGKILL');
    },
    /** Waits until the connection is gone and the queues' ready counts have stopped changing (held messages are back). */
    async settled(conn: amqp.ChannelModel, queues: readonly string[], atLeast = 0): Promise<void> {
      const { base, auth } = mgmtApi();
      for (let tries = 0; ; tries++) {
        const res = await fetch(`${base}/api/connections?columns=name,peer_port`, { headers: { authorization: auth } });
        const connections = (await res.json()) as Array<{ peer_port: number }>;
        if (!connections.some((c) => ports.has(c.peer_port))) break;
        if (tries > 500) throw new Error('the killed command’s connection is still open on the broker');
        await new Promise((r) => setTimeout(r, 20));
      }
      await stable(conn, queues, atLeast);
    },
  };
}

/**
 * Closes the child's AMQP connection through the management API, as an operator (or the
 * broker) would. The child is stopped meanwhile: a new connection shows in the management
 * API only after its statistics tick, and a quick command would finish before the close.
 */
async function closeConnectionOf(child: ChildProcess): Promise<void> {
  child.kill('SIGSTOP');
  try {
    await closeConnectionNow(child);
  } finally {
    child.kill('SIGCONT');
  }
}

async function closeConnectionNow(child: ChildProcess): Promise<void> {
  const { base, auth } = mgmtApi();
  for (let tries = 0; tries < 1000; tries++) {
    const ports = await localPorts(child.pid as number);
    const res = await fetch(`${base}/api/connections?columns=name,peer_port`, { headers: { authorization: auth } });
    const connections = (await res.json()) as Array<{ name: string; peer_port: number }>;
    // Every connection the command has (it may publish on one and read on another).
    const ours = connections.filter((c) => ports.has(c.peer_port));
    if (ours.length > 0) {
      for (const c of ours) {
        const del = await fetch(`${base}/api/connections/${encodeURIComponent(c.name)}`, { method: 'DELETE', headers: { authorization: auth, 'x-reason': 'closed by a test' } });
        expect(del.status).toBeLessThan(300);
      }
      return;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error('the command’s AMQP connection was not found in the management API');
}

describe.each(['classic', 'quorum'] as const)('parked commands while consumers park more (%s parked queue)', (queueType) => {
  it('purge deletes exactly what it counted; messages parked meanwhile stay, each once', async () => {
    const { env, conn, billing, topology, ids } = await setup(queueType, 600);
    const late = parker(conn, topology, billing);
    await parkedAtLeast(late, 3);
    const r = await warren(['parked', 'purge', 'billing', '--yes', '--json'], { env, timeoutMs: 120_000 });
    const lateIds = await late.stop();
    expect(r.code, r.stderr).toBe(0);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    // Every message parked before the command is gone ...
    expect(left.filter((id) => ids.includes(id))).toEqual([]);
    // ... and of those parked while it ran, the ones it counted (the first few) are gone, the rest stay.
    const removedLate = lateIds.filter((id) => !left.includes(id));
    expect(removedLate).toEqual(lateIds.slice(0, removedLate.length));
    // (On a quorum queue those it kept went to the back, behind any parked during the walk.)
    expect(new Set(left)).toEqual(new Set(lateIds.slice(removedLate.length)));
    expect((JSON.parse(r.stdout) as { removed: number }).removed).toBe(ids.length + removedLate.length);
  });

  it('purge with a filter deletes only the matching messages it counted', async () => {
    const { env, conn, billing, topology, timeouts, others } = await setup(queueType, 600);
    const late = parker(conn, topology, billing);
    await parkedAtLeast(late, 3);
    const r = await warren(['parked', 'purge', 'billing', '--error-class', 'TimeoutError', '--yes'], { env, timeoutMs: 120_000 });
    const lateIds = await late.stop();
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`Deleted ${timeouts.length} parked messages`));
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set([...others, ...lateIds]));
  });

  it('replay moves exactly the matching messages, each once; the others and those parked meanwhile stay, each once', async () => {
    const { env, conn, billing, topology, timeouts, others } = await setup(queueType, 600);
    const late = parker(conn, topology, billing);
    await parkedAtLeast(late, 3);
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'TimeoutError'], { env, timeoutMs: 120_000 });
    const lateIds = await late.stop();
    expect(r.code, r.stderr).toBe(0);
    const replayed = (await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId));
    expect(replayed).toEqual(timeouts);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set([...others, ...lateIds]));
  });

  it('export writes every message parked before it began once, and leaves every message parked once', async () => {
    const { env, conn, billing, topology, ids } = await setup(queueType, 600);
    const late = parker(conn, topology, billing);
    await parkedAtLeast(late, 3);
    const r = await warren(['parked', 'export', 'billing'], { env, timeoutMs: 120_000 });
    const lateIds = await late.stop();
    expect(r.code, r.stderr).toBe(0);
    const exported = r.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { messageId: string }).messageId);
    expect(twice(exported)).toEqual([]);
    expect(exported.filter((id) => ids.includes(id))).toEqual(ids);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set([...ids, ...lateIds]));
  });
});

describe.each(['classic', 'quorum'] as const)('parked commands killed half-way, then run again (%s parked queue)', (queueType) => {
  // Enough messages for the kill to land mid-way; a quorum queue is read more slowly.
  const n = queueType === 'quorum' ? 1000 : 3000;
  it('purge: every message that was not to be deleted is parked exactly once', async () => {
    const { env, conn, billing, others } = await setup(queueType, n);
    const k = killer();
    const killed = await warren(['parked', 'purge', 'billing', '--error-class', 'TimeoutError', '--yes'], {
      env,
      timeoutMs: 120_000,
      onSpawn: when(async () => (await ready(conn, billing.parkedQueue)) < n - 100, k.kill),
    });
    expect(killed.signal).toBe('SIGKILL');
    await k.settled(conn, [billing.parkedQueue], others.length);
    const r = await warren(['parked', 'purge', 'billing', '--error-class', 'TimeoutError', '--yes'], { env, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const left = await peekIds(conn, billing.parkedQueue);
    const said = `the killed run said:\n${killed.stdout}${killed.stderr}\nthe second run said:\n${r.stdout}${r.stderr}`;
    expect(twice(left), said).toEqual([]);
    expect(new Set(left), said).toEqual(new Set(others));
  });

  it('replay: every matching message is replayed exactly once, every other one parked exactly once', async () => {
    const { env, conn, billing, timeouts, others } = await setup(queueType, n);
    const k = killer();
    const killed = await warren(['parked', 'replay', 'billing', '--error-class', 'TimeoutError'], {
      env,
      timeoutMs: 120_000,
      onSpawn: when(async () => (await ready(conn, billing.queue)) >= n / 10, k.kill),
    });
    expect(killed.signal).toBe('SIGKILL');
    await k.settled(conn, [billing.parkedQueue, billing.queue], n);
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'TimeoutError'], { env, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const replayed = (await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId));
    expect(twice(replayed)).toEqual([]);
    expect(new Set(replayed)).toEqual(new Set(timeouts));
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set(others));
  });

  it('export: every message stays parked exactly once, and a second export writes each once', async () => {
    const { env, conn, billing, ids } = await setup(queueType, n);
    let lines = 0;
    const k = killer();
    const killed = await warren(['parked', 'export', 'billing'], {
      env,
      timeoutMs: 120_000,
      onSpawn: (child) => {
        let killing = false;
        child.stdout?.on('data', (d: Buffer | string) => {
          lines += String(d).split('\n').length - 1;
          if (lines >= n / 6 && !killing) {
            killing = true;
            void k.kill(child);
          }
        });
      },
    });
    expect(killed.signal).toBe('SIGKILL');
    await k.settled(conn, [billing.parkedQueue], n);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set(ids));
    // The peek put every message back with one nack; the queue takes them back a little later.
    await stable(conn, [billing.parkedQueue], n);
    const r = await warren(['parked', 'export', 'billing'], { env, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const exported = r.stdout.trim().split('\n').map((l) => (JSON.parse(l) as { messageId: string }).messageId);
    expect(twice(exported)).toEqual([]);
    expect(new Set(exported)).toEqual(new Set(ids));
  });
});

describe.each(['classic', 'quorum'] as const)('parked commands whose connection the broker closes (%s parked queue)', (queueType) => {
  const n = queueType === 'quorum' ? 1000 : 2000;
  it('replay: says so, and run again replays every matching message exactly once', async () => {
    const { env, conn, billing, timeouts, others } = await setup(queueType, n);
    const closed = await warren(['parked', 'replay', 'billing', '--error-class', 'TimeoutError', '--rate', '500'], {
      env,
      timeoutMs: 120_000,
      onSpawn: when(async () => (await ready(conn, billing.queue)) >= 50, closeConnectionOf),
    });
    expect(closed.code).not.toBe(0);
    expect(closed.stderr).toMatch(/closed/i);
    await stable(conn, [billing.parkedQueue, billing.queue], n);
    const r = await warren(['parked', 'replay', 'billing', '--error-class', 'TimeoutError'], { env, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const replayed = (await takeAll(conn, billing.queue)).map((m) => String(m.properties.messageId));
    expect(twice(replayed)).toEqual([]);
    expect(new Set(replayed)).toEqual(new Set(timeouts));
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set(others));
  });

  it('purge: says so, and run again deletes exactly the matching messages', async () => {
    const { env, conn, billing, others } = await setup(queueType, n);
    const closed = await warren(['parked', 'purge', 'billing', '--error-class', 'TimeoutError', '--yes'], {
      env,
      timeoutMs: 120_000,
      onSpawn: when(async () => (await ready(conn, billing.parkedQueue)) < n - 100, closeConnectionOf),
    });
    expect(closed.code).not.toBe(0);
    expect(closed.stderr).toMatch(/closed/i);
    await stable(conn, [billing.parkedQueue], others.length);
    const r = await warren(['parked', 'purge', 'billing', '--error-class', 'TimeoutError', '--yes'], { env, timeoutMs: 120_000 });
    expect(r.code, r.stderr).toBe(0);
    const left = await peekIds(conn, billing.parkedQueue);
    expect(twice(left)).toEqual([]);
    expect(new Set(left)).toEqual(new Set(others));
    // The failure headers are still those written when the message was parked.
    const [first] = await takeAll(await fastConnection(), billing.parkedQueue);
    expect(first?.properties.headers?.[HEADER.errorClass]).toBe('HttpError');
  });
});
