/**
 * The parked pages when the console has an archive: they read the store, not the queue.
 * Exact groups and counts over every row, every filter of `archiveFilter`, newest or
 * oldest first, pages by keyset; one row with its message's history; and the actions on
 * rows by id (replay, canary, resolve, purge, export), each recorded. Registered before
 * the queue's routes, whose paths they take over; the job pages stay theirs.
 */
import { randomUUID } from 'node:crypto';
import type { Context, Hono } from 'hono';
import type { Archive } from '../../archive/archive.js';
import { archiveFilter, archiveFilterRecord, describeArchiveFilter, FILTER_LIMITS, type FilterNames } from '../../archive/filter.js';
import type { ArchiveCanary } from '../../archive/types.js';
import type { ArchiveFilter } from '../../store/archive.js';
import type { ConsumerTopology } from '../../topology/declaration.js';
import type { ConsoleUser } from '../auth.js';
import { ConsoleHttpError, type ConsoleEnv, type RouteDeps } from '../http.js';
import type { Job, Jobs, JobState, JobView } from '../jobs.js';
import { archivedMessagePage, archiveDonePage, archiveIndexPage, archivePage, archivePurgePage, fieldPairs, type ArchiveFields } from '../pages/archive.js';
import { formOf, numberField, queryOf, type Fields } from './form.js';

/** The form's labels, for errors that name the field a person typed in. */
const NAMES: FilterNames = { states: 'state', ids: 'selected rows', error: 'error', errorClass: 'class', since: 'since', until: 'until', routingKey: 'routing key', messageIds: 'message id', fingerprint: 'group', reason: 'reason', headers: 'header', body: 'body has', throughId: 'through row' };
const DEFAULT_SIZE = 50;
const MAX_GROUPS = 100;
const PENDING_PURGE_MS = 15 * 60_000;
/** Purge confirmations held at once (each a filter and a count). */
const MAX_PENDING = 1000;
/** A page cursor: a failure time and a row id, as the store writes it. */
const MAX_CURSOR = 100;

function fieldsOf(f: Fields): ArchiveFields {
  return { error: f.one('error'), class: f.one('class'), since: f.one('since'), until: f.one('until'), key: f.one('key'), mid: f.one('mid'), reason: f.one('reason'), header: allRaw(f, 'header'), body: f.one('body'), state: f.one('state') };
}

/** A repeated field whose values may hold commas (a header value): each value as given, empty ones dropped. */
function allRaw(f: Fields, name: string): string[] | undefined {
  const values = f.raw(name).map((v) => v.trim()).filter(Boolean);
  if (values.length > FILTER_LIMITS.headers) throw new ConsoleHttpError(400, `header: ${values.length} header filters, more than ${FILTER_LIMITS.headers}.`);
  return values.length === 0 ? undefined : values;
}

/** The filter of the fields, checked and bounded (a 400 naming the field otherwise). */
function toFilter(consumer: string, ff: ArchiveFields, extra: { ids?: string[]; fingerprint?: string } = {}): ArchiveFilter {
  return archiveFilter(
    {
      consumer,
      states: ff.state === undefined ? undefined : [ff.state],
      error: ff.error,
      errorClass: ff.class,
      since: ff.since,
      until: ff.until,
      routingKey: ff.key,
      messageIds: ff.mid === undefined ? undefined : [ff.mid],
      reason: ff.reason,
      headers: ff.header,
      body: ff.body,
      ids: extra.ids,
      fingerprint: extra.fingerprint,
    },
    new Date(),
    NAMES,
  );
}

interface PendingPurge {
  readonly consumer: string;
  readonly filter: ArchiveFilter;
  readonly count: number;
  readonly described: string;
  readonly exportFields: ReadonlyArray<readonly [string, string]>;
  readonly user: string;
  readonly expires: number;
}

const OUTCOME: Record<JobState, 'ok' | 'partial' | 'failed'> = { done: 'ok', stopped: 'partial', failed: 'failed', running: 'partial', watching: 'partial', 'awaiting-decision': 'partial' };

/** Registers the archive's parked routes; call before `parkedRoutes`. */
export function archiveRoutes(app: Hono<ConsoleEnv>, deps: RouteDeps, archive: Archive): void {
  const { options, jobs } = deps;
  const topology = options.topology;
  const pending = new Map<string, PendingPurge>();
  const consumerOf = (c: Context<ConsoleEnv>): ConsumerTopology => topology.consumer(c.req.param('consumer') ?? '');

  /** The rows a form's action is for: the selected ones, a group (with the page's filter), or the page's filter. */
  function selection(target: ConsumerTopology, f: Fields): { filter: ArchiveFilter; words: string } {
    const ff = fieldsOf(f);
    const scope = f.one('scope') ?? 'filter';
    if (scope === 'selected') {
      const ids = [...new Set(f.all('id'))];
      if (ids.length === 0) throw new ConsoleHttpError(400, 'Select at least one row (tick its box) first.');
      const filter = toFilter(target.name, {}, { ids });
      return { filter, words: ids.length === 1 ? `row ${ids[0] as string}` : `${ids.length} selected rows` };
    }
    if (scope === 'group') {
      const fingerprint = f.one('fingerprint');
      if (fingerprint === undefined) throw new ConsoleHttpError(400, 'No group given (fingerprint).');
      const filter = toFilter(target.name, ff, { fingerprint });
      return { filter, words: describeArchiveFilter(filter) };
    }
    if (scope !== 'filter') throw new ConsoleHttpError(400, `Unknown scope ${JSON.stringify(scope)}: one of selected, group, filter.`);
    const filter = toFilter(target.name, ff, f.one('fingerprint') !== undefined ? { fingerprint: f.one('fingerprint') as string } : {});
    return { filter, words: describeArchiveFilter(filter) };
  }

  /** Rows up to the last one now: what a person counted is what an action takes. */
  async function bounded(filter: ArchiveFilter): Promise<ArchiveFilter> {
    return { ...filter, throughId: (await archive.store.archive.lastId()) ?? '0' };
  }

  function refuseIfBusy(consumer: string): void {
    const busy = jobs.active(consumer);
    if (busy) throw new ConsoleHttpError(409, `A ${busy.kind} job on '${consumer}' started by ${busy.user} is still ${busy.state}: stop it or let it finish (${options.basePath}/jobs/${busy.id}) before starting another.`);
  }

  /** Consumers whose job is being recorded as started: no second job may start on them meanwhile. */
  const starting = new Set<string>();

  /**
   * Records that a job starts (refused with 503, and nothing started, when that cannot be
   * written), then starts it; when it ends, however it ends, records what it replayed.
   */
  async function startJob(user: ConsoleUser, action: string, filter: ArchiveFilter, extra: Record<string, unknown>, init: Parameters<Jobs['start']>[0] & { ratePerSecond: number | null }, work: (job: Job) => Promise<void>): Promise<string> {
    if (starting.has(init.consumer)) throw new ConsoleHttpError(409, `Another job on '${init.consumer}' is starting: look at its jobs before starting one.`);
    refuseIfBusy(init.consumer);
    starting.add(init.consumer);
    try {
      const id = randomUUID();
      const end = await deps.begin(user, { action, consumer: init.consumer, filter: archiveFilterRecord(filter), detail: { source: 'archive', job: id, selection: init.selection, rate: init.ratePerSecond, ...extra } });
      return jobs.start({ ...init, id }, work, async (j: JobView) => {
        deps.data.invalidate();
        await end({ count: j.progress.replayed, outcome: OUTCOME[j.state], detail: { state: j.state, note: j.message, ...(j.canary ? { canaries: j.canary.sent, canariesBack: j.canary.returned, verdict: j.canary.verdict } : {}) } });
      });
    } finally {
      starting.delete(init.consumer);
    }
  }

  const progress = (job: Job, before = 0) => (p: { total: number; replayed: number; alreadyDone: number }) => {
    job.view.progress.total = p.total;
    job.view.progress.matched = p.total;
    job.view.progress.scanned = p.replayed + p.alreadyDone;
    job.view.progress.published = p.replayed;
    job.view.progress.replayed = before + p.replayed;
  };

  app.get('/parked', async (c) => {
    const [overview, counts] = await Promise.all([deps.data.overview(), archive.counts()]);
    const open = new Map(counts.map((r) => [r.consumer, r.open]));
    const ingest = deps.data.ingestion();
    return c.html(archiveIndexPage(c.get('page'), overview.consumers.map((v) => ({ consumer: v.name, queue: v.parked.queue, depth: v.parked.depth, open: open.get(v.name) ?? 0, ingest: ingest.get(v.name)?.status ?? null }))));
  });

  app.get('/parked/:consumer', async (c) => {
    const started = Date.now();
    const target = consumerOf(c);
    const q = queryOf(c);
    const ff = fieldsOf(q);
    const filter = toFilter(target.name, ff);
    const order = q.one('order') ?? 'newest';
    if (order !== 'newest' && order !== 'oldest') throw new ConsoleHttpError(400, `order: ${JSON.stringify(order)} is not newest or oldest.`);
    const size = numberField(q, 'size', 'per page', 1, FILTER_LIMITS.pageSize) ?? DEFAULT_SIZE;
    const after = q.one('after');
    if (after !== undefined && after.length > MAX_CURSOR) throw new ConsoleHttpError(400, 'after: not a page position this console gave; go back to the first page.');
    const [overview, counts, matched, groups, page] = await Promise.all([
      deps.data.overview(),
      archive.counts(target.name),
      archive.count(filter),
      archive.groups(filter, { limit: MAX_GROUPS }),
      archive.page({ filter, order, limit: Math.floor(size), ...(after !== undefined ? { after } : {}) }),
    ]);
    return c.html(
      archivePage(c.get('page'), {
        consumer: target.name,
        queue: target.parkedQueue,
        fields: ff,
        order,
        size: Math.floor(size),
        described: describeArchiveFilter(filter),
        queueDepth: overview.consumers.find((v) => v.name === target.name)?.parked.depth ?? null,
        archived: counts.find((r) => r.consumer === target.name)?.open ?? 0,
        matched,
        groups,
        rows: page.rows,
        next: page.next,
        paged: after !== undefined,
        ingest: deps.data.ingestion().get(target.name),
        jobs: jobs.list().filter((j) => j.consumer === target.name).slice(0, 5),
        readMs: Date.now() - started,
      }),
    );
  });

  app.get('/parked/:consumer/rows/:id', async (c) => {
    const target = consumerOf(c);
    const id = c.req.param('id');
    if (!/^\d{1,19}$/.test(id)) throw new ConsoleHttpError(400, `${JSON.stringify(id.slice(0, 40))} is not a row id.`);
    const m = await archive.get(id, { viewed: true });
    if (m === undefined || m.consumer !== target.name) throw new ConsoleHttpError(404, `No archived message of ${target.name} is row ${id}: it was purged, or belongs to another consumer.`);
    const history = m.messageId === null ? [] : (await archive.history(target.name, m.messageId)).entries;
    return c.html(archivedMessagePage(c.get('page'), target.name, m, history, deps.data.ingestion().get(target.name)));
  });

  // An old link by message id: its latest parking.
  app.get('/parked/:consumer/messages/:id', async (c) => {
    const target = consumerOf(c);
    const filter = toFilter(target.name, { mid: c.req.param('id'), state: 'all' });
    const { rows } = await archive.page({ filter, order: 'newest', limit: 1 });
    const row = rows[0];
    if (row === undefined) throw new ConsoleHttpError(404, `No archived message of ${target.name} has id ${c.req.param('id')}: it was purged, or is still in ${target.parkedQueue} waiting to be ingested.`);
    return c.redirect(`${options.basePath}/parked/${encodeURIComponent(target.name)}/rows/${row.id}`, 303);
  });

  app.post('/parked/:consumer/export', async (c) => {
    const target = consumerOf(c);
    const f = await formOf(c);
    const ids = f.all('id');
    const filter = ids.length > 0 ? toFilter(target.name, {}, { ids }) : toFilter(target.name, fieldsOf(f), f.one('fingerprint') !== undefined ? { fingerprint: f.one('fingerprint') as string } : {});
    const lines: string[] = [];
    // Bounded like a page read: a bigger export is `warren parked export --db`.
    const limit = options.maxParkedRead;
    const result = await deps.perform(
      c.get('user'),
      { action: 'parked.export', consumer: target.name, filter: archiveFilterRecord(filter), detail: { source: 'archive' } },
      () => archive.export({ filter, limit, write: (line) => void lines.push(line) }),
      (r) => ({ count: r.exported, outcome: r.stopReason === 'done' ? 'ok' : 'partial', ...(r.stopReason === 'limit' ? { detail: { limit } } : {}) }),
    );
    const name = `${target.name}-archive-${new Date().toISOString().replace(/[:.]/g, '-')}.jsonl`.replace(/[^A-Za-z0-9._-]/g, '_');
    return c.body(lines.join(''), 200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'content-disposition': `attachment; filename="${name}"`, ...(result.stopReason === 'limit' ? { 'x-warren-export-limit': String(limit) } : {}) });
  });

  app.post('/parked/:consumer/replay', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const rate = numberField(f, 'rate', 'rate', 0.01, 1_000_000);
    const sel = selection(target, f);
    refuseIfBusy(target.name);
    const filter = await bounded(sel.filter);
    const model = await options.connection();
    const id = await startJob(
      user,
      'parked.replay',
      filter,
      {},
      { kind: 'replay', consumer: target.name, user: user.user, selection: sel.words, ratePerSecond: rate ?? null },
      async (job) => {
        const r = await archive.replay(model, target, { filter, actor: user.user, signal: job.signal, onProgress: progress(job), ...(rate !== undefined ? { ratePerSecond: rate } : {}) });
        progress(job)({ total: r.matched, replayed: r.replayed, alreadyDone: r.alreadyDone });
        job.view.message = `${r.replayed} of ${r.matched} replayed to ${r.targetQueue}${r.alreadyDone > 0 ? `; ${r.alreadyDone} already done (the consumer's idempotency marker), resolved without sending` : ''}${r.stopReason === 'aborted' ? '; stopped' : ''}${r.error !== undefined ? `; ${r.error}` : ''}.`;
        if (r.stopReason === 'aborted') job.view.state = 'stopped';
        else if (r.stopReason === 'failed' || r.stopReason === 'unroutable') job.view.state = 'failed';
      },
    );
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });

  app.post('/parked/:consumer/canary', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const n = Math.floor(numberField(f, 'n', 'first N', 1, 100) ?? 3);
    const windowSeconds = numberField(f, 'window', 'watch window (seconds)', 0, 3600);
    const rate = numberField(f, 'rate', 'rate', 0.01, 1_000_000);
    const fingerprint = f.one('fingerprint');
    if (fingerprint === undefined) throw new ConsoleHttpError(400, 'A canary replay needs a group (fingerprint).');
    refuseIfBusy(target.name);
    const filter = await bounded(toFilter(target.name, fieldsOf(f), { fingerprint }));
    // As on the queue: the consumer's retry ladder and 10 s more, for a copy to fail and be archived again.
    const windowMs = windowSeconds !== undefined ? Math.round(windowSeconds * 1000) : Math.min(3_600_000, target.delaysMs.reduce((a, b) => a + b, 0) + 10_000);
    const model = await options.connection();
    const id = await startJob(
      user,
      'parked.canary',
      filter,
      { canaries: n, windowMs },
      {
        kind: 'canary',
        consumer: target.name,
        user: user.user,
        selection: `${describeArchiveFilter(filter)}: the first ${n}, then the rest`,
        ratePerSecond: rate ?? null,
        canary: { n, windowMs, sent: 0, returned: 0, returnedIds: [], windowEndsAt: null, rest: null, verdict: null },
      },
      async (job) => {
        const canary = job.view.canary as NonNullable<Job['view']['canary']>;
        job.view.state = 'watching';
        const seen = (o: ArchiveCanary) => {
          if (o.outcome === 'failed') {
            canary.returned += 1;
            if (o.messageId !== null) canary.returnedIds.push(o.messageId);
          }
        };
        const result = await archive.canary(model, target, { filter, count: n, windowMs, pollMs: Math.max(10, Math.min(1000, Math.floor(windowMs / 10) || 10)), actor: user.user, signal: job.signal, onOutcome: seen, ...(rate !== undefined ? { ratePerSecond: rate } : {}) });
        canary.sent = result.replay.replayed;
        canary.returned = result.canaries.filter((x) => x.outcome === 'failed').length;
        canary.rest = result.remaining;
        canary.verdict = result.verdict;
        canary.windowEndsAt = new Date().toISOString();
        job.view.progress.replayed = result.replay.replayed;
        deps.data.invalidate();
        if (job.signal.aborted) return;
        if (result.verdict === 'empty') {
          job.view.message = 'Nothing in the group was left to replay.';
          return;
        }
        job.view.state = 'awaiting-decision';
        job.view.message =
          canary.returned > 0
            ? `${canary.returned} of ${canary.sent} canaries failed again and were archived again: the cause is probably not fixed. Stop, or continue anyway with the other ${result.remaining}.`
            : `None of the ${canary.sent} canaries failed again within ${Math.round(windowMs / 1000)} s. Continue with the other ${result.remaining}, or stop.`;
        if (!(await job.decision())) {
          job.view.state = 'stopped';
          job.view.message = `Stopped after the canaries: ${canary.returned} of ${canary.sent} failed again; the other ${result.remaining} stay open.`;
          return;
        }
        job.view.state = 'running';
        // The same rows as counted (through the same last row): the canaries are replayed already, and a canary that failed again is a newer row.
        const rest = await archive.replay(model, target, { filter, actor: user.user, signal: job.signal, onProgress: progress(job, canary.sent), ...(rate !== undefined ? { ratePerSecond: rate } : {}) });
        job.view.progress.replayed = canary.sent + rest.replayed;
        job.view.message = `Canaries: ${canary.returned} of ${canary.sent} failed again. Then ${rest.replayed} more replayed to ${rest.targetQueue}${rest.alreadyDone > 0 ? `, ${rest.alreadyDone} already done` : ''}${rest.stopReason === 'aborted' ? '; stopped' : ''}${rest.error !== undefined ? `; ${rest.error}` : ''}.`;
        if (rest.stopReason === 'aborted') job.view.state = 'stopped';
        else if (rest.stopReason === 'failed' || rest.stopReason === 'unroutable') job.view.state = 'failed';
      },
    );
    return c.redirect(`${options.basePath}/jobs/${id}`, 303);
  });

  app.post('/parked/:consumer/resolve', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const reason = f.one('resolution');
    if (reason === undefined) throw new ConsoleHttpError(400, 'reason: say why these failures need nothing more (e.g. "refunded by hand"), up to 1000 characters.');
    const sel = selection(target, f);
    const filter = await bounded(sel.filter);
    let r: Awaited<ReturnType<typeof archive.resolve>>;
    try {
      r = await deps.perform(user, { action: 'parked.resolve', consumer: target.name, filter: archiveFilterRecord(filter), detail: { source: 'archive', reason } }, () => archive.resolve({ filter, actor: user.user, reason }), (done) => ({ count: done.count, outcome: 'ok' }));
    } finally {
      deps.data.invalidate();
    }
    return c.html(archiveDonePage(c.get('page'), target.name, 'resolved', r.count, `Reason: ${reason}`));
  });

  /** Counts what a purge would delete (through the last row now) and asks for the typed confirmation. */
  async function confirmPurge(c: Context<ConsoleEnv>, scope: 'selected' | 'filter') {
    const target = consumerOf(c);
    const f = await formOf(c);
    const sel = selection(target, { ...f, one: (name) => (name === 'scope' ? (scope === 'selected' ? 'selected' : f.one('fingerprint') !== undefined ? 'group' : 'filter') : f.one(name)) });
    const filter = await bounded(sel.filter);
    const count = await archive.count(filter);
    if (count === 0) throw new ConsoleHttpError(409, 'Nothing archived matches: there is nothing to purge.');
    for (const [k, p] of pending) if (p.expires < Date.now()) pending.delete(k);
    if (pending.size >= MAX_PENDING) throw new ConsoleHttpError(409, 'Too many purges are waiting for their confirmation: confirm or let them expire (15 minutes) first.');
    const token = randomUUID();
    const exportFields: Array<[string, string]> = scope === 'selected' ? f.all('id').map((id) => ['id', id]) : [...fieldPairs(fieldsOf(f)), ...(f.one('fingerprint') !== undefined ? [['fingerprint', f.one('fingerprint') as string] as [string, string]] : [])];
    pending.set(token, { consumer: target.name, filter, count, described: sel.words, exportFields, user: c.get('user').user, expires: Date.now() + PENDING_PURGE_MS });
    return c.html(archivePurgePage(c.get('page'), { consumer: target.name, token, count, described: sel.words, exportFields, refused: null }));
  }

  app.post('/parked/:consumer/purge/filter', (c) => confirmPurge(c, 'filter'));
  app.post('/parked/:consumer/purge/selected', (c) => confirmPurge(c, 'selected'));

  app.post('/parked/:consumer/purge', async (c) => {
    const target = consumerOf(c);
    const user = c.get('user');
    const f = await formOf(c);
    const token = f.one('purge') ?? '';
    const p = pending.get(token);
    if (!p || p.consumer !== target.name || p.expires < Date.now()) throw new ConsoleHttpError(409, 'This purge confirmation has expired or was used already: open the purge page again.');
    if (p.user !== user.user) throw new ConsoleHttpError(403, 'This purge was counted for another user: open the purge page yourself.');
    const typed = f.one('confirm') ?? '';
    if (typed !== String(p.count) && typed !== target.name) {
      return c.html(archivePurgePage(c.get('page'), { consumer: target.name, token, count: p.count, described: p.described, exportFields: p.exportFields, refused: `Not purged: type ${p.count} or ${target.name} exactly to confirm.` }), 400);
    }
    // Used at once, so that a second submit of the same form does not purge again.
    pending.delete(token);
    let r: Awaited<ReturnType<typeof archive.purge>>;
    try {
      r = await deps.perform(
        user,
        { action: 'parked.purge', consumer: target.name, filter: archiveFilterRecord(p.filter), detail: { source: 'archive', counted: p.count } },
        () => archive.purge({ filter: p.filter, actor: user.user }),
        (done) => ({ count: done.count, outcome: done.count === p.count ? 'ok' : 'partial' }),
      );
    } catch (error) {
      // Not recorded, so not purged: the same confirmation may be sent again once the record can be written.
      if (error instanceof ConsoleHttpError && error.status === 503) pending.set(token, p);
      throw error;
    } finally {
      deps.data.invalidate();
    }
    return c.html(archiveDonePage(c.get('page'), target.name, 'purged', r.count, r.count < p.count ? `${p.count - r.count} of those counted were gone already (replayed, resolved or purged meanwhile).` : ''));
  });
}
