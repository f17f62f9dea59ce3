// Test helpers for the console: a console on the broker under test, requests with a user's CSRF token, and jobs followed to their end.
import { AMQP_URL, MGMT_URL, onTeardown, waitFor } from '../../../test/helpers.js';
import { ManagementClient } from '../../management/client.js';
import type { Topology } from '../../topology/declaration.js';
import type { ConsoleUser } from '../auth.js';
import { warrenConsole, type ConsoleOptions, type JobView, type WarrenConsole } from '../index.js';

export const OPERATOR: ConsoleUser = { user: 'alice', role: 'operator' };
export const VIEWER: ConsoleUser = { user: 'victor', role: 'viewer' };

/** A console over `topology` whose users are named by an `x-test-user` header (alice the operator, victor the viewer); closed after the test. */
export function testConsole(topology: Topology, options: Partial<ConsoleOptions> = {}): WarrenConsole {
  const ops = warrenConsole({
    topology,
    url: AMQP_URL,
    management: new ManagementClient({ url: MGMT_URL, timeoutMs: 5000 }),
    cacheMs: 0,
    sampleIntervalMs: 200,
    authorize: (req) => {
      const name = req.headers.get('x-test-user');
      return name === 'alice' ? OPERATOR : name === 'victor' ? VIEWER : null;
    },
    ...options,
  });
  onTeardown(() => ops.close());
  return ops;
}

/** GET as a user; returns status and text. */
export async function get(ops: WarrenConsole, path: string, user: ConsoleUser = OPERATOR, headers: Record<string, string> = {}): Promise<{ status: number; text: string; headers: Headers }> {
  const res = await ops.fetch(new Request(`http://console.test${ops.basePath}${path}`, { headers: { 'x-test-user': user.user, ...headers } }));
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/** The CSRF token a page gives this user. */
export async function csrfOf(ops: WarrenConsole, user: ConsoleUser = OPERATOR): Promise<string> {
  const { text } = await get(ops, '/actions', user);
  const m = /<meta name="warren-csrf" content="([^"]+)">/.exec(text);
  if (!m) throw new Error('no CSRF token on the page');
  return m[1] as string;
}

/** POSTs a form as a user; `csrf: false` leaves the token out. */
export async function post(
  ops: WarrenConsole,
  path: string,
  fields: Record<string, string | string[]>,
  options: { user?: ConsoleUser; csrf?: string | false; headers?: Record<string, string> } = {},
): Promise<{ status: number; text: string; location: string | null }> {
  const user = options.user ?? OPERATOR;
  const body = new URLSearchParams();
  for (const [k, v] of Object.entries(fields)) for (const one of Array.isArray(v) ? v : [v]) body.append(k, one);
  if (options.csrf !== false) body.set('_csrf', options.csrf ?? (await csrfOf(ops, user.role === 'operator' ? user : OPERATOR)));
  const res = await ops.fetch(
    new Request(`http://console.test${ops.basePath}${path}`, { method: 'POST', body, headers: { 'x-test-user': user.user, host: 'console.test', ...options.headers } }),
  );
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}

/** Waits for a job to reach one of `states`, and returns it. */
export async function jobUntil(ops: WarrenConsole, location: string | null, states: readonly string[], timeoutMs = 20_000): Promise<JobView> {
  if (!location) throw new Error('no job: the POST did not redirect');
  const id = location.split('/').pop() as string;
  let job: JobView | undefined;
  await waitFor(
    async () => {
      job = JSON.parse((await get(ops, `/api/jobs/${id}`)).text) as JobView;
      return states.includes(job.state);
    },
    `job ${id} reaches ${states.join(' or ')}`,
    timeoutMs,
  );
  return job as JobView;
}
