// The console's action record under attack: an identity nobody can choose, a sink checked
// before anything is done, a record written before each action, CSRF tokens bound to the
// session's role, and sign-in that tells nothing of who exists.
import { describe, expect, it } from 'vitest';
import { testTopology, waitFor } from '../../test/helpers.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { anyOf, basicAuth, hashPassword, memoryActionLog, parseUsers, tokenAuth, type WarrenConsole } from './index.js';
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
