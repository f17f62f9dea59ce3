import type { ConsumerView, Overview } from '../data.js';
import { csrfField, h, layout, num, span, when, type Fragment, type PageContext } from './layout.js';

function consumerRow(ctx: PageContext, c: ConsumerView): Fragment {
  // With an archive, the parked signal is its open failures plus what the parked queue still holds.
  const parked = c.openFailures ?? 0;
  const idle = (c.work.depth ?? 0) > 0 && c.consumers === 0;
  return h`<tr data-consumer="${c.name}">
<th scope="row"><a href="${ctx.base}/parked/${encodeURIComponent(c.name)}">${c.name}</a>${c.pause !== null ? h` <span class="badge alert" data-field="pause" title="${c.pause.reason}">paused by ${c.pause.actor}</span>` : ''}${c.breaker !== null ? h` <span class="badge alert" data-field="breaker" title="${c.breaker.reason}">breaker open</span>` : ''}</th>
<td class="n" data-field="work">${num(c.work.depth)}</td>
<td class="n${parked > 0 ? ' alert' : ''}" data-field="parked"${c.archive !== null ? h` title="${c.archive.open} open in the archive, ${num(c.parked.depth)} in ${c.parked.queue}${c.ingest === 'behind' ? '; archive behind' : ''}"` : ''}>${num(c.openFailures)}</td>
<td class="n${idle ? ' alert' : ''}" data-field="consumers">${num(c.consumers)}</td>
<td class="n" data-field="redeliverRate">${num(c.redeliverRate, 2)}</td>
<td class="tiers">${c.tiers.map((t) => h`<span class="tier" data-tier="${t.queue}" title="${t.queue}">${t.delay}: <b>${num(t.depth)}</b></span> `)}</td>
</tr>`;
}

/** The problems list, the same kinds as `warren status`. */
export function problemsList(overview: Overview): Fragment {
  if (overview.problems.length === 0) return h`<p id="problems-ok" class="ok">No problem: nothing parked, every work queue with messages has a consumer.</p><ul id="problems"></ul>`;
  return h`<ul id="problems">${overview.problems.map((p) => h`<li data-kind="${p.kind}" data-consumer="${p.consumer}"><b>${p.consumer}</b>: ${p.message}</li>`)}</ul>`;
}

function databaseTable(ctx: PageContext, overview: Overview): Fragment {
  if (overview.retryTable === null && overview.outbox === null && overview.databaseError === null) {
    return h`<p class="muted" id="no-database">No database given: the retry table and the outbox are not shown (start with --db).</p>`;
  }
  if (overview.databaseError !== null) return h`<p class="error" id="database-error">${overview.databaseError}</p>`;
  const r = overview.retryTable;
  const o = overview.outbox;
  return h`<table id="database" class="grid">
<thead><tr><th></th><th>rows</th><th>due</th><th>paused</th><th>waiting</th><th>oldest due / pending</th><th>flagged</th></tr></thead>
<tbody>
<tr data-store="retry"><th scope="row"><a href="${ctx.base}/retry">retry table</a></th><td class="n" data-field="rows">${num(r?.rows)}</td><td class="n" data-field="due">${num(r?.due)}</td><td class="n" data-field="paused">${num(r?.paused)}</td><td class="n" data-field="waiting">${num(r?.waiting)}</td><td class="n" data-field="oldest">${r && r.due > 0 ? span(r.oldestDueAgeMs) : '–'}</td><td></td></tr>
<tr data-store="outbox"><th scope="row"><a href="${ctx.base}/outbox">outbox</a></th><td class="n" data-field="rows">${num(o ? o.pending + o.failed : null)}</td><td></td><td></td><td class="n" data-field="pending">${num(o?.pending)}</td><td class="n" data-field="oldest">${o && o.pending > 0 ? span(o.oldestPendingAgeMs) : '–'}</td><td class="n${o && o.failed > 0 ? ' alert' : ''}" data-field="failed">${num(o?.failed)}</td></tr>
</tbody></table>`;
}

/**
 * Hand pauses kept in the database, with the operator's forms: a pause here reaches every
 * running consumer given `control: store.control`, in every process.
 */
function pausesTable(ctx: PageContext, overview: Overview): Fragment {
  if (overview.retryTable === null) return h``;
  const operator = ctx.user.role === 'operator';
  const post = (name: string, action: string) => `${ctx.base}/consumers/${encodeURIComponent(name)}/${action}`;
  return h`<h2>Hand pauses</h2>
<p class="muted">A pause made here is kept in the database: every running consumer given <code>control: store.control</code> stops taking messages within its interval (1 s by default), in every process, and its messages wait in its work queue, no attempt counted. The breaker never lifts it; only a resume does. Each is recorded with its reason.</p>
<table id="pauses" class="grid"><thead><tr><th>consumer</th><th>state</th><th></th></tr></thead><tbody>
${overview.consumers.map((c) => {
  const p = c.pause;
  const state = p === null ? h`<td data-field="state">taking messages</td>` : h`<td data-field="state" class="alert">paused by ${p.actor} since ${when(new Date(p.since))}: ${p.reason}</td>`;
  const form = !operator
    ? h``
    : p === null
      ? h`<form class="inline" method="post" action="${post(c.name, 'pause')}">${csrfField(ctx)}<input type="text" name="reason" required maxlength="500" size="28" placeholder="why, e.g. carrier maintenance"><button type="submit" data-action="pause">Pause</button></form>`
      : h`<form class="inline" method="post" action="${post(c.name, 'resume')}">${csrfField(ctx)}<button type="submit" data-action="resume">Resume</button></form>`;
  return h`<tr data-pause="${c.name}"><th scope="row">${c.name}</th>${state}<td>${form}</td></tr>`;
})}
</tbody></table>`;
}

/** The overview's body, without the frame: what a test renders. */
export function overviewBody(ctx: PageContext, overview: Overview): Fragment {
  return h`<section id="overview" data-poll="${ctx.base}/api/overview" data-history="${ctx.base}/api/history">
<p class="meta">Read at <time id="read-at" datetime="${overview.at}">${overview.at}</time> from <span id="source">${overview.source}</span>${overview.sourceError && overview.source !== 'management' ? h` <span class="muted" id="source-error">(${overview.sourceError})</span>` : ''}. Refreshes every few seconds.</p>
<h2>Problems</h2>
<div id="problems-box">${problemsList(overview)}</div>
<h2>Consumers</h2>
<table id="consumers" class="grid">
<thead><tr><th>consumer</th><th>work depth</th><th>${overview.archive !== null ? 'open failures' : 'parked'}</th><th>consumers</th><th>redeliveries/s</th><th>retry tiers</th></tr></thead>
<tbody>${overview.consumers.map((c) => consumerRow(ctx, c))}</tbody>
</table>
${pausesTable(ctx, overview)}
<h2>Database</h2>
${databaseTable(ctx, overview)}
<h2>Last hour</h2>
<p class="muted">Sampled by this console process every ${span(overview.sampleIntervalMs)} into memory (the last ${span(overview.historyMs)}); the charts start empty when the console starts.</p>
<div id="charts">${overview.consumers.map((c) => h`<figure class="chart-box"><figcaption>${c.name}</figcaption><div class="chart" data-chart="${c.name}"></div></figure>`)}</div>
</section>`;
}

/** The overview page. */
export function overviewPage(ctx: PageContext, overview: Overview): string {
  return layout(ctx, { title: 'Overview', section: 'overview', body: overviewBody(ctx, overview), charts: true });
}
