// The console's action record under attack: an identity nobody can choose, a sink checked
// before anything is done, a record written before each action, CSRF tokens bound to the
// session's role, and sign-in that tells nothing of who exists.
import { describe, expect, it } from 'vitest';
import { testTopology, waitFor } from '../../test/helpers.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { rawConnection } from '../../test/helpers.js';
import { anyOf, basicAuth, checkActionLog, hashPassword, memoryActionLog, parseUsers, tokenAuth, type ActionEntry, type ActionLog, type WarrenConsole } from './index.js';
import { post, testConsole as operatorConsole } from './testing/harness.js';
import { testConsole } from './testing/harness.js';

const OPERATOR_TOKEN = 'operator-token-0123456789abcdef';

function billingTopology() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
  }));
}

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

/** A request to the console as whoever `authorization` says. */
async function send(ops: WarrenConsole, path: string, authorization: string, form?: Record<string, string>): Promise<{ status: number; text: string; location: string | null }> {
  const init: RequestInit = { headers: { authorization, host: 'console.test' } };
  if (form) {
    const page = await ops.fetch(new Request(`http://console.test${ops.basePath}/actions`, { headers: { authorization } }));
    const csrf = /<meta name="warren-csrf" content="([^"]+)">/.exec(await page.text())?.[1] ?? '';
    init.method = 'POST';
    init.body = new URLSearchParams({ ...form, _csrf: csrf });
  }
  const res = await ops.fetch(new Request(`http://console.test${ops.basePath}${path}`, init));
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}

/** Waits until the job a POST started has ended, asking as `authorization`. */
async function ended(ops: WarrenConsole, location: string | null, authorization: string): Promise<void> {
  const id = (location ?? '').split('/').pop() as string;
  await waitFor(async () => ['done', 'stopped', 'failed'].includes((JSON.parse((await send(ops, `/api/jobs/${id}`, authorization)).text) as { state: string }).state), `job ${id} ends`);
}

describe('console audit: who is recorded', () => {
  it('a token holder is recorded as token:operator, apart from alice, and cannot sign in as alice', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const [id] = await publishParked(conn, topology, billing, failures(1));
    const users = parseUsers(`alice:operator:${await hashPassword('alice-password')}\n`);
    const log = memoryActionLog();
    const ops = testConsole(topology, { actionLog: log, authorize: anyOf(tokenAuth({ operator: OPERATOR_TOKEN }, { reservedNames: users.keys() }), basicAuth(users)) });
    const replay = `/parked/${billing.name}/replay`;

    // The token typed as alice's password is refused: it is not alice's.
    expect((await send(ops, '/', basic('alice', OPERATOR_TOKEN))).status).toBe(401);
    const byToken = await send(ops, replay, basic('mallory', OPERATOR_TOKEN), { scope: 'selected', id: 'no-such-message' });
    expect(byToken.status).toBe(303);
    await ended(ops, byToken.location, basic('mallory', OPERATOR_TOKEN));
    const byAlice = await send(ops, replay, basic('alice', 'alice-password'), { scope: 'selected', id: id as string });
    expect(byAlice.status).toBe(303);
    await ended(ops, byAlice.location, basic('alice', 'alice-password'));

    const records = (await log.list()).filter((r) => r.action === 'parked.replay');
    const actors = new Set(records.map((r) => r.actor));
    expect(actors).toEqual(new Set(['token:operator', 'alice']));
    expect(records.filter((r) => r.actor === 'alice').every((r) => r.filter?.['messageIds'] !== undefined && JSON.stringify(r.filter).includes(id as string))).toBe(true);
    expect(records.some((r) => r.actor === 'mallory')).toBe(false);
  });
});

/** A memory log that refuses every write once `failing` is set, as a full disk or a lost database would. */
function breakableLog(): ActionLog & { failing: boolean; entries: ActionEntry[] } {
  const inner = memoryActionLog();
  const log = {
    failing: false,
    entries: [] as ActionEntry[],
    async record(entry: ActionEntry) {
      if (log.failing) throw new Error('ENOSPC: no space left on device, write');
      log.entries.push(entry);
      return inner.record(entry);
    },
    list: inner.list.bind(inner),
  };
  return log;
}

async function depth(queue: string): Promise<number> {
  const ch = await (await rawConnection()).createChannel();
  try {
    return (await ch.checkQueue(queue)).messageCount;
  } finally {
    await ch.close();
  }
}

describe('console audit: the sink is checked before anything is served', () => {
  it('checkActionLog writes a console.start record, and refuses a sink that cannot be written, naming it and what to do', async () => {
    const log = breakableLog();
    await checkActionLog(log, { where: 'the test log', detail: { listen: '127.0.0.1:0' } });
    expect(log.entries).toMatchObject([{ actor: 'warren', action: 'console.start', outcome: 'ok', detail: { listen: '127.0.0.1:0' } }]);
    log.failing = true;
    await expect(checkActionLog(log, { where: 'the test log' })).rejects.toThrow(/the test log.*cannot be written.*ENOSPC.*Make it writable/);
  });
});

describe('console audit: recorded before it is done', () => {
  it('every action writes a started record first and an ended one after, linked by id', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ids = await publishParked(conn, topology, billing, failures(3));
    const log = breakableLog();
    const ops = operatorConsole(topology, { actionLog: log });
    const replayed = await post(ops, `/parked/${billing.name}/replay`, { scope: 'selected', id: ids[0] as string });
    expect(replayed.status).toBe(303);
    await waitFor(async () => (await log.list()).some((r) => r.action === 'parked.replay' && r.outcome !== 'started'), 'the replay ends');
    const exported = await post(ops, `/parked/${billing.name}/export`, {});
    expect(exported.status).toBe(200);
    const records = (await log.list()).reverse();
    const replay = records.filter((r) => r.action === 'parked.replay');
    expect(replay.map((r) => [r.outcome, r.count])).toEqual([['started', 0], ['ok', 1]]);
    expect(replay[1]?.detail?.['started']).toBe(replay[0]?.id);
    expect(replay[0]?.filter).toEqual(replay[1]?.filter);
    const exports = records.filter((r) => r.action === 'parked.export');
    expect(exports.map((r) => [r.outcome, r.count])).toEqual([['started', 0], ['ok', 2]]);
    expect(exports[1]?.detail?.['started']).toBe(exports[0]?.id);
  });

  it('a purge whose started record cannot be written is refused with 503, and deletes nothing', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ids = await publishParked(conn, topology, billing, failures(2));
    const log = breakableLog();
    const ops = operatorConsole(topology, { actionLog: log });
    const counted = await post(ops, `/parked/${billing.name}/purge/selected`, { id: ids });
    expect(counted.status).toBe(200);
    const token = /name="purge" value="([^"]+)"/.exec(counted.text)?.[1] as string;
    expect(token).toBeDefined();
    log.failing = true;
    const refused = await post(ops, `/parked/${billing.name}/purge`, { purge: token, confirm: '2' });
    expect(refused.status).toBe(503);
    expect(refused.text).toMatch(/action record could not be written.*ENOSPC.*Nothing was changed/s);
    expect(await depth(billing.parkedQueue)).toBe(2);
    // Nor does a replay start, or an export read.
    expect((await post(ops, `/parked/${billing.name}/replay`, { scope: 'selected', id: ids[0] as string })).status).toBe(503);
    expect((await post(ops, `/parked/${billing.name}/export`, {})).status).toBe(503);
    expect(await depth(billing.parkedQueue)).toBe(2);
    // Once the record can be written, the same confirmation purges.
    log.failing = false;
    const purged = await post(ops, `/parked/${billing.name}/purge`, { purge: token, confirm: '2' });
    expect(purged.status).toBe(200);
    expect(await depth(billing.parkedQueue)).toBe(0);
    expect((await log.list()).filter((r) => r.action === 'parked.purge').map((r) => [r.outcome, r.count])).toEqual([['ok', 2], ['started', 0]]);
  });
});

describe('console audit: CSRF tokens are bound to the role', () => {
  it("a viewer signed in under an operator's name gets a token the operator's POST is refused with", async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const [id] = await publishParked(conn, topology, billing, failures(1));
    const log = memoryActionLog();
    // As a proxy's headers or an application's sessions could: the same name, once as a viewer.
    const ops = testConsole(topology, {
      actionLog: log,
      authorize: (req) => (req.headers.get('authorization') === 'viewer' ? { user: 'alice', role: 'viewer' } : req.headers.get('authorization') === 'operator' ? { user: 'alice', role: 'operator' } : null),
    });
    const tokenOf = async (who: string) => /<meta name="warren-csrf" content="([^"]+)">/.exec(await (await ops.fetch(new Request('http://console.test/actions', { headers: { authorization: who } }))).text())?.[1] as string;
    const viewerToken = await tokenOf('viewer');
    const operatorToken = await tokenOf('operator');
    expect(viewerToken).not.toBe(operatorToken);
    const replay = (csrf: string) =>
      ops.fetch(new Request(`http://console.test/parked/${billing.name}/replay`, { method: 'POST', headers: { authorization: 'operator', host: 'console.test' }, body: new URLSearchParams({ scope: 'selected', id: id as string, _csrf: csrf }) }));
    expect((await replay(viewerToken)).status).toBe(403);
    expect(await log.list()).toEqual([]);
    expect((await replay(operatorToken)).status).toBe(303);
  });
});
