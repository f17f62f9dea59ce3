/** The retry table and outbox pages and their changes, and the action record. */
import type { Hono } from 'hono';
import type { RetryFilter } from '../../retry-table/index.js';
import { ConsoleHttpError, type ConsoleEnv, type RouteDeps } from '../http.js';
import { actionsPage, outboxPage, retryPage } from '../pages/store.js';
import { formOf, queryOf, type Fields } from './form.js';

const BY = new Set(['dependency', 'tenant', 'errorClass', 'consumer']);

function changeFilter(f: Fields): RetryFilter {
  const by = f.one('by') ?? '';
  const value = f.one('value');
  if (!BY.has(by)) throw new ConsoleHttpError(400, `Choose rows by dependency, tenant, error class or consumer (got ${JSON.stringify(by)}).`);
  if (value === undefined) throw new ConsoleHttpError(400, `Give the ${by === 'errorClass' ? 'error class' : by} whose rows to change.`);
  return { [by]: value } as RetryFilter;
}

/** Registers the retry-table, outbox and action-record routes. */
export function storeRoutes(app: Hono<ConsoleEnv>, deps: RouteDeps): void {
  const store = deps.options.store;

  app.get('/retry', async (c) => {
    if (!store) return c.html(retryPage(c.get('page'), null));
    const q = queryOf(c);
    const filter: Record<string, string> = {};
    for (const k of BY) {
      const v = q.one(k);
      if (v !== undefined) filter[k] = v;
    }
    const t = store.retryTable;
    const [signals, holds, dependencies, rows, count, history] = await Promise.all([t.signals(), t.holds(), t.dependencies(), t.list(filter, { limit: 200 }), t.count(filter), t.history(50)]);
    return c.html(retryPage(c.get('page'), { signals, holds, dependencies, rows, count, history, filter }));
  });

  app.post('/retry/:action', async (c) => {
    if (!store) throw new ConsoleHttpError(404, 'No database given: the retry table is not available.');
    const action = c.req.param('action');
    const f = await formOf(c);
    const user = c.get('user');
    const filter = changeFilter(f);
    const opts = { actor: user.user, allowUnknown: f.one('allow_unknown') === '1' };
    let run: () => Promise<number>;
    const detail: Record<string, unknown> = {};
    const t = store.retryTable;
    if (action === 'pause') run = () => t.pause(filter, opts);
    else if (action === 'resume') {
      const dueNow = f.one('due_now') === '1';
      detail['dueNow'] = dueNow;
      run = () => t.resume(filter, { ...opts, dueNow });
    } else if (action === 'schedule') {
      const raw = f.one('at') ?? 'now';
      let at: Date | 'now' | null;
      if (raw === 'now') at = 'now';
      else if (raw === 'none') at = null;
      else {
        at = new Date(raw);
        if (Number.isNaN(at.getTime())) throw new ConsoleHttpError(400, `${JSON.stringify(raw)} is not now, none or a time such as 2026-03-01T12:00:00Z.`);
      }
      detail['at'] = at instanceof Date ? at.toISOString() : at;
      const when = at;
      run = () => t.schedule(filter, when, opts);
    } else if (action === 'park') run = () => t.park(filter, opts);
    else throw new ConsoleHttpError(404, `No retry-table action ${JSON.stringify(action)}: pause, resume, schedule or park.`);
    try {
      await deps.perform(user, { action: `retry.${action}`, ...(filter.consumer !== undefined ? { consumer: filter.consumer } : {}), filter: { ...filter }, detail }, run, (rows) => ({ count: rows, outcome: 'ok' }));
    } finally {
      deps.data.invalidate();
    }
    return c.redirect(`${deps.options.basePath}/retry`, 303);
  });

  app.get('/outbox', async (c) => c.html(outboxPage(c.get('page'), store ? await store.outbox.failed(200) : null)));

  app.post('/outbox/release', async (c) => {
    if (!store) throw new ConsoleHttpError(404, 'No database given: the outbox is not available.');
    const f = await formOf(c);
    const all = f.one('all') === '1';
    const ids = f.all('id');
    if (!all && ids.length === 0) throw new ConsoleHttpError(400, 'Select the rows to release, or release all.');
    try {
      await deps.perform(c.get('user'), { action: 'outbox.release', filter: all ? { all: true } : { ids } }, () => store.outbox.release(all ? undefined : ids), (released) => ({ count: released, outcome: 'ok' }));
    } finally {
      deps.data.invalidate();
    }
    return c.redirect(`${deps.options.basePath}/outbox`, 303);
  });

  // Hand pauses, kept in the database for every process (`store.control`).
  app.post('/consumers/:name/:action', async (c) => {
    if (!store) throw new ConsoleHttpError(404, 'No database given: hand pauses are kept in the database.');
    const name = c.req.param('name');
    const action = c.req.param('action');
    if (action !== 'pause' && action !== 'resume') throw new ConsoleHttpError(404, `No consumer action ${JSON.stringify(action)}: pause or resume.`);
    // Only the topology's consumers: a name typed into the address pauses nothing by mistake.
    deps.options.topology.consumer(name);
    const f = await formOf(c);
    const user = c.get('user');
    if (action === 'pause') {
      const reason = (f.one('reason') ?? '').trim();
      if (reason === '' || reason.length > 500) throw new ConsoleHttpError(400, 'Give a reason of 1 to 500 characters: it is shown wherever the pause is.');
      await deps.perform(user, { action: 'consumer.pause', consumer: name, detail: { reason } }, () => store.control.pause(name, reason, user.user), (made) => ({ count: made ? 1 : 0, outcome: 'ok' }));
    } else {
      await deps.perform(user, { action: 'consumer.resume', consumer: name }, () => store.control.resume(name, user.user), (lifted) => ({ count: lifted ? 1 : 0, outcome: 'ok' }));
    }
    deps.data.invalidate();
    return c.redirect(`${deps.options.basePath}/`, 303);
  });

  app.get('/actions', async (c) => c.html(actionsPage(c.get('page'), await deps.options.actionLog.list({ limit: 500 }))));
  app.get('/api/actions', async (c) => c.json(await deps.options.actionLog.list({ limit: 500 })));
}
