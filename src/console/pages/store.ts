import type { RetryAuditEntry, RetryHold, RetryRow, RetrySignals } from '../../retry-table/index.js';
import type { OutboxFailure } from '../../store/index.js';
import type { ActionRecord } from '../record.js';
import { csrfField, h, layout, num, span, when, type Fragment, type PageContext } from './layout.js';

function noStore(ctx: PageContext, title: string, section: 'retry' | 'outbox'): string {
  return layout(ctx, { title, section, body: h`<p id="no-database" class="muted">No database given: start the console with the application's store (--db on the command line, \`store\` when mounted).</p>` });
}

/** What the retry-table page shows. */
export interface RetryPageData {
  readonly signals: RetrySignals;
  readonly holds: readonly RetryHold[];
  readonly dependencies: readonly string[];
  readonly rows: readonly RetryRow[];
  readonly count: number;
  readonly history: readonly RetryAuditEntry[];
  /** The list's filter, as given. */
  readonly filter: Readonly<Record<string, string | undefined>>;
}

const BY = [
  ['dependency', 'dependency'],
  ['tenant', 'tenant'],
  ['errorClass', 'error class'],
  ['consumer', 'consumer'],
] as const;

function bySelect(): Fragment {
  return h`<select name="by">${BY.map(([v, label]) => h`<option value="${v}">${label}</option>`)}</select> <input type="text" name="value" required size="18" placeholder="e.g. carrier">`;
}

/** The retry table: signals by dependency, pauses in force, rows, and the forms that change them. */
export function retryPage(ctx: PageContext, d: RetryPageData | null): string {
  if (!d) return noStore(ctx, 'Retry table', 'retry');
  const s = d.signals;
  const operator = ctx.user.role === 'operator';
  const post = (action: string) => `${ctx.base}/retry/${action}`;
  const body = h`<p class="meta" id="retry-signals" data-rows="${s.rows}" data-due="${s.due}" data-paused="${s.paused}">${s.rows} rows: ${s.due} due, ${s.paused} paused, ${s.waiting} waiting for a person${s.due > 0 ? `, the oldest due for ${span(s.oldestDueAgeMs)}` : ''}.</p>
<h2>By dependency</h2>
<table id="dependencies" class="grid"><thead><tr><th>dependency</th><th>rows</th><th>due</th><th>paused</th><th></th></tr></thead><tbody>
${d.dependencies.map((dep) => {
  const v = s.byDependency[dep];
  return h`<tr data-dependency="${dep}"><th scope="row">${dep}</th><td class="n">${num(v?.rows ?? 0)}</td><td class="n">${num(v?.due ?? 0)}</td><td class="n">${num(v?.paused ?? 0)}</td><td>${
    operator
      ? h`<form class="inline" method="post" action="${post('pause')}">${csrfField(ctx)}<input type="hidden" name="by" value="dependency"><input type="hidden" name="value" value="${dep}"><button type="submit" data-action="pause">Pause</button></form>
<form class="inline" method="post" action="${post('resume')}">${csrfField(ctx)}<input type="hidden" name="by" value="dependency"><input type="hidden" name="value" value="${dep}"><input type="hidden" name="due_now" value="1"><button type="submit" data-action="resume">Resume, due now</button></form>`
      : ''
  }</td></tr>`;
})}
</tbody></table>
<h2>Pauses in force</h2>
${
  d.holds.length === 0
    ? h`<p id="no-holds" class="muted">None.</p>`
    : h`<table id="holds" class="grid"><thead><tr><th>consumer</th><th>dependency</th><th>tenant</th><th>error class</th><th>by</th><th>since</th></tr></thead><tbody>${d.holds.map(
        (hd) => h`<tr><td>${hd.consumer ?? ''}</td><td>${hd.dependency ?? ''}</td><td>${hd.tenant ?? ''}</td><td>${hd.errorClass ?? ''}</td><td>${hd.actor}</td><td>${when(hd.since)}</td></tr>`,
      )}</tbody></table>`
}
${
  operator
    ? h`<h2>Change</h2>
<form id="retry-pause" class="box" method="post" action="${post('pause')}">${csrfField(ctx)}Pause rows by ${bySelect()} <label><input type="checkbox" name="allow_unknown" value="1"> even if nothing names it yet</label> <button type="submit" data-action="pause">Pause</button></form>
<form id="retry-resume" class="box" method="post" action="${post('resume')}">${csrfField(ctx)}Resume rows by ${bySelect()} <label><input type="checkbox" name="due_now" value="1" checked> due now</label> <button type="submit" data-action="resume">Resume</button></form>
<form id="retry-schedule" class="box" method="post" action="${post('schedule')}">${csrfField(ctx)}Reschedule rows by ${bySelect()} to <input type="text" name="at" value="now" size="22" placeholder="now, none or 2026-03-01T12:00Z"> <button type="submit" data-action="schedule">Reschedule</button></form>
<form id="retry-park" class="box" method="post" action="${post('park')}">${csrfField(ctx)}Park rows by ${bySelect()} (to their consumer's parked queue) <button type="submit" class="danger" data-action="park">Park</button></form>`
    : ''
}
<h2>Rows (${d.rows.length} of ${d.count})</h2>
<form method="get" action="${ctx.base}/retry" class="box" id="retry-filter">${BY.map(([v, label]) => h`<label>${label} <input type="text" name="${v}" value="${d.filter[v] ?? ''}" size="12"></label>`)}<button type="submit">Filter</button></form>
<table id="retry-rows" class="grid"><thead><tr><th>id</th><th>consumer</th><th>dependency</th><th>tenant</th><th>error class</th><th>last error</th><th>attempt</th><th>next attempt</th><th>paused</th></tr></thead><tbody>
${d.rows.map((r) => h`<tr data-row-id="${r.id}"><td>${r.id}</td><td>${r.consumer}</td><td>${r.dependency}</td><td>${r.tenant ?? ''}</td><td>${r.errorClass}</td><td class="cell-text">${r.lastError}</td><td class="n">${r.attempt}</td><td>${when(r.nextAttemptAt)}</td><td>${r.paused ? 'paused' : ''}</td></tr>`)}
</tbody></table>
<h2>History of the table</h2>
<table id="retry-history" class="grid"><thead><tr><th>at</th><th>who</th><th>action</th><th>filter</th><th>rows</th></tr></thead><tbody>
${d.history.map((e) => h`<tr><td>${when(e.at)}</td><td>${e.actor}</td><td>${e.action}</td><td>${JSON.stringify(e.filter)}</td><td class="n">${e.rows}</td></tr>`)}
</tbody></table>`;
  return layout(ctx, { title: 'Retry table', section: 'retry', body });
}

/** The outbox rows the relay flagged, each readable, and the release form. */
export function outboxPage(ctx: PageContext, rows: readonly OutboxFailure[] | null): string {
  if (!rows) return noStore(ctx, 'Outbox', 'outbox');
  const operator = ctx.user.role === 'operator';
  const body = h`<p class="meta"><b id="outbox-flagged">${rows.length}</b> row${rows.length === 1 ? '' : 's'} flagged: the relay could not publish ${rows.length === 1 ? 'it' : 'them'} (most often no queue is bound for the routing key). Add the binding, then release them so the relay tries again.</p>
<form id="outbox-release" method="post" action="${ctx.base}/outbox/release">${csrfField(ctx)}
<table id="outbox-rows" class="grid"><thead><tr>${operator ? h`<th><input type="checkbox" data-select-all aria-label="select all"></th>` : ''}<th>id</th><th>message id</th><th>exchange</th><th>routing key</th><th>error</th><th>failed at</th><th>attempts</th><th>body</th></tr></thead><tbody>
${rows.map((r) => h`<tr data-row-id="${r.id}">${operator ? h`<td><input type="checkbox" name="id" value="${r.id}"></td>` : ''}<td>${r.id}</td><td>${r.messageId}</td><td>${r.exchange ?? '(relay\'s)'}</td><td>${r.routingKey}</td><td class="cell-text">${r.error}</td><td>${when(r.failedAt)}</td><td class="n">${r.attempts}</td><td><pre>${r.body}</pre></td></tr>`)}
</tbody></table>
${operator && rows.length > 0 ? h`<p><button type="submit" data-action="release-selected">Release selected</button> <button type="submit" name="all" value="1" data-action="release-all">Release all ${rows.length}</button></p>` : ''}
</form>`;
  return layout(ctx, { title: 'Outbox', section: 'outbox', body });
}

/** Every action taken through the console, newest first. */
export function actionsPage(ctx: PageContext, entries: readonly ActionRecord[]): string {
  const body = h`<table id="actions" class="grid"><thead><tr><th>when</th><th>who</th><th>action</th><th>consumer</th><th>selection</th><th>count</th><th>outcome</th><th>detail</th></tr></thead><tbody>
${entries.map((e) => h`<tr data-action="${e.action}" data-record-id="${e.id}"><td>${when(e.at)}</td><td data-field="actor">${e.actor}</td><td data-field="action">${e.action}</td><td>${e.consumer ?? ''}</td><td class="cell-text">${e.filter ? JSON.stringify(e.filter) : ''}</td><td class="n" data-field="count">${e.count}</td><td data-field="outcome">${e.outcome}</td><td class="cell-text">${e.detail ? JSON.stringify(e.detail) : ''}</td></tr>`)}
</tbody></table>
${entries.length === 0 ? h`<p id="no-actions" class="muted">Nothing done through this console yet.</p>` : ''}`;
  return layout(ctx, { title: 'Actions', section: 'actions', body });
}
