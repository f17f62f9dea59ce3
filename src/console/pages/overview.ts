import type { ConsumerView, Overview } from '../data.js';
import { h, layout, num, span, type Fragment, type PageContext } from './layout.js';

function consumerRow(ctx: PageContext, c: ConsumerView): Fragment {
  // With an archive, the parked signal is its open failures plus what the parked queue still holds.
  const parked = c.openFailures ?? 0;
  const idle = (c.work.depth ?? 0) > 0 && c.consumers === 0;
  return h`<tr data-consumer="${c.name}">
<th scope="row"><a href="${ctx.base}/parked/${encodeURIComponent(c.name)}">${c.name}</a></th>
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
