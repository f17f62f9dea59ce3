import type { HistoryEntry, ParkedGroup, ParkedMessage } from '../../park/message.js';
import type { JobView } from '../jobs.js';
import { csrfField, h, layout, num, when, type Fragment, type PageContext } from './layout.js';

/** The filter fields as the form gives them (query parameters). */
export interface FilterFields {
  readonly error?: string | undefined;
  readonly class?: string | undefined;
  readonly since?: string | undefined;
  readonly until?: string | undefined;
  readonly key?: string | undefined;
  readonly mid?: string | undefined;
}

/** A filter and, for a group, its fingerprint: what an export or a purge is asked for. */
export type ExportFields = FilterFields & { readonly fingerprint?: string | undefined };

/** One consumer's line on the parked index. */
export interface ParkedIndexRow {
  readonly consumer: string;
  readonly queue: string;
  readonly depth: number | null;
}

/** The consumers, each with its parked depth. */
export function parkedIndexPage(ctx: PageContext, rows: readonly ParkedIndexRow[]): string {
  return layout(ctx, {
    title: 'Parked messages',
    section: 'parked',
    body: h`<table id="parked-index" class="grid"><thead><tr><th>consumer</th><th>parked queue</th><th>parked</th></tr></thead><tbody>
${rows.map((r) => h`<tr data-consumer="${r.consumer}"><th scope="row"><a href="${ctx.base}/parked/${encodeURIComponent(r.consumer)}">${r.consumer}</a></th><td>${r.queue}</td><td class="n${(r.depth ?? 0) > 0 ? ' alert' : ''}" data-field="parked">${num(r.depth)}</td></tr>`)}
</tbody></table>`,
  });
}

function hiddenFilter(f: ExportFields): Fragment {
  return h`${Object.entries(f).map(([k, v]) => (v === undefined || v === '' ? '' : h`<input type="hidden" name="${k}" value="${v}">`))}`;
}

function filterForm(ctx: PageContext, consumer: string, f: FilterFields): Fragment {
  return h`<form id="filter" class="box" method="get" action="${ctx.base}/parked/${encodeURIComponent(consumer)}">
<label>error text or /regex/ <input type="search" name="error" value="${f.error ?? ''}"></label>
<label>class <input type="text" name="class" value="${f.class ?? ''}" size="14"></label>
<label>since <input type="text" name="since" value="${f.since ?? ''}" size="12" placeholder="2h or 2026-03-01"></label>
<label>until <input type="text" name="until" value="${f.until ?? ''}" size="12"></label>
<label>routing key <input type="text" name="key" value="${f.key ?? ''}" size="14" placeholder="order.*"></label>
<label>message id <input type="text" name="mid" value="${f.mid ?? ''}" size="14"></label>
<button type="submit">Filter</button> <a href="${ctx.base}/parked/${encodeURIComponent(consumer)}">clear</a>
</form>`;
}

function rateField(): Fragment {
  return h`<label>rate <input type="number" name="rate" min="0.1" step="any" placeholder="no limit" size="6"> /s</label>`;
}

/**
 * A button in a form of its own that POSTs `fields` (and the CSRF token) to `action`: what
 * does work is never a link, so no other site's page can set it off.
 */
function postButton(ctx: PageContext, action: string, fields: ExportFields, label: string, dataAction: string, id?: string): Fragment {
  return h`<form class="inline"${id ? h` id="${id}"` : ''} method="post" action="${action}">${csrfField(ctx)}${hiddenFilter(fields)}<button type="submit" data-action="${dataAction}">${label}</button></form>`;
}

function groupRow(ctx: PageContext, consumer: string, g: ParkedGroup, f: FilterFields, operator: boolean): Fragment {
  const c = encodeURIComponent(consumer);
  const group = { ...f, fingerprint: g.fingerprint };
  return h`<tr data-fingerprint="${g.fingerprint}">
<td class="n" data-field="count">${g.count}</td>
<td data-field="errorClass">${g.errorClass ?? '–'}</td>
<td class="cell-text" data-field="errorMessage">${g.sampleMessage ?? '–'}</td>
<td data-field="firstSeen">${when(g.firstSeen)}</td>
<td data-field="lastSeen">${when(g.lastSeen)}</td>
<td>${
    operator
      ? h`<form class="inline" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}${hiddenFilter(f)}<input type="hidden" name="scope" value="group"><input type="hidden" name="fingerprint" value="${g.fingerprint}">${rateField()}<button type="submit" data-action="replay-group">Replay ${g.count}</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/canary">${csrfField(ctx)}${hiddenFilter(f)}<input type="hidden" name="fingerprint" value="${g.fingerprint}"><label>first <input type="number" name="n" min="1" value="${Math.min(3, g.count)}" size="3"></label><label>watch <input type="number" name="window" min="0" size="4" placeholder="ladder+10"> s</label><button type="submit" data-action="canary">Canary</button></form>
${postButton(ctx, `${ctx.base}/parked/${c}/purge/filter`, group, 'Purge…', 'purge-group')}`
      : ''
  } ${postButton(ctx, `${ctx.base}/parked/${c}/export`, group, 'Export', 'export-group')}</td>
</tr>`;
}

/** What the consumer's parked page shows. */
export interface ParkedPageData {
  readonly consumer: string;
  readonly queue: string;
  readonly filter: FilterFields;
  /** The filter in words. */
  readonly described: string;
  readonly groups: readonly ParkedGroup[];
  /** The first messages that match, in queue order. */
  readonly messages: readonly ParkedMessage[];
  readonly matched: number;
  /** Messages in the queue when it was read. */
  readonly total: number;
  /** Why not every message was read, when one was not. */
  readonly incomplete: string | null;
  readonly jobs: readonly JobView[];
}

/** One consumer's parked messages: groups by fingerprint, the messages, and the actions on them. */
export function parkedPage(ctx: PageContext, d: ParkedPageData): string {
  const operator = ctx.user.role === 'operator';
  const c = encodeURIComponent(d.consumer);
  const body = h`<p class="meta">${d.queue}: <b id="parked-total">${d.total}</b> parked, <b id="parked-matched">${d.matched}</b> match ${d.described}.${d.incomplete ? h` <span class="error" id="parked-incomplete">${d.incomplete}</span>` : ''}</p>
${filterForm(ctx, d.consumer, d.filter)}
${d.jobs.length > 0 ? h`<p id="recent-jobs">Jobs: ${d.jobs.map((j) => h`<a href="${ctx.base}/jobs/${j.id}" data-job-id="${j.id}">${j.kind} ${j.state}</a> `)}</p>` : ''}
<h2>Groups</h2>
${
  d.groups.length === 0
    ? h`<p id="no-groups" class="ok">Nothing parked matches.</p>`
    : h`<table id="groups" class="grid"><thead><tr><th>count</th><th>error class</th><th>message</th><th>first seen</th><th>last seen</th><th></th></tr></thead>
<tbody>${d.groups.map((g) => groupRow(ctx, d.consumer, g, d.filter, operator))}</tbody></table>`
}
${
  d.matched > 0
    ? h`<div class="box" id="filter-actions">Every message that matches (${d.matched}): ${
        operator
          ? h`<form id="replay-filter" class="inline" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}${hiddenFilter(d.filter)}<input type="hidden" name="scope" value="filter">${rateField()}<button type="submit" data-action="replay-filter">Replay all ${d.matched}</button></form> ${postButton(ctx, `${ctx.base}/parked/${c}/purge/filter`, d.filter, 'Purge…', 'purge-filter')} `
          : ''
      }${postButton(ctx, `${ctx.base}/parked/${c}/export`, d.filter, 'Export', 'export-filter')}</div>`
    : ''
}
<h2>Messages${d.messages.length < d.matched ? ` (the first ${d.messages.length})` : ''}</h2>
<form id="selection" method="post" action="${ctx.base}/parked/${c}/replay">
${csrfField(ctx)}<input type="hidden" name="scope" value="selected">
<table id="messages" class="grid"><thead><tr>${operator ? h`<th><input type="checkbox" data-select-all aria-label="select all"></th>` : ''}<th>#</th><th>message id</th><th>routing key</th><th>error class</th><th>error</th><th>attempts</th><th>failed at</th><th>replays</th></tr></thead>
<tbody>${d.messages.map(
    (m) => h`<tr data-message-id="${m.messageId ?? ''}" data-fingerprint="${m.fingerprint}">${operator ? h`<td>${m.messageId !== undefined ? h`<input type="checkbox" name="id" value="${m.messageId}">` : ''}</td>` : ''}
<td class="n">${m.position}</td>
<td>${m.messageId !== undefined ? h`<a href="${ctx.base}/parked/${c}/messages/${encodeURIComponent(m.messageId)}">${m.messageId}</a>` : '(no id)'}</td>
<td>${m.routingKey}</td><td>${m.errorClass ?? '–'}</td><td class="cell-text">${m.errorMessage ?? '–'}</td><td class="n">${num(m.attempts)}</td><td>${when(m.failedAt)}</td><td class="n">${m.replays}</td></tr>`,
  )}</tbody></table>
${operator && d.messages.length > 0 ? h`<p>Selected: ${rateField()}<button type="submit" data-action="replay-selected">Replay selected</button> <button type="submit" formaction="${ctx.base}/parked/${c}/purge/selected" formmethod="post" data-action="purge-selected">Purge selected…</button></p>` : ''}
</form>`;
  return layout(ctx, { title: `Parked: ${d.consumer}`, section: 'parked', body });
}

function pretty(content: Buffer): { text: string; kind: string } {
  const text = content.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(content)) return { text: content.toString('base64'), kind: `binary, ${content.length} bytes, base64` };
  try {
    return { text: JSON.stringify(JSON.parse(text) as unknown, null, 2), kind: 'JSON' };
  } catch {
    return { text, kind: 'text' };
  }
}

/** A header value as text (buffers decoded, objects as JSON). */
function headerText(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  try {
    return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v && typeof v === 'object' && (v as { type?: unknown }).type === 'Buffer' && Array.isArray((v as { data?: unknown }).data) ? Buffer.from((v as { data: number[] }).data).toString('utf8') : v));
  } catch {
    return String(value);
  }
}

/** One parked message: failure, timeline, headers, pretty body, and the actions on it. */
export function messagePage(ctx: PageContext, consumer: string, m: ParkedMessage, history: readonly HistoryEntry[]): string {
  const c = encodeURIComponent(consumer);
  const body = pretty(m.content);
  const id = m.messageId ?? '';
  const operator = ctx.user.role === 'operator';
  const content = h`<section id="message" data-message-id="${id}" data-fingerprint="${m.fingerprint}">
<p><a href="${ctx.base}/parked/${c}">← ${consumer}</a></p>
<dl class="kv" id="failure">
<dt>message id</dt><dd data-field="messageId">${id || '(none)'}</dd>
<dt>error class</dt><dd data-field="errorClass">${m.errorClass ?? '–'}</dd>
<dt>error</dt><dd data-field="errorMessage">${m.errorMessage ?? '–'}</dd>
<dt>reason</dt><dd data-field="reason">${m.reason ?? '–'}</dd>
<dt>attempts</dt><dd data-field="attempts">${num(m.attempts)}</dd>
<dt>routing key</dt><dd data-field="routingKey">${m.routingKey}</dd>
<dt>exchange</dt><dd data-field="exchange">${m.exchange ?? '–'}</dd>
<dt>first failed</dt><dd>${when(m.firstFailedAt)}</dd>
<dt>last failed</dt><dd>${when(m.lastFailedAt)}</dd>
<dt>parked at</dt><dd>${when(m.parkedAt)}</dd>
<dt>replays</dt><dd data-field="replays">${m.replays}</dd>
<dt>fingerprint</dt><dd>${m.fingerprint}</dd>
</dl>
${
  operator && id
    ? h`<form class="box" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}<input type="hidden" name="scope" value="selected"><input type="hidden" name="id" value="${id}"><button type="submit" data-action="replay-one">Replay this message</button></form>`
    : ''
}
<h2>Timeline</h2>
<ol id="timeline" class="timeline">${history.map((e) => h`<li data-event="${e.event}"><time>${when(e.at)}</time> ${e.detail}</li>`)}</ol>
<h2>Stack</h2>
<pre id="stack">${m.errorStack ?? '(none recorded)'}</pre>
<h2>Body <span class="muted">(${body.kind})</span></h2>
<pre id="body">${body.text}</pre>
<h2>Headers</h2>
<table id="headers" class="grid"><tbody>${Object.entries(m.headers).map(([k, v]) => h`<tr><th scope="row">${k}</th><td class="cell-text">${headerText(v)}</td></tr>`)}</tbody></table>
</section>`;
  return layout(ctx, { title: `Parked message ${id || `#${m.position}`}`, section: 'parked', body: content });
}

/** What a purge asks to confirm. */
export interface PurgeConfirm {
  readonly consumer: string;
  /** The pending purge's id, posted back with the confirmation. */
  readonly token: string;
  readonly count: number;
  readonly described: string;
  /** The fields that export what the purge would delete. */
  readonly exportFields: ExportFields;
  /** Why a previous confirmation was refused. */
  readonly refused: string | null;
}

/** The purge confirmation: the count, an export button, and a field to type the count or the consumer's name into. */
export function purgePage(ctx: PageContext, p: PurgeConfirm): string {
  const c = encodeURIComponent(p.consumer);
  const body = h`<section id="purge" data-count="${p.count}">
<p>Purging deletes <b id="purge-count">${p.count}</b> parked message${p.count === 1 ? '' : 's'} of <b>${p.consumer}</b> (${p.described}) for good. Messages parked since this page was made are not touched.</p>
<p>Keep a copy first: ${postButton(ctx, `${ctx.base}/parked/${c}/export`, p.exportFields, 'Export them as JSON lines', 'export', 'purge-export')}</p>
${p.refused ? h`<p class="error" id="purge-refused">${p.refused}</p>` : ''}
<form id="purge-form" class="box" method="post" action="${ctx.base}/parked/${c}/purge">
${csrfField(ctx)}<input type="hidden" name="purge" value="${p.token}">
<label>Type <b>${p.count}</b> or <b>${p.consumer}</b> to confirm <input type="text" name="confirm" autocomplete="off" data-confirm="${`${p.count}|${p.consumer}`}" id="purge-confirm"></label>
<button type="submit" class="danger" data-confirm-submit data-action="purge-confirm">Purge ${p.count}</button>
<a href="${ctx.base}/parked/${c}">Cancel</a>
</form>
</section>`;
  return layout(ctx, { title: `Purge parked messages: ${p.consumer}`, section: 'parked', body });
}

/** What a purge did. */
export function purgedPage(ctx: PageContext, consumer: string, purged: number, notFound: number): string {
  const body = h`<p id="purged" data-purged="${purged}">Purged <b>${purged}</b> message${purged === 1 ? '' : 's'}.${notFound > 0 ? ` ${notFound} of those counted were gone already (replayed or purged meanwhile).` : ''}</p>
<p><a href="${ctx.base}/parked/${encodeURIComponent(consumer)}">Back to ${consumer}</a></p>`;
  return layout(ctx, { title: `Purged: ${consumer}`, section: 'parked', body });
}

/** A job's page: its progress, refreshed by the console's script. */
export function jobPage(ctx: PageContext, j: JobView): string {
  const operator = ctx.user.role === 'operator';
  const live = j.state === 'running' || j.state === 'watching' || j.state === 'awaiting-decision';
  const form = (action: string, label: string, id: string, hidden: boolean, cls = '') =>
    h`<form class="inline" id="${id}" method="post" action="${ctx.base}/jobs/${j.id}/${action}"${hidden ? h` hidden` : ''}>${csrfField(ctx)}<button type="submit"${cls ? h` class="${cls}"` : ''} data-action="${action}">${label}</button></form>`;
  const body = h`<section id="job" data-job="${ctx.base}/api/jobs/${j.id}" data-job-id="${j.id}" data-state="${j.state}" data-kind="${j.kind}">
<dl class="kv">
<dt>what</dt><dd>${j.kind === 'canary' ? 'canary replay' : 'replay'} of ${j.selection}, consumer <a href="${ctx.base}/parked/${encodeURIComponent(j.consumer)}">${j.consumer}</a>${j.ratePerSecond !== null ? `, at most ${j.ratePerSecond}/s` : ''}</dd>
<dt>by</dt><dd>${j.user}, ${j.startedAt}</dd>
<dt>state</dt><dd data-field="state">${j.state}</dd>
<dt>progress</dt><dd><progress id="job-progress" max="${Math.max(1, j.progress.total)}" value="${j.progress.scanned}"></progress> scanned <span data-field="scanned">${j.progress.scanned}</span> of <span data-field="total">${j.progress.total}</span>, matched <span data-field="matched">${j.progress.matched}</span>, replayed <span data-field="replayed">${j.progress.replayed}</span></dd>
<dt>note</dt><dd data-field="message">${j.message}</dd>
</dl>
${
  j.canary
    ? h`<p id="canary-outcomes" data-verdict="${j.canary.verdict ?? ''}">Canaries sent: <b data-field="sent">${j.canary.sent}</b> of ${j.canary.n}; came back to the parked queue: <b data-field="returned">${j.canary.returned}</b>; watched until <span data-field="window">${j.canary.windowEndsAt ?? '–'}</span>; left in the group: <b data-field="rest">${num(j.canary.rest)}</b>.</p>`
    : ''
}
${operator ? h`${j.kind === 'canary' ? form('continue', 'Continue with the rest', 'canary-decision', j.state !== 'awaiting-decision') : ''} ${form('stop', 'Stop', 'job-stop', !live, 'danger')}` : ''}
</section>`;
  return layout(ctx, { title: `Job ${j.id.slice(0, 8)}`, section: 'job', body });
}
