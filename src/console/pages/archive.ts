/**
 * The parked pages when the console has an archive: a consumer's failures read from the
 * store (exact groups over every row, filters, pages by keyset), one archived message with
 * its history across parkings and replays, and the purge confirmation of archived rows.
 */
import type { ArchivedMessage, ArchiveHistoryEntry, ArchiveIngestState } from '../../archive/types.js';
import { decodeBody, plainValue } from '../../park/message.js';
import type { ArchiveGroup, ArchiveSummary } from '../../store/archive.js';
import type { JobView } from '../jobs.js';
import { csrfField, h, layout, num, when, type Fragment, type PageContext } from './layout.js';

/** The archive filter's fields as the form gives them (query parameters). */
export interface ArchiveFields {
  readonly error?: string | undefined;
  readonly class?: string | undefined;
  readonly since?: string | undefined;
  readonly until?: string | undefined;
  readonly key?: string | undefined;
  readonly mid?: string | undefined;
  readonly reason?: string | undefined;
  /** `name=value`, each. */
  readonly header?: readonly string[] | undefined;
  readonly body?: string | undefined;
  /** `open` (the default), `replayed`, `resolved` or `all`. */
  readonly state?: string | undefined;
}

/** The fields as name/value pairs (a header filter once per value), for links and hidden inputs. */
export function fieldPairs(f: ArchiveFields): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(f) as Array<[string, string | readonly string[] | undefined]>) {
    if (v === undefined) continue;
    for (const one of typeof v === 'string' ? [v] : v) if (one !== '') out.push([k, one]);
  }
  return out;
}

/** The query string of the fields and `extra`, for links that keep the filter. */
export function archiveQuery(f: ArchiveFields, extra: Record<string, string | undefined> = {}): string {
  const q = new URLSearchParams(fieldPairs(f));
  for (const [k, v] of Object.entries(extra)) if (v !== undefined && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

function hidden(f: ArchiveFields, extra: Record<string, string> = {}): Fragment {
  const pairs = [...fieldPairs(f), ...Object.entries(extra)];
  return h`${pairs.map(([k, v]) => h`<input type="hidden" name="${k}" value="${v}">`)}`;
}

/** One consumer's line on the parked index, with an archive. */
export interface ArchiveIndexRow {
  readonly consumer: string;
  readonly queue: string;
  readonly depth: number | null;
  /** Open failures in the archive; null when it could not be read. */
  readonly open: number | null;
  readonly ingest: ArchiveIngestState['status'] | null;
}

function behindNote(status: ArchiveIngestState['status'] | null | undefined, id = 'archive-behind'): Fragment | string {
  return status === 'behind' ? h` <span class="error" id="${id}" data-field="behind">archive behind: the database does not take what is parked; it waits in the queue</span>` : '';
}

/** The consumers, each with its open failures in the archive and what its parked queue still holds. */
export function archiveIndexPage(ctx: PageContext, rows: readonly ArchiveIndexRow[]): string {
  return layout(ctx, {
    title: 'Parked messages',
    section: 'parked',
    body: h`<p class="meta">Read from the archive; the parked queues hold what is not ingested yet.</p>
<table id="parked-index" class="grid"><thead><tr><th>consumer</th><th>open in the archive</th><th>parked queue</th><th>in the queue</th><th></th></tr></thead><tbody>
${rows.map((r) => h`<tr data-consumer="${r.consumer}"><th scope="row"><a href="${ctx.base}/parked/${encodeURIComponent(r.consumer)}">${r.consumer}</a></th><td class="n${(r.open ?? 0) > 0 ? ' alert' : ''}" data-field="archived">${num(r.open)}</td><td>${r.queue}</td><td class="n" data-field="parked">${num(r.depth)}</td><td>${behindNote(r.ingest, `archive-behind-${r.consumer}`)}</td></tr>`)}
</tbody></table>`,
  });
}

const STATES = ['open', 'replayed', 'resolved', 'all'] as const;

function filterForm(ctx: PageContext, consumer: string, f: ArchiveFields, order: string, size: number): Fragment {
  const headers = [...(f.header ?? []), ''];
  return h`<form id="filter" class="box" method="get" action="${ctx.base}/parked/${encodeURIComponent(consumer)}">
<label>error text or /regex/ <input type="search" name="error" value="${f.error ?? ''}" maxlength="1000"></label>
<label>class <input type="text" name="class" value="${f.class ?? ''}" size="14" maxlength="200"></label>
<label>since <input type="text" name="since" value="${f.since ?? ''}" size="12" placeholder="2d or 2026-03-01"></label>
<label>until <input type="text" name="until" value="${f.until ?? ''}" size="12"></label>
<label>routing key <input type="text" name="key" value="${f.key ?? ''}" size="14" placeholder="order.*" maxlength="255"></label>
<label>message id <input type="text" name="mid" value="${f.mid ?? ''}" size="14"></label>
<label>reason <input type="text" name="reason" value="${f.reason ?? ''}" size="12" placeholder="max-attempts" maxlength="200"></label>
${headers.slice(0, 8).map((v) => h`<label>header <input type="text" name="header" value="${v}" size="14" placeholder="tenant=t4" maxlength="385"></label>`)}
<label>body has <input type="search" name="body" value="${f.body ?? ''}" size="14" maxlength="200"></label>
<label>state <select name="state">${STATES.map((s) => h`<option${(f.state ?? 'open') === s ? h` selected` : ''}>${s}</option>`)}</select></label>
<label>order <select name="order"><option value="newest"${order === 'newest' ? h` selected` : ''}>newest first</option><option value="oldest"${order === 'oldest' ? h` selected` : ''}>oldest first</option></select></label>
<label>per page <input type="number" name="size" value="${size}" min="1" max="1000" size="5"></label>
<button type="submit" data-action="filter">Filter</button> <a href="${ctx.base}/parked/${encodeURIComponent(consumer)}">clear</a>
</form>`;
}

function rateField(): Fragment {
  return h`<label>rate <input type="number" name="rate" min="0.1" step="any" placeholder="no limit" size="6"> /s</label>`;
}

function reasonField(): Fragment {
  return h`<label>reason <input type="text" name="resolution" maxlength="1000" placeholder="refunded by hand" size="18"></label>`;
}

function groupRow(ctx: PageContext, consumer: string, g: ArchiveGroup, f: ArchiveFields, operator: boolean): Fragment {
  const c = encodeURIComponent(consumer);
  const group = { scope: 'group', fingerprint: g.fingerprint };
  return h`<tr data-fingerprint="${g.fingerprint}">
<td class="n" data-field="count">${g.count}</td>
<td data-field="errorClass">${g.errorClass ?? '–'}</td>
<td class="cell-text" data-field="errorMessage">${g.sampleMessage ?? '–'}</td>
<td data-field="firstSeen">${when(g.firstSeen)}</td>
<td data-field="lastSeen">${when(g.lastSeen)}</td>
<td>${
    operator
      ? h`<form class="inline" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}${hidden(f, group)}${rateField()}<button type="submit" data-action="replay-group">Replay ${g.count}</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/canary">${csrfField(ctx)}${hidden(f, { fingerprint: g.fingerprint })}<label>first <input type="number" name="n" min="1" max="100" value="${Math.min(3, g.count)}" size="3"></label><label>watch <input type="number" name="window" min="0" max="3600" size="4" placeholder="ladder+10"> s</label><button type="submit" data-action="canary">Canary</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/resolve">${csrfField(ctx)}${hidden(f, group)}${reasonField()}<button type="submit" data-action="resolve-group">Resolve ${g.count}</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/purge/filter">${csrfField(ctx)}${hidden(f, { fingerprint: g.fingerprint })}<button type="submit" data-action="purge-group">Purge…</button></form>`
      : ''
  } <form class="inline" method="post" action="${ctx.base}/parked/${c}/export">${csrfField(ctx)}${hidden(f, { fingerprint: g.fingerprint })}<button type="submit" data-action="export-group">Export</button></form></td>
</tr>`;
}

/** What the consumer's parked page shows with an archive. */
export interface ArchivePageData {
  readonly consumer: string;
  readonly queue: string;
  readonly fields: ArchiveFields;
  readonly order: 'newest' | 'oldest';
  readonly size: number;
  /** The filter in words. */
  readonly described: string;
  /** What the parked queue holds now (not ingested yet); null when unknown. */
  readonly queueDepth: number | null;
  /** Open failures of this consumer in the archive. */
  readonly archived: number;
  /** Rows matching the filter, exactly. */
  readonly matched: number;
  readonly groups: readonly ArchiveGroup[];
  readonly rows: readonly ArchiveSummary[];
  /** The cursor of the next page; undefined on the last. */
  readonly next: string | undefined;
  /** This page is not the first. */
  readonly paged: boolean;
  readonly ingest: ArchiveIngestState | undefined;
  readonly jobs: readonly JobView[];
  /** How long the reading took, for the page's foot. */
  readonly readMs: number;
}

/** One consumer's archived failures: exact groups, a page of rows, and the actions on them. */
export function archivePage(ctx: PageContext, d: ArchivePageData): string {
  const operator = ctx.user.role === 'operator';
  const c = encodeURIComponent(d.consumer);
  const sizeQ = d.size === 50 ? undefined : String(d.size);
  const orderQ = d.order === 'newest' ? undefined : d.order;
  const body = h`<p class="meta" id="archive-meta">Archive: <b id="archive-count" data-field="archived">${d.archived}</b> open; ${d.queue}: <b id="queue-depth" data-field="parked">${num(d.queueDepth)}</b> not ingested yet. <b id="parked-matched">${d.matched}</b> match ${d.described}.${behindNote(d.ingest?.status)}</p>
${filterForm(ctx, d.consumer, d.fields, d.order, d.size)}
${d.jobs.length > 0 ? h`<p id="recent-jobs">Jobs: ${d.jobs.map((j) => h`<a href="${ctx.base}/jobs/${j.id}" data-job-id="${j.id}">${j.kind} ${j.state}</a> `)}</p>` : ''}
<h2>Groups</h2>
${
  d.groups.length === 0
    ? h`<p id="no-groups" class="ok">Nothing archived matches.</p>`
    : h`<table id="groups" class="grid"><thead><tr><th>count</th><th>error class</th><th>message</th><th>first seen</th><th>last seen</th><th></th></tr></thead>
<tbody>${d.groups.map((g) => groupRow(ctx, d.consumer, g, d.fields, operator))}</tbody></table>`
}
${
  d.matched > 0
    ? h`<div id="filter-actions" class="box">Every row that matches (${d.matched}):
${
  operator
    ? h`<form class="inline" id="replay-filter" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}${hidden(d.fields, { scope: 'filter' })}${rateField()}<button type="submit" data-action="replay-filter">Replay all ${d.matched}</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/resolve">${csrfField(ctx)}${hidden(d.fields, { scope: 'filter' })}${reasonField()}<button type="submit" data-action="resolve-filter">Resolve all ${d.matched}</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/purge/filter">${csrfField(ctx)}${hidden(d.fields)}<button type="submit" data-action="purge-filter">Purge…</button></form>`
    : ''
} <form class="inline" method="post" action="${ctx.base}/parked/${c}/export">${csrfField(ctx)}${hidden(d.fields)}<button type="submit" data-action="export-filter">Export</button></form></div>`
    : ''
}
<h2>Messages (${d.order} first, ${d.rows.length} on this page)</h2>
<form id="selection" method="post" action="${ctx.base}/parked/${c}/replay">
${csrfField(ctx)}<input type="hidden" name="scope" value="selected">
<table id="messages" class="grid"><thead><tr>${operator ? h`<th><input type="checkbox" data-select-all aria-label="select all"></th>` : ''}<th>row</th><th>message id</th><th>routing key</th><th>error class</th><th>error</th><th>reason</th><th>attempts</th><th>failed at</th><th>state</th><th>replays</th></tr></thead>
<tbody>${d.rows.map(
    (r) => h`<tr data-row-id="${r.id}" data-message-id="${r.messageId ?? ''}" data-fingerprint="${r.fingerprint}" data-state="${r.state}">${operator ? h`<td><input type="checkbox" name="id" value="${r.id}"></td>` : ''}
<td class="n"><a href="${ctx.base}/parked/${c}/rows/${r.id}">${r.id}</a></td>
<td>${r.messageId ?? '(no id)'}</td>
<td>${r.routingKey}</td><td>${r.errorClass ?? '–'}</td><td class="cell-text">${r.errorMessage ?? '–'}</td><td>${r.reason ?? '–'}</td><td class="n">${num(r.attempts)}</td><td>${when(r.failedAt)}</td><td>${r.state}</td><td class="n">${r.replayCount}</td></tr>`,
  )}</tbody></table>
${
  operator && d.rows.length > 0
    ? h`<p>Selected: ${rateField()}<button type="submit" data-action="replay-selected">Replay selected</button> ${reasonField()}<button type="submit" formaction="${ctx.base}/parked/${c}/resolve" data-action="resolve-selected">Resolve selected</button> <button type="submit" formaction="${ctx.base}/parked/${c}/purge/selected" data-action="purge-selected">Purge selected…</button></p>`
    : ''
}
</form>
<p id="pages">${d.paged ? h`<a href="${ctx.base}/parked/${c}${archiveQuery(d.fields, { order: orderQ, size: sizeQ })}" data-page="first">first page</a> ` : ''}${d.next !== undefined ? h`<a href="${ctx.base}/parked/${c}${archiveQuery(d.fields, { order: orderQ, size: sizeQ, after: d.next })}" data-page="next" rel="next">next page →</a>` : h`<span class="muted">last page</span>`}</p>
<p class="muted" id="read-ms">Read in ${d.readMs} ms.</p>`;
  return layout(ctx, { title: `Parked: ${d.consumer}`, section: 'parked', body });
}

/** Shown bodies are cut at this many characters. */
const SHOWN_BODY = 256 * 1024;

function prettyBody(content: Buffer): { text: string; kind: string } {
  const d = decodeBody(content);
  let text: string;
  let kind: string;
  if (d.kind === 'json') [text, kind] = [JSON.stringify(d.value, null, 2), 'JSON'];
  else if (d.kind === 'text') [text, kind] = [d.text, 'text'];
  else [text, kind] = [d.base64, `binary, ${content.length} bytes, base64`];
  return text.length > SHOWN_BODY ? { text: `${text.slice(0, SHOWN_BODY)}\n… ${text.length - SHOWN_BODY} more characters: export it to read it all`, kind } : { text, kind };
}

function headerText(value: unknown): string {
  const v = plainValue(value);
  if (typeof v === 'string') return v;
  try {
    return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x));
  } catch {
    return String(v);
  }
}

/** One archived parking: its failure, the message's history, body, headers, and the actions on the row. */
export function archivedMessagePage(ctx: PageContext, consumer: string, m: ArchivedMessage, history: readonly ArchiveHistoryEntry[], ingest: ArchiveIngestState | undefined): string {
  const c = encodeURIComponent(consumer);
  const body = prettyBody(m.body);
  const operator = ctx.user.role === 'operator';
  const one = { scope: 'selected', id: m.id };
  const content = h`<section id="message" data-row-id="${m.id}" data-message-id="${m.messageId ?? ''}" data-fingerprint="${m.fingerprint}" data-state="${m.state}">
<p><a href="${ctx.base}/parked/${c}">← ${consumer}</a>${behindNote(ingest?.status)}</p>
<dl class="kv" id="failure">
<dt>row</dt><dd data-field="rowId">${m.id}</dd>
<dt>message id</dt><dd data-field="messageId">${m.messageId ?? '(none)'}</dd>
<dt>state</dt><dd data-field="state">${m.state}${m.resolveReason !== null ? `: ${m.resolveReason}` : ''}</dd>
<dt>error class</dt><dd data-field="errorClass">${m.errorClass ?? '–'}</dd>
<dt>error</dt><dd data-field="errorMessage">${m.errorMessage ?? '–'}</dd>
<dt>reason</dt><dd data-field="reason">${m.reason ?? '–'}</dd>
<dt>attempts</dt><dd data-field="attempts">${num(m.attempts)}</dd>
<dt>routing key</dt><dd data-field="routingKey">${m.routingKey}</dd>
<dt>exchange</dt><dd data-field="exchange">${m.exchange ?? '–'}</dd>
<dt>failed at</dt><dd>${when(m.failedAt)}</dd>
<dt>parked at</dt><dd>${when(m.parkedAt)}</dd>
<dt>archived at</dt><dd>${when(m.archivedAt)}</dd>
<dt>replays before this parking</dt><dd data-field="replays">${m.replays}</dd>
<dt>fingerprint</dt><dd>${m.fingerprint}</dd>
${m.notIndexed !== null ? h`<dt>not indexed</dt><dd data-field="notIndexed">${m.notIndexed}</dd>` : ''}
</dl>
${
  operator && m.state === 'open'
    ? h`<div class="box" id="row-actions"><form class="inline" method="post" action="${ctx.base}/parked/${c}/replay">${csrfField(ctx)}${hidden({}, one)}<button type="submit" data-action="replay-one">Replay this message</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/resolve">${csrfField(ctx)}${hidden({}, one)}${reasonField()}<button type="submit" data-action="resolve-one">Resolve</button></form>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/purge/selected">${csrfField(ctx)}${hidden({}, one)}<button type="submit" data-action="purge-one">Purge…</button></form></div>`
    : ''
}
<h2>History</h2>
${
  m.messageId === null
    ? h`<p class="muted" id="no-history">This message has no message id: only this parking is known.</p>`
    : h`<table id="timeline" class="grid"><thead><tr><th>when</th><th>what</th><th>attempt</th><th>who</th><th>row</th><th>detail</th></tr></thead><tbody>${history.map(
        (e) => h`<tr data-event="${e.event}" data-row="${e.rowId}"${e.rowId === m.id ? h` class="current"` : ''}><td><time>${when(e.at)}</time></td><td data-field="event">${e.event}</td><td class="n" data-field="attempt">${num(e.attempt)}</td><td data-field="actor">${e.actor ?? '–'}</td><td><a href="${ctx.base}/parked/${c}/rows/${e.rowId}">${e.rowId}</a></td><td class="cell-text" data-field="detail">${e.detail}</td></tr>`,
      )}</tbody></table>`
}
<h2>Stack</h2>
<pre id="stack">${m.errorStack ?? '(none recorded)'}</pre>
<h2>Body <span class="muted">(${body.kind})</span></h2>
<pre id="body">${body.text}</pre>
<h2>Headers</h2>
<table id="headers" class="grid"><tbody>${Object.entries(m.headers).map(([k, v]) => h`<tr><th scope="row">${k}</th><td class="cell-text">${headerText(v)}</td></tr>`)}</tbody></table>
</section>`;
  return layout(ctx, { title: `Archived message ${m.messageId ?? `row ${m.id}`}`, section: 'parked', body: content });
}

/** What an archive purge asks to confirm. */
export interface ArchivePurgeConfirm {
  readonly consumer: string;
  readonly token: string;
  readonly count: number;
  readonly described: string;
  /** The export form's fields: the same rows. */
  readonly exportFields: readonly (readonly [string, string])[];
  readonly refused: string | null;
}

/** The purge confirmation of archived rows: the count, an export, and the count or the consumer's name typed. */
export function archivePurgePage(ctx: PageContext, p: ArchivePurgeConfirm): string {
  const c = encodeURIComponent(p.consumer);
  const body = h`<section id="purge" data-count="${p.count}">
<p>Purging deletes <b id="purge-count">${p.count}</b> archived message${p.count === 1 ? '' : 's'} of <b>${p.consumer}</b> (${p.described}) for good. Rows archived since this page was made are not touched.</p>
<form class="inline" method="post" action="${ctx.base}/parked/${c}/export">${csrfField(ctx)}${p.exportFields.map(([k, v]) => h`<input type="hidden" name="${k}" value="${v}">`)}Keep a copy first: <button type="submit" id="purge-export" data-action="export">export them as JSON lines</button></form>
${p.refused ? h`<p class="error" id="purge-refused">${p.refused}</p>` : ''}
<form id="purge-form" class="box" method="post" action="${ctx.base}/parked/${c}/purge">
${csrfField(ctx)}<input type="hidden" name="purge" value="${p.token}">
<label>Type <b>${p.count}</b> or <b>${p.consumer}</b> to confirm <input type="text" name="confirm" autocomplete="off" data-confirm="${`${p.count}|${p.consumer}`}" id="purge-confirm"></label>
<button type="submit" class="danger" data-confirm-submit data-action="purge-confirm">Purge ${p.count}</button>
<a href="${ctx.base}/parked/${c}">Cancel</a>
</form>
</section>`;
  return layout(ctx, { title: `Purge archived messages: ${p.consumer}`, section: 'parked', body });
}

/** What a purge or a resolve did. */
export function archiveDonePage(ctx: PageContext, consumer: string, what: 'purged' | 'resolved', count: number, note: string): string {
  const body = h`<p id="${what}" data-count="${count}">${what === 'purged' ? 'Purged' : 'Resolved'} <b>${count}</b> archived message${count === 1 ? '' : 's'}.${note ? ` ${note}` : ''}</p>
<p><a href="${ctx.base}/parked/${encodeURIComponent(consumer)}">Back to ${consumer}</a></p>`;
  return layout(ctx, { title: `${what === 'purged' ? 'Purged' : 'Resolved'}: ${consumer}`, section: 'parked', body });
}
