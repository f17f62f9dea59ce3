import { describe, expect, it } from 'vitest';
import { connectWarren, rawConnection, testTopology, waitFor } from '../../test/helpers.js';
import type { MessageContext } from '../consume/types.js';
import { PermanentError } from '../errors.js';
import { listParked } from '../park/operations.js';
import { declared, failures, publishParked } from '../park/testing/fixtures.js';
import { CSP, memoryActionLog, type ActionRecord, type Overview } from './index.js';
import { redactText } from './redact.js';
import { csrfOf, get, jobUntil, OPERATOR, post, testConsole, VIEWER } from './testing/harness.js';

function billingTopology() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: {
      billing: { queue: name('billing'), bindings: ['order.created'] },
      email: { queue: name('email'), bindings: ['order.created'] },
    },
  }));
}

async function depth(queue: string): Promise<number> {
  const conn = await rawConnection();
  const ch = await conn.createChannel();
  try {
    return (await ch.checkQueue(queue)).messageCount;
  } finally {
    await ch.close();
  }
}

describe('console: overview', () => {
  it('shows each consumer with its parked depth in alert colour, the problems of warren status, and the same as JSON', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    await publishParked(conn, topology, billing, failures(2));
    const ops = testConsole(topology);
    // The management API's figures lag by its statistics interval (5 s by default).
    const rowOf = (html: string) => new RegExp(`<tr data-consumer="${billing.name.replace(/\./g, '\\.')}">[\\s\\S]*?</tr>`).exec(html)?.[0] ?? '';
    let page = await get(ops, '/');
    await waitFor(async () => {
      page = await get(ops, '/');
      return /<td class="n alert" data-field="parked">2<\/td>/.test(rowOf(page.text));
    }, 'the page shows two parked, in alert colour');
    const row = rowOf(page.text);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toBe(CSP);
    expect(CSP).toContain("frame-ancestors 'none'");
    expect(CSP).toContain("default-src 'self'");
    expect(row).toMatch(/data-field="work">0</);
    expect(page.text).toMatch(/<li data-kind="parked" data-consumer="[^"]*billing">/);
    // No inline script or style: only files of the console's own.
    expect(page.text).not.toMatch(/<script(?![^>]*\bsrc=)/);
    expect(page.text).not.toMatch(/<style|\sstyle=/);

    let json = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    await waitFor(async () => {
      json = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
      return json.consumers.find((c) => c.name === billing.name)?.parked.depth === 2;
    }, 'the JSON shows two parked');
    const b = json.consumers.find((c) => c.name === billing.name);
    expect(b?.tiers.map((t) => t.delay)).toEqual(['20ms']);
    expect(json.problems.filter((p) => p.kind === 'parked').map((p) => p.consumer)).toEqual([billing.name]);
    expect(json.ok).toBe(false);
    type History = Record<string, { t: number[]; parked: (number | null)[] }>;
    await waitFor(async () => ((JSON.parse((await get(ops, '/api/history')).text) as History)[billing.name]?.parked.at(-1) ?? null) === 2, 'a sample with the parked depth');
  });

  it('serves its script, stylesheet and uPlot as files, under 100 KB together', async () => {
    const ops = testConsole(billingTopology());
    let bytes = 0;
    for (const [path, type] of [
      ['/assets/console.js', 'text/javascript'],
      ['/assets/console.css', 'text/css'],
      ['/assets/uplot.js', 'text/javascript'],
      ['/assets/uplot.css', 'text/css'],
    ] as const) {
      const res = await get(ops, path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type')).toContain(type);
      bytes += Buffer.byteLength(res.text);
    }
    expect(bytes).toBeGreaterThan(50_000);
    expect(bytes).toBeLessThan(100 * 1024);
  });
});

describe('console: who may do what', () => {
  it('answers 401 (with the challenge) when authorize says no one, and lets a viewer read', async () => {
    const ops = testConsole(billingTopology(), { challenge: 'Basic realm="warren"' });
    const res = await ops.fetch(new Request('http://console.test/'));
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe('Basic realm="warren"');
    expect((await get(ops, '/', VIEWER)).status).toBe(200);
  });

  it('refuses a POST without the CSRF token, with a wrong one, or from another origin (403), and a viewer (403)', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const [id] = await publishParked(conn, topology, billing, failures(1));
    const log = memoryActionLog();
    const ops = testConsole(topology, { actionLog: log });
    const path = `/parked/${billing.name}/replay`;
    const fields = { scope: 'selected', id: id as string };
    expect((await post(ops, path, fields, { csrf: false })).status).toBe(403);
    expect((await post(ops, path, fields, { csrf: 'forged' })).status).toBe(403);
    // A viewer's own token is right, and still not enough.
    expect((await post(ops, path, fields, { user: VIEWER, csrf: await csrfOf(ops, VIEWER) })).status).toBe(403);
    // Another user's token is not this user's.
    expect((await post(ops, path, fields, { csrf: await csrfOf(ops, VIEWER) })).status).toBe(403);
    expect((await post(ops, path, fields, { headers: { origin: 'http://evil.example' } })).status).toBe(403);
    expect((await post(ops, path, fields, { headers: { origin: 'null' } })).status).toBe(403);
    expect(await log.list({ limit: 10 })).toEqual([]);
    expect(await depth(billing.parkedQueue)).toBe(1);
    // A viewer sees no action forms.
    const viewerPage = await get(ops, `/parked/${billing.name}`, VIEWER);
    expect(viewerPage.text).not.toContain('data-action="replay');
    const ok = await post(ops, path, fields);
    expect(ok.status).toBe(303);
    await jobUntil(ops, ok.location, ['done']);
    expect(await depth(billing.parkedQueue)).toBe(0);
  });

  it('answers only to the hosts it is given', async () => {
    const ops = testConsole(billingTopology(), { allowedHosts: ['127.0.0.1:8780'] });
    expect((await get(ops, '/', OPERATOR, { host: 'rebound.example:8780' })).status).toBe(403);
    expect((await get(ops, '/', OPERATOR, { host: '127.0.0.1:8780' })).status).toBe(200);
  });
});

describe('console: hostile input is text', () => {
  const HOSTILE = '<img src=x onerror=alert(1)>';
  it('escapes bodies, error texts, stacks and headers on the parked, message and purge pages', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const [id] = await publishParked(conn, topology, billing, [
      {
        id: 'evil-1',
        errorClass: '<script>alert(2)</script>',
        message: `${HOSTILE} </script><script>alert(3)</script>`,
        stack: `at <svg onload=alert(4)> (/app/x.js:1:1)`,
        routingKey: 'order.created',
        body: { note: `</script><script>alert(5)</script>${HOSTILE}` },
        extraHeaders: { 'x-note': '<iframe src=javascript:alert(6)>' },
      },
    ]);
    const ops = testConsole(topology);
    const pages = [
      await get(ops, `/parked/${billing.name}`),
      await get(ops, `/parked/${billing.name}/messages/${id}`),
      await post(ops, `/parked/${billing.name}/purge/filter`, {}),
    ];
    for (const p of pages) {
      expect(p.status).toBe(200);
      expect(p.text).not.toContain('<img src=x');
      expect(p.text).not.toContain('<script>alert');
      expect(p.text).not.toContain('</script><script>');
      expect(p.text).not.toContain('<svg');
      expect(p.text).not.toContain('<iframe');
    }
    const message = pages[1]?.text ?? '';
    expect(message).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(message).toContain('&lt;/script&gt;&lt;script&gt;alert(5)&lt;/script&gt;');
    expect(message).toContain('at &lt;svg onload=alert(4)&gt;');
    expect(message).toContain('&lt;iframe src=javascript:alert(6)&gt;');
    // The timeline is there too, and as text.
    expect(message).toMatch(/<li data-event="parked">/);
    const overview = JSON.parse((await get(ops, '/api/overview')).text) as Overview;
    expect(overview.consumers.length).toBe(2);
  });
});

describe('console: another consumer of the parked queue', () => {
  it('says so on the parked page, and a message it holds is not "never parked"', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    const ids = await publishParked(conn, topology, billing, failures(3));
    const other = await conn.createChannel();
    await other.prefetch(1);
    let held = 0;
    await other.consume(billing.parkedQueue, () => void (held += 1), { noAck: false });
    await waitFor(() => held === 1, 'the other consumer to hold the first message');
    const ops = testConsole(topology);
    const page = await get(ops, `/parked/${billing.name}`);
    expect(page.status).toBe(200);
    expect(page.text).toMatch(/id="parked-incomplete">Another consumer was reading [^<]*: the messages it held are not shown/);
    const message = await get(ops, `/parked/${billing.name}/messages/${ids[0]}`);
    expect(message.status).toBe(404);
    expect(message.text).toMatch(/or another consumer of [^ ]+ is holding it: look again once it is gone/);
    await other.close();
    await waitFor(async () => (await get(ops, `/parked/${billing.name}/messages/${ids[0]}`)).status === 200, 'the message to be readable once the other consumer lets go');
    expect((await get(ops, `/parked/${billing.name}`)).text).not.toContain('parked-incomplete');
  });
});

describe('console: secrets', () => {
  it('never shows the password of the broker or database URL', async () => {
    const topology = billingTopology();
    // A broker that does not answer, so the page also shows the connection error.
    const ops = testConsole(topology, { url: 'amqp://ops:amqp-hunter2@127.0.0.1:1/prod', management: false, databaseName: 'postgres://app:pg-hunter2@db.internal/shop' });
    const page = await get(ops, '/');
    expect(page.status).toBe(200);
    expect(page.text).toContain('amqp://ops:***@127.0.0.1:1/prod');
    expect(page.text).toContain('postgres://app:***@db.internal/shop');
    expect(page.text).toMatch(/data-kind="unreadable"/);
    for (const path of ['/', '/api/overview', `/parked/${topology.consumer('billing').name}`]) {
      const res = await get(ops, path);
      expect(res.text, path).not.toContain('hunter2');
    }
  });

  it('names the broker as `brokerName` says at each page, password masked; mounted, the node of the application\'s connection', async () => {
    const topology = billingTopology();
    await declared(topology);
    const footer = (html: string) => /<span id="broker">([^<]*)<\/span>/.exec(html)?.[1];
    let node = 'amqp://ops:node-hunter2@rabbit-1:5672/shop';
    const named = testConsole(topology, { brokerName: () => node });
    expect(footer((await get(named, '/')).text)).toBe('broker amqp://ops:***@rabbit-1:5672/shop');
    node = 'rabbit-2:5672 (RabbitMQ 3.10.8, node 2 of 2 in --url)';
    expect(footer((await get(named, '/')).text)).toBe('broker rabbit-2:5672 (RabbitMQ 3.10.8, node 2 of 2 in --url)');
    const failing = testConsole(topology, {
      url: 'amqp://ops:amqp-hunter2@127.0.0.1:5672/',
      brokerName: () => {
        throw new Error('no node');
      },
    });
    expect(footer((await get(failing, '/')).text)).toBe('broker amqp://ops:***@127.0.0.1:5672/');
    // Mounted with the application's connection: the node it is on, once the console has used it.
    const conn = await rawConnection();
    const given = testConsole(topology, { connection: () => Promise.resolve(conn) });
    expect(footer((await get(given, `/parked/${topology.consumer('billing').name}`)).text)).toMatch(/^broker 127\.0\.0\.1:\d+ \(RabbitMQ \d+\.\d+\.\d+\)$/);
    const warren = await connectWarren(topology);
    const mounted = testConsole(topology, { warren });
    expect(footer((await get(mounted, '/')).text)).toMatch(/^broker 127\.0\.0\.1:\d+ \(RabbitMQ \d+\.\d+\.\d+\)$/);
    expect(() => testConsole(topology, { brokerName: 42 as unknown as string })).toThrow(/brokerName/);
  });

  it('masks passwords in any URL of an error text', () => {
    expect(redactText('connect to postgres://app:s3cret@db:5432/x failed; also amqp://u:p%40ss@h/v and ?password=abc')).toBe('connect to postgres://app:***@db:5432/x failed; also amqp://u:***@h/v and ?password=***');
  });
});

describe('console: replay, canary, purge', () => {
  it("replays one group as a job: the messages reach the failing consumer's queue only, the other group stays parked, and the action is recorded", async () => {
    const topology = billingTopology();
    const warren = await connectWarren(topology);
    const billing = topology.consumer('billing');
    const email = topology.consumer('email');
    const consumer = await warren.consume('billing', async (p: { cause: string }, _ctx: MessageContext) => {
      throw new PermanentError(p.cause === 'a' ? 'customer has no address' : 'tax table missing');
    });
    for (const cause of ['a', 'a', 'a', 'b', 'b']) await warren.publish('order.created', { cause });
    const conn = await rawConnection();
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 5, 'five parked');
    // Nobody consumes now: where the copies go can be counted.
    await consumer.close();
    expect(await depth(email.queue)).toBe(5);

    const log = memoryActionLog();
    const ops = testConsole(topology, { actionLog: log });
    const page = await get(ops, `/parked/${billing.name}`);
    const groups = [...page.text.matchAll(/<tr data-fingerprint="([^"]+)">\s*<td class="n" data-field="count">(\d+)<\/td>/g)].map((m) => ({ fingerprint: m[1] as string, count: Number(m[2]) }));
    expect(groups.map((g) => g.count)).toEqual([3, 2]);
    expect(page.text).toContain('customer has no address');

    const res = await post(ops, `/parked/${billing.name}/replay`, { scope: 'group', fingerprint: groups[0]?.fingerprint as string, rate: '100' });
    expect(res.status).toBe(303);
    const job = await jobUntil(ops, res.location, ['done', 'failed', 'stopped']);
    expect(job).toMatchObject({ state: 'done', kind: 'replay', user: 'alice' });
    expect(job.progress.replayed).toBe(3);
    expect(await depth(billing.queue)).toBe(3);
    expect(await depth(email.queue)).toBe(5);
    const left = (await listParked(conn, billing)).messages;
    expect(left.map((m) => m.errorMessage)).toEqual(['tax table missing', 'tax table missing']);

    const entries = await log.list({ limit: 10 });
    const done = entries.find((e: ActionRecord) => e.action === 'parked.replay');
    expect(done).toMatchObject({ actor: 'alice', consumer: billing.name, count: 3, outcome: 'ok' });
    expect(done?.filter?.['fingerprint']).toBe(groups[0]?.fingerprint);
    const actions = await get(ops, '/actions');
    expect(actions.text).toMatch(/<td data-field="action">parked\.replay<\/td>/);
  });

  it('a canary replay sends the first N, sees them come back while the cause remains, and stops without touching the rest', async () => {
    const topology = billingTopology();
    const warren = await connectWarren(topology);
    const billing = topology.consumer('billing');
    await warren.consume('billing', async () => {
      throw new PermanentError('still broken');
    });
    for (let i = 0; i < 5; i++) await warren.publish('order.created', { i });
    const conn = await rawConnection();
    await waitFor(async () => (await listParked(conn, billing)).messages.length === 5, 'five parked');
    const fingerprint = (await listParked(conn, billing)).messages[0]?.fingerprint as string;
    const ops = testConsole(topology);
    const res = await post(ops, `/parked/${billing.name}/canary`, { fingerprint, n: '2', window: '20' });
    expect(res.status).toBe(303);
    const waiting = await jobUntil(ops, res.location, ['awaiting-decision', 'failed', 'done']);
    expect(waiting.state).toBe('awaiting-decision');
    expect(waiting.canary).toMatchObject({ n: 2, sent: 2, returned: 2, rest: 3, verdict: 'failed' });
    // While it awaits a decision, no second job may walk the same parked queue.
    const second = await post(ops, `/parked/${billing.name}/replay`, { scope: 'filter' });
    expect(second.status).toBe(409);
    expect(second.text).toMatch(/canary job on (&#39;|')billing(&#39;|').*still awaiting-decision/);
    const stop = await post(ops, `${(res.location as string).replace(ops.basePath, '')}/stop`, {});
    expect(stop.status).toBe(303);
    const stopped = await jobUntil(ops, res.location, ['stopped', 'done', 'failed']);
    expect(stopped.state).toBe('stopped');
    // The two canaries are back, parked again once more; the other three were never replayed.
    const parked = (await listParked(conn, billing)).messages;
    expect(parked.length).toBe(5);
    expect(parked.filter((m) => m.replays === 1).length).toBe(2);
  });

  it('purges only after the count is typed, only what was counted, and offers the export first', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    await publishParked(conn, topology, billing, failures(3, (i) => ({ message: i < 2 ? 'gone for good' : 'other' })));
    const log = memoryActionLog();
    const ops = testConsole(topology, { actionLog: log });
    const confirm = await post(ops, `/parked/${billing.name}/purge/filter`, { error: 'gone' });
    expect(confirm.status).toBe(200);
    expect(confirm.text).toMatch(/<b id="purge-count">2<\/b>/);
    // The export button posts the same selection.
    const exportForm = /<form class="inline" id="purge-export" method="post" action="([^"]+)">([\s\S]*?)<\/form>/.exec(confirm.text);
    const exportFields = Object.fromEntries([...(exportForm?.[2] ?? '').matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)].filter((m) => m[1] !== '_csrf').map((m) => [m[1] as string, m[2] as string]));
    expect(exportFields).toEqual({ error: 'gone' });
    const exported = await post(ops, (exportForm?.[1] ?? '').replace(ops.basePath, ''), exportFields);
    expect(exported.text.trim().split('\n').map((l) => (JSON.parse(l) as { failure: { message: string } }).failure.message)).toEqual(['gone for good', 'gone for good']);
    const token = /name="purge" value="([^"]+)"/.exec(confirm.text)?.[1] as string;
    // Viewers never reach this form; a wrong confirmation deletes nothing.
    expect((await post(ops, `/parked/${billing.name}/purge/filter`, {}, { user: VIEWER, csrf: await csrfOf(ops, VIEWER) })).status).toBe(403);
    const wrong = await post(ops, `/parked/${billing.name}/purge`, { purge: token, confirm: '3' });
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain('Not purged');
    expect(await depth(billing.parkedQueue)).toBe(3);
    // Parked meanwhile with the same failure: not counted, so not purged.
    await publishParked(conn, topology, billing, [{ id: 'late', message: 'gone for good' }]);
    const done = await post(ops, `/parked/${billing.name}/purge`, { purge: token, confirm: '2' });
    expect(done.status).toBe(200);
    expect(done.text).toMatch(/data-purged="2"/);
    expect((await listParked(conn, billing)).messages.map((m) => m.messageId).sort()).toEqual(['late', 'm-00003']);
    // The token is used up.
    expect((await post(ops, `/parked/${billing.name}/purge`, { purge: token, confirm: '2' })).status).toBe(409);
    expect((await log.list({ limit: 10 })).find((e) => e.action === 'parked.purge')).toMatchObject({ actor: 'alice', count: 2, consumer: billing.name, outcome: 'ok' });
  });
});
