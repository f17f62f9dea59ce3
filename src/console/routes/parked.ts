/**
 * Parked messages: the index, a consumer's groups and messages, one message, export,
 * replay (one, selected, a group, the filter) as background jobs, canary replay, and
 * purge with a typed confirmation.
 */
import { randomUUID } from 'node:crypto';
import type { Context, Hono } from 'hono';
import type * as amqp from 'amqplib';
import { canaryReplay, continueCanary } from '../../park/canary.js';
import { describeFilter, parseFilter, type ParkedFilter } from '../../park/filter.js';
import { parkedIdentity } from '../../park/identity.js';
import { attemptHistory, groupParked, type ParkedMessage } from '../../park/message.js';
import { browseParked, exportRecord, listParked, purgeParked, replayParked, type ParkedTarget } from '../../park/operations.js';
import type { ConsumerTopology } from '../../topology/declaration.js';
import { ConsoleHttpError, type ConsoleEnv, type RouteDeps } from '../http.js';
import type { ConsoleUser } from '../auth.js';
import type { Job, Jobs, JobState, JobView } from '../jobs.js';
import { jobPage, messagePage, parkedIndexPage, parkedPage, purgedPage, purgePage, type ExportFields, type FilterFields } from '../pages/parked.js';
import { formOf, numberField, queryOf, type Fields } from './form.js';

const FIELD_NAMES = { error: 'error', errorClass: 'class', since: 'since', until: 'until', messageIds: 'message id', routingKey: 'routing key' };
const SHOWN = 200;
const PENDING_PURGE_MS = 15 * 60_000;

function filterFields(f: Fields): FilterFields {
  return { error: f.one('error'), class: f.one('class'), since: f.one('since'), until: f.one('until'), key: f.one('key'), mid: f.one('mid') };
}

function toFilter(ff: FilterFields): ParkedFilter {
  return parseFilter({ error: ff.error, errorClass: ff.class, since: ff.since, until: ff.until, messageIds: ff.mid === undefined ? undefined : [ff.mid], routingKey: ff.key }, new Date(), FIELD_NAMES);
}

function plainFilter(filter: ParkedFilter, fingerprint?: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (filter.error !== undefined) out['error'] = String(filter.error);
  if (filter.errorClass !== undefined) out['errorClass'] = filter.errorClass;
  if (filter.since !== undefined) out['since'] = filter.since.toISOString();
  if (filter.until !== undefined) out['until'] = filter.until.toISOString();
  if (filter.routingKey !== undefined) out['routingKey'] = filter.routingKey;
  if (filter.messageIds !== undefined) out['messageIds'] = filter.messageIds.length > 20 ? `${filter.messageIds.length} ids` : filter.messageIds;
  const fp = fingerprint ?? filter.fingerprint;
  if (fp !== undefined) out['fingerprint'] = fp;
  return out;
}

interface PendingPurge {
  readonly consumer: string;
  readonly identities: readonly string[];
  readonly filter: Record<string, unknown>;
  readonly described: string;
  readonly exportFields: ExportFields;
  readonly user: string;
  readonly expires: number;
}

/** The end of a "not found" sentence when a walk could not see every parked message. */
function elsewhere(r: { readonly readers: number; readonly missed: number; readonly queue: string }): string {
  return r.readers > 0 || r.missed > 0 ? ` (or another consumer of ${r.queue} is holding it: look again once it is gone)` : '';
}

/** Registers the parked-message routes. */
export function parkedRoutes(app: Hono<ConsoleEnv>, deps: RouteDeps): void {
  const { options, jobs } = deps;
  const topology = options.topology;
  const pending = new Map<string, PendingPurge>();

  const consumerOf = (c: Context<ConsoleEnv>): ConsumerTopology => topology.consumer(c.req.param('consumer') ?? '');
  const model = (): Promise<amqp.ChannelModel> => options.connection();

  /** Every message of the queue that matches, and how the read ended. */
  async function read(target: ParkedTarget, filter: ParkedFilter, signal?: AbortSignal) {
    const result = await listParked(await model(), target, { filter, maxHeld: options.maxParkedRead, ...(signal ? { signal } : {}) });
    const notes: string[] = [];
    if (result.stopReason === 'max-held') notes.push(`Only the first ${options.maxParkedRead} held messages were read (${result.notExamined} not examined): narrow the filter.`);
    if (result.readers > 0) notes.push(`${result.readers === 1 ? 'Another consumer was' : `${result.readers} other consumers were`} reading ${result.queue}: the messages ${result.readers === 1 ? 'it' : 'they'} held are not shown. Reload once ${result.readers === 1 ? 'it is' : 'they are'} gone.`);
    if (result.missed > 0) notes.push(`${result.missed} message${result.missed === 1 ? ' was' : 's were'} taken by another consumer of ${result.queue} (or expired) while this page was read, and ${result.missed === 1 ? 'is' : 'are'} not shown. Reload once it is gone.`);
    const incomplete = notes.length > 0 ? notes.join(' ') : null;
    return { ...result, incomplete };
  }

  /** The messages a replay or purge form selects, as a filter of message ids or the page's filter. */
  async function selection(target: ParkedTarget, f: Fields): Promise<{ filter: ParkedFilter; words: string; recorded: Record<string, unknown>; asked: number | null }> {
    const ff = filterFields(f);
    const base = toFilter(ff);
    const scope = f.one('scope') ?? 'filter';
    if (scope === 'selected') {
      const ids = [...new Set(f.all('id'))];
      if (ids.length === 0) throw new ConsoleHttpError(400, 'Select at least one message (tick its box) first.');
      return { filter: { messageIds: ids }, words: `${ids.length} selected message${ids.length === 1 ? '' : 's'}`, recorded: { messageIds: ids.length > 20 ? `${ids.length} ids` : ids }, asked: ids.length };
    }
    if (scope === 'group') {
      const fingerprint = f.one('fingerprint');
      if (fingerprint === undefined) throw new ConsoleHttpError(400, 'No group given (fingerprint).');
      const filter = { ...base, fingerprint };
      return { filter, words: `group ${fingerprint}`, recorded: plainFilter(filter), asked: null };
    }
    if (scope !== 'filter') throw new ConsoleHttpError(400, `Unknown scope ${JSON.stringify(scope)}: one of selected, group, filter.`);
    return { filter: base, words: describeFilter(base), recorded: plainFilter(base), asked: null };
  }

  function progressOf(job: Job) {
    return (p: { total: number; scanned: number; matched: number; published: number }) => {
      job.view.progress.total = p.total;
      job.view.progress.scanned = p.scanned;
      job.view.progress.matched = p.matched;
      job.view.progress.published = p.published;
    };
  }

  async function replayPass(job: Job, target: ParkedTarget, filter: ParkedFilter, rate: number | undefined, user: ConsoleUser) {
    const result = await replayParked(await model(), target, {
      filter,
      signal: job.signal,
      maxHeld: options.maxParkedRead,
      actor: user.user,
      onProgress: progressOf(job),
      ...(rate !== undefined ? { ratePerSecond: rate } : {}),
    });
    job.view.progress.replayed += result.replayed;
    deps.data.invalidate();
    return result;
  }

  const OUTCOME: Record<JobState, 'ok' | 'partial' | 'failed'> = { done: 'ok', stopped: 'partial', failed: 'failed', running: 'partial', watching: 'partial', 'awaiting-decision': 'partial' };
  /** Consumers whose job is being recorded as started: no second job may start on them meanwhile. */
  const starting = new Set<string>();

  /**
   * Records that a job starts (refused with 503, and nothing started, when that cannot be
   * written), then starts it; when it ends, however it ends, records what it replayed.
   */
  async function startJob(user: ConsoleUser, action: string, recorded: Record<string, unknown>, init: Parameters<Jobs['start']>[0] & { ratePerSecond: number | null }, work: (job: Job) => Promise<void>): Promise<string> {
    refuseIfBusy(init.consumer);
    starting.add(init.consumer);
    try {
      const id = randomUUID();
      const rate = init.ratePerSecond;
      const end = await deps.begin(user, { action, consumer: init.consumer, filter: recorded, detail: { job: id, selection: init.selection, rate } });
      return jobs.start({ ...init, id }, work, (j: JobView) =>
        end({
          count: j.progress.replayed,
          outcome: OUTCOME[j.state],
          detail: { state: j.state, note: j.message, ...(j.canary ? { canaries: j.canary.sent, canariesBack: j.canary.returned, verdict: j.canary.verdict } : {}) },
        }),
      );
    } finally {
      starting.delete(init.consumer);
    }
  }

  app.get('/parked', async (c) => {
    const overview = await deps.data.overview();
    return c.html(parkedIndexPage(c.get('page'), overview.consumers.map((v) => ({ consumer: v.name, queue: v.parked.queue, depth: v.parked.depth }))));
  });

  app.get('/parked/:consumer', async (c) => {
    const target = consumerOf(c);
    const ff = filterFields(queryOf(c));
    const filter = toFilter(ff);
    const r = await read(target, filter);
    return c.html(
      parkedPage(c.get('page'), {
        consumer: target.name,
        queue: target.parkedQueue,
        filter: ff,
        described: describeFilter(filter),
        groups: groupParked(r.messages),
        messages: r.messages.slice(0, SHOWN),
        matched: r.matched,
        total: r.total,
        incomplete: r.incomplete,
        jobs: jobs.list().filter((j) => j.consumer === target.name).slice(0, 5),
      }),
    );
  });

  app.get('/parked/:consumer/messages/:id', async (c) => {
    const target = consumerOf(c);
    const id = c.req.param('id');
    let found: ParkedMessage | undefined;
    const looked = await browseParked(await model(), target, {
      filter: { messageIds: [id] },
      maxHeld: options.maxParkedRead,
      onMessage: (m) => {
        found = m;
        return 'stop';
      },
    });
    if (!found) throw new ConsoleHttpError(404, `No parked message of ${target.name} has id ${id}: it was replayed or purged, or never parked here${elsewhere(looked)}.`);
    return c.html(messagePage(c.get('page'), target.name, found, attemptHistory(found)));
  });

  // A POST, though it changes nothing: an export reads the whole queue and is recorded, so no link may set it off.
  app.post('/parked/:consumer/export', async (c) => {
    const target = consumerOf(c);
    const q = await formOf(c);
    const ff = filterFields(q);
    const filter = toFilter(ff);
    const fingerprint = q.one('fingerprint');
    const lines: string[] = [];
    await deps.perform(
      c.get('user'),
      { action: 'parked.export', consumer: target.name, filter: plainFilter(filter, fingerprint) },
      async () =>
        browseParked(await model(), target, {
          filter,
          maxHeld: options.maxParkedRead,
          onMessage: (m) => {
            if (fingerprint === undefined || m.fingerprint === fingerprint) lines.push(`${JSON.stringify(exportRecord(m))}\n`);
          },
        }),
      () => ({ count: lines.length, outcome: 'ok' }),
    );
    const name = `${target.name}-parked-${new Date().toISOString().replace(/[:.]/g, '-')}.jsonl`.replace(/[^A-Za-z0-9._-]/g, '_');
    return c.body(lines.join(''), 200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'content-disposition': `attachment; filename="${name}"` });
  });

  /**
   * One replay or canary job per consumer at a time: a second one would walk the same
   * parked queue, and a canary's continuation would replay the other job's canaries.
   */
  function refuseIfBusy(consumer: string): void {
    if (starting.has(consumer)) throw new ConsoleHttpError(409, `Another job on '${consumer}' is starting: look at its jobs before starting one.`);
    const busy = jobs.active(consumer);
    if (busy) throw new ConsoleHttpError(409, `A ${busy.kind} job on '${consumer}' started by ${busy.user} is still ${busy.state}: stop it or let it finish (${options.basePath}/jobs/${busy.id}) before starting another.`);
  }

  app.post('/parked/:consumer/replay', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const rate = numberField(f, 'rate', 'rate', 0.01, 1_000_000);
    const sel = await selection(target, f);
    const id = await startJob(user, 'parked.replay', sel.recorded, { kind: 'replay', consumer: target.name, user: user.user, selection: sel.words, ratePerSecond: rate ?? null }, async (job) => {
      const result = await replayPass(job, target, sel.filter, rate, user);
      job.view.message = `${result.replayed} replayed to ${result.targetQueue}${result.failed.length ? `; ${result.failed.length} could not be moved and stay parked` : ''}${result.stopReason === 'aborted' ? '; stopped' : ''}.`;
      if (result.stopReason === 'aborted') job.view.state = 'stopped';
    });
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });

  app.post('/parked/:consumer/canary', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const n = numberField(f, 'n', 'first N', 1, 10_000) ?? 3;
    const windowSeconds = numberField(f, 'window', 'watch window (seconds)', 0, 86_400);
    const rate = numberField(f, 'rate', 'rate', 0.01, 1_000_000);
    const fingerprint = f.one('fingerprint');
    if (fingerprint === undefined) throw new ConsoleHttpError(400, 'A canary replay needs a group (fingerprint).');
    const filter: ParkedFilter = { ...toFilter(filterFields(f)), fingerprint };
    const recorded = { ...plainFilter(filter), canaries: Math.floor(n) };
    const id = await startJob(
      user,
      'parked.canary',
      recorded,
      {
        kind: 'canary',
        consumer: target.name,
        user: user.user,
        selection: `group ${fingerprint}: the first ${Math.floor(n)}, then the rest`,
        ratePerSecond: rate ?? null,
        canary: { n: Math.floor(n), windowMs: windowSeconds === undefined ? null : windowSeconds * 1000, sent: 0, returned: 0, returnedIds: [], windowEndsAt: null, rest: null, verdict: null },
      },
      async (job) => {
        const canary = job.view.canary as NonNullable<Job['view']['canary']>;
        job.view.state = 'watching';
        const result = await canaryReplay(await model(), target, {
          filter,
          count: Math.floor(n),
          ...(windowSeconds !== undefined ? { windowMs: Math.round(windowSeconds * 1000) } : {}),
          signal: job.signal,
          actor: user.user,
          maxHeld: options.maxParkedRead,
          ...(options.store ? { processed: options.store } : {}),
          onOutcome: (m) => {
            canary.sent = Math.max(canary.sent, 1);
            if (m.outcome === 'failed' && m.messageId !== undefined) {
              canary.returned += 1;
              canary.returnedIds.push(m.messageId);
            }
          },
        });
        deps.data.invalidate();
        canary.sent = result.canaries.length;
        canary.returned = result.failed;
        canary.rest = result.remaining;
        canary.verdict = result.verdict;
        canary.windowMs = result.windowMs;
        canary.windowEndsAt = new Date(Date.now()).toISOString();
        job.view.progress.replayed = result.replay.replayed;
        if (job.signal.aborted) return;
        if (result.verdict === 'empty') {
          job.view.message = 'Nothing in the group was left to replay.';
          return;
        }
        job.view.state = 'awaiting-decision';
        const unknown = result.canaries.length - result.succeeded - result.failed;
        job.view.message =
          result.failed > 0
            ? `${result.failed} of ${result.canaries.length} canaries came back to the parked queue: the cause is probably not fixed. Stop, or continue anyway.`
            : unknown > 0
              ? `${unknown} of ${result.canaries.length} canaries could not be watched (the parked queue is too long to read to its end, or a canary has no message id); ${result.succeeded} succeeded. Check the consumer's outcomes before you continue with the other ${result.remaining}, or stop.`
              : `None of the ${result.canaries.length} canaries came back within ${Math.round(result.windowMs / 1000)} s (${result.succeeded} succeeded). Continue with the other ${result.remaining}, or stop.`;
        if (!(await job.decision())) {
          job.view.state = 'stopped';
          job.view.message = `Stopped after the canaries: ${result.failed} of ${result.canaries.length} came back; the other ${result.remaining} stay parked.`;
          return;
        }
        job.view.state = 'running';
        const rest = await continueCanary(await model(), target, result, {
          signal: job.signal,
          actor: user.user,
          maxHeld: options.maxParkedRead,
          onProgress: progressOf(job),
          ...(rate !== undefined ? { ratePerSecond: rate } : {}),
        });
        deps.data.invalidate();
        job.view.progress.replayed += rest.replayed;
        job.view.message = `Canaries: ${result.failed} of ${result.canaries.length} came back. Then ${rest.replayed} more replayed to ${rest.targetQueue}${rest.stopReason === 'aborted' ? '; stopped' : ''}.`;
        if (rest.stopReason === 'aborted') job.view.state = 'stopped';
      },
    );
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });

  /** Counts what a purge would delete and asks for the typed confirmation. */
  async function confirmPurge(c: Context<ConsoleEnv>, f: Fields, scope: 'selected' | 'filter') {
    const target = consumerOf(c);
    const ff = filterFields(f);
    const filter = toFilter(ff);
    const fingerprint = scope === 'filter' ? f.one('fingerprint') : undefined;
    const ids = scope === 'selected' ? [...new Set(f.all('id'))] : undefined;
    if (ids !== undefined && ids.length === 0) throw new ConsoleHttpError(400, 'Select at least one message (tick its box) first.');
    const identities: string[] = [];
    const looked = await browseParked(await model(), target, {
      filter: ids ? { messageIds: ids } : filter,
      maxHeld: options.maxParkedRead,
      onMessage: (m) => {
        if (fingerprint === undefined || m.fingerprint === fingerprint) identities.push(parkedIdentity(m));
      },
    });
    if (identities.length === 0) throw new ConsoleHttpError(409, `Nothing parked matches: there is nothing to purge${elsewhere(looked)}.`);
    for (const [k, p] of pending) if (p.expires < Date.now()) pending.delete(k);
    const token = randomUUID();
    const described = ids ? `${ids.length} selected` : fingerprint ? `group ${fingerprint}, ${describeFilter(filter)}` : describeFilter(filter);
    const exportFields = ids ? { mid: ids.join(',') } : { ...ff, ...(fingerprint ? { fingerprint } : {}) };
    pending.set(token, {
      consumer: target.name,
      identities,
      filter: ids ? { messageIds: ids.length > 20 ? `${ids.length} ids` : ids } : plainFilter(filter, fingerprint),
      described,
      exportFields,
      user: c.get('user').user,
      expires: Date.now() + PENDING_PURGE_MS,
    });
    return c.html(purgePage(c.get('page'), { consumer: target.name, token, count: identities.length, described, exportFields, refused: null }));
  }

  app.post('/parked/:consumer/purge/filter', async (c) => confirmPurge(c, await formOf(c), 'filter'));
  app.post('/parked/:consumer/purge/selected', async (c) => confirmPurge(c, await formOf(c), 'selected'));

  app.post('/parked/:consumer/purge', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const token = f.one('purge') ?? '';
    const p = pending.get(token);
    if (!p || p.consumer !== target.name || p.expires < Date.now()) throw new ConsoleHttpError(409, 'This purge confirmation has expired or was used already: open the purge page again.');
    if (p.user !== user.user) throw new ConsoleHttpError(403, 'This purge was counted for another user: open the purge page yourself.');
    const typed = f.one('confirm') ?? '';
    if (typed !== String(p.identities.length) && typed !== target.name) {
      return c.html(
        purgePage(c.get('page'), { consumer: target.name, token, count: p.identities.length, described: p.described, exportFields: p.exportFields, refused: `Not purged: type ${p.identities.length} or ${target.name} exactly to confirm.` }),
        400,
      );
    }
    // Used at once, so that a second submit of the same form does not purge again.
    pending.delete(token);
    let end: Awaited<ReturnType<typeof deps.begin>>;
    try {
      end = await deps.begin(user, { action: 'parked.purge', consumer: target.name, filter: p.filter, detail: { counted: p.identities.length } });
    } catch (error) {
      // Nothing was purged: the same confirmation may be sent again once the record can be written.
      pending.set(token, p);
      throw error;
    }
    let result: Awaited<ReturnType<typeof purgeParked>>;
    try {
      result = await purgeParked(await model(), target, { only: p.identities, maxHeld: options.maxParkedRead });
    } catch (error) {
      await end({ count: 0, outcome: 'failed', detail: { error: error instanceof Error ? error.message.slice(0, 2000) : String(error) } }).catch(() => undefined);
      throw error;
    } finally {
      deps.data.invalidate();
    }
    await end({ count: result.removed, outcome: result.removed === p.identities.length ? 'ok' : 'partial', detail: { notFound: result.notFound } });
    return c.html(purgedPage(c.get('page'), target.name, result.removed, result.notFound));
  });

  app.get('/jobs/:id', (c) => {
    const j = jobs.get(c.req.param('id'));
    if (!j) throw new ConsoleHttpError(404, 'No such job (jobs are kept in memory until the console restarts; the action record keeps what they did).');
    return c.html(jobPage(c.get('page'), j));
  });
  app.get('/api/jobs/:id', (c) => {
    const j = jobs.get(c.req.param('id'));
    return j ? c.json(j) : c.json({ error: 'no such job' }, 404);
  });
  app.get('/api/jobs', (c) => c.json(jobs.list()));
  app.post('/jobs/:id/stop', async (c) => {
    const id = c.req.param('id');
    const j = jobs.get(id);
    const notRunning = () => new ConsoleHttpError(409, 'That job is not running.');
    if (!j || ['done', 'stopped', 'failed'].includes(j.state)) throw notRunning();
    const stopped = await deps.perform(c.get('user'), { action: 'job.stop', consumer: j.consumer, detail: { job: id, kind: j.kind } }, async () => jobs.stop(id), (ok) => ({ count: 0, outcome: ok ? 'ok' : 'failed' }));
    if (!stopped) throw notRunning();
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });
  app.post('/jobs/:id/continue', async (c) => {
    const id = c.req.param('id');
    const j = jobs.get(id);
    const notWaiting = () => new ConsoleHttpError(409, 'That job is not waiting for a decision.');
    if (!j || j.state !== 'awaiting-decision') throw notWaiting();
    const going = await deps.perform(
      c.get('user'),
      { action: 'parked.canary.continue', consumer: j.consumer, detail: { job: id, rest: j.canary?.rest ?? null } },
      async () => jobs.proceed(id),
      (ok) => ({ count: 0, outcome: ok ? 'ok' : 'failed' }),
    );
    if (!going) throw notWaiting();
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });
}
