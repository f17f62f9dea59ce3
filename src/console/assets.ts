/**
 * The console's own script and stylesheet, served as files by the handler (the
 * Content-Security-Policy allows no inline script or style), and uPlot's build, read
 * from the installed `uplot` package on first use.
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** The console's stylesheet. */
export const CONSOLE_CSS = String.raw`
:root { --fg:#1f2328; --muted:#656d76; --line:#d0d7de; --bg:#fff; --head:#f6f8fa; --alert:#cf222e; --alert-bg:#ffebe9; --ok:#1a7f37; --link:#0969da; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; gap:1.5rem; align-items:center; padding:.5rem 1rem; background:#24292f; color:#fff; }
header a { color:#fff; text-decoration:none; }
header nav { display:flex; gap:1rem; }
header nav a[aria-current=page] { border-bottom:2px solid #fff; }
.brand { font-weight:700; }
.who { margin-left:auto; opacity:.8; }
main { padding:1rem; max-width:1400px; }
footer { padding:1rem; color:var(--muted); font-size:12px; }
h1 { font-size:1.4rem; margin:.2rem 0 1rem; }
h2 { font-size:1.1rem; margin:1.5rem 0 .5rem; }
a { color:var(--link); }
table.grid { border-collapse:collapse; min-width:40%; }
table.grid th, table.grid td { border:1px solid var(--line); padding:.25rem .5rem; text-align:left; vertical-align:top; }
table.grid thead th { background:var(--head); }
td.n { text-align:right; font-variant-numeric:tabular-nums; }
.alert { color:var(--alert); background:var(--alert-bg); font-weight:700; }
.ok { color:var(--ok); }
.error { color:var(--alert); white-space:pre-wrap; }
.muted { color:var(--muted); }
.tier { margin-right:.6rem; white-space:nowrap; }
.badge { font-size:.8em; padding:0 .3rem; border-radius:3px; white-space:nowrap; }
#problems li { color:var(--alert); }
#charts { display:grid; grid-template-columns:repeat(auto-fill, minmax(340px, 1fr)); gap:1rem; }
.chart-box { margin:0; border:1px solid var(--line); padding:.5rem; }
.chart { min-height:140px; }
pre { background:var(--head); border:1px solid var(--line); padding:.5rem; overflow:auto; max-height:40rem; white-space:pre-wrap; word-break:break-word; }
form.inline { display:inline; }
form.box, fieldset { border:1px solid var(--line); padding:.5rem .75rem; margin:.5rem 0; }
label { margin-right:.75rem; }
input[type=text], input[type=number], input[type=search], select { padding:.2rem .3rem; }
button { padding:.25rem .7rem; cursor:pointer; }
button.danger { background:var(--alert); color:#fff; border:1px solid var(--alert); }
button:disabled { opacity:.5; cursor:not-allowed; }
.cell-text { max-width:40rem; overflow-wrap:anywhere; }
progress { width:20rem; }
[hidden] { display:none !important; }
dl.kv { display:grid; grid-template-columns:max-content 1fr; gap:.2rem 1rem; }
dl.kv dt { color:var(--muted); }
dl.kv dd { margin:0; overflow-wrap:anywhere; }
ol.timeline li { margin:.2rem 0; }
`;

/**
 * The console's script: refreshes the overview from its JSON endpoint, draws the
 * charts, follows a job's progress, and small form helpers. Plain ES2017, no framework.
 */
export const CONSOLE_JS = String.raw`
(function () {
  'use strict';
  var DASH = '\u2013';
  function fmt(v, d) { if (v === null || v === undefined || !isFinite(v)) return DASH; return d ? Number(v).toFixed(d) : String(v); }
  function getJson(url) {
    return fetch(url, { credentials: 'same-origin', headers: { accept: 'application/json' } }).then(function (r) {
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      return r.json();
    });
  }
  function text(el, v) { if (el && el.textContent !== v) el.textContent = v; }
  function esc(s) { return window.CSS && CSS.escape ? CSS.escape(s) : String(s).replace(/["\\]/g, '\\$&'); }
  function span(ms) { if (ms < 1000) return Math.round(ms) + ' ms'; if (ms < 120000) return Math.round(ms / 1000) + ' s'; if (ms < 7200000) return Math.round(ms / 60000) + ' min'; return Math.round(ms / 3600000) + ' h'; }

  // --- overview ------------------------------------------------------------
  var ov = document.getElementById('overview');
  if (ov) {
    var charts = {};
    var polls = 0;
    var renderOverview = function (o) {
      text(document.getElementById('read-at'), o.at);
      text(document.getElementById('source'), o.source);
      o.consumers.forEach(function (c) {
        var tr = ov.querySelector('tr[data-consumer="' + esc(c.name) + '"]');
        if (!tr) return;
        text(tr.querySelector('[data-field=work]'), fmt(c.work.depth));
        var p = tr.querySelector('[data-field=parked]');
        var pd = c.openFailures !== undefined ? c.openFailures : c.parked.depth;
        text(p, fmt(pd));
        p.classList.toggle('alert', (pd || 0) > 0);
        var k = tr.querySelector('[data-field=consumers]');
        text(k, fmt(c.consumers));
        k.classList.toggle('alert', (c.work.depth || 0) > 0 && c.consumers === 0);
        text(tr.querySelector('[data-field=redeliverRate]'), fmt(c.redeliverRate, 2));
        c.tiers.forEach(function (t) { text(tr.querySelector('[data-tier="' + esc(t.queue) + '"] b'), fmt(t.depth)); });
      });
      var box = document.getElementById('problems-box');
      if (box) {
        box.textContent = '';
        if (o.problems.length === 0) {
          var okp = document.createElement('p');
          okp.id = 'problems-ok';
          okp.className = 'ok';
          okp.textContent = 'No problem: nothing parked, every work queue with messages has a consumer.';
          box.appendChild(okp);
        }
        var ul = document.createElement('ul');
        ul.id = 'problems';
        o.problems.forEach(function (pr) {
          var li = document.createElement('li');
          li.setAttribute('data-kind', pr.kind);
          li.setAttribute('data-consumer', pr.consumer);
          var b = document.createElement('b');
          b.textContent = pr.consumer;
          li.appendChild(b);
          li.appendChild(document.createTextNode(': ' + pr.message));
          ul.appendChild(li);
        });
        box.appendChild(ul);
      }
      var db = document.getElementById('database');
      if (db && o.retryTable) {
        var r = o.retryTable, rr = db.querySelector('[data-store=retry]');
        ['rows', 'due', 'paused', 'waiting'].forEach(function (f) { text(rr.querySelector('[data-field=' + f + ']'), fmt(r[f])); });
        text(rr.querySelector('[data-field=oldest]'), r.due > 0 ? span(r.oldestDueAgeMs) : DASH);
      }
      if (db && o.outbox) {
        var ob = o.outbox, orow = db.querySelector('[data-store=outbox]');
        text(orow.querySelector('[data-field=rows]'), fmt(ob.pending + ob.failed));
        text(orow.querySelector('[data-field=pending]'), fmt(ob.pending));
        text(orow.querySelector('[data-field=oldest]'), ob.pending > 0 ? span(ob.oldestPendingAgeMs) : DASH);
        var fl = orow.querySelector('[data-field=failed]');
        text(fl, fmt(ob.failed));
        fl.classList.toggle('alert', ob.failed > 0);
      }
      ov.setAttribute('data-refreshes', String(polls));
    };
    var drawCharts = function (hist) {
      if (!window.uPlot) return;
      Object.keys(hist).forEach(function (name) {
        var el = ov.querySelector('[data-chart="' + esc(name) + '"]');
        if (!el) return;
        var hs = hist[name];
        var data = [hs.t, hs.work, hs.parked];
        if (charts[name]) { charts[name].setData(data); return; }
        charts[name] = new window.uPlot({
          width: Math.max(260, el.clientWidth || 320),
          height: 140,
          // The samples' own time range: uPlot widens one instant to 1000 days (86400 / ms, with ms the
          // 0.001 of seconds), so the range is taken from the samples, and fewer than five minutes of
          // them (one sample) are shown in five minutes around them.
          scales: { x: { time: true, range: function (u, min, max) {
            var t = u.data[0] || [];
            if (t.length === 0) { var now = Date.now() / 1000; return [now - 300, now]; }
            var lo = t[0], hi = t[t.length - 1];
            // Five minutes of samples or more: uPlot's range (a zoom's too) is theirs.
            if (hi - lo >= 300) return [min, max];
            var mid = (lo + hi) / 2;
            return [mid - 150, mid + 150];
          } } },
          series: [{}, { label: 'work', stroke: '#0969da', width: 1.5 }, { label: 'parked', stroke: '#cf222e', width: 1.5 }],
          axes: [{}, { size: 44 }],
          // The time range drawn, in seconds, for tests and scripts.
          hooks: { setScale: [function (u, key) { if (key === 'x') { el.setAttribute('data-x-min', String(u.scales.x.min)); el.setAttribute('data-x-max', String(u.scales.x.max)); } }] }
        }, data, el);
      });
    };
    var tick = function () {
      polls += 1;
      var jobs = [getJson(ov.getAttribute('data-poll')).then(renderOverview)];
      if (polls % 3 === 1) jobs.push(getJson(ov.getAttribute('data-history')).then(drawCharts));
      Promise.all(jobs).then(function () { ov.removeAttribute('data-poll-error'); }, function (e) { ov.setAttribute('data-poll-error', String(e && e.message || e)); })
        .then(function () { setTimeout(tick, 5000); });
    };
    tick();
  }

  // --- a job's progress ----------------------------------------------------
  var job = document.getElementById('job');
  if (job) {
    var follow = function () {
      getJson(job.getAttribute('data-job')).then(function (j) {
        job.setAttribute('data-state', j.state);
        Object.keys(j.progress || {}).forEach(function (k) { text(job.querySelector('[data-field="' + esc(k) + '"]'), fmt(j.progress[k])); });
        text(job.querySelector('[data-field=state]'), j.state);
        text(job.querySelector('[data-field=message]'), j.message || '');
        var bar = document.getElementById('job-progress');
        if (bar && j.progress) { bar.max = Math.max(1, j.progress.total || 0); bar.value = j.progress.scanned || 0; }
        var decide = document.getElementById('canary-decision');
        if (decide) decide.hidden = j.state !== 'awaiting-decision';
        var stop = document.getElementById('job-stop');
        if (stop) stop.hidden = !(j.state === 'running' || j.state === 'watching' || j.state === 'awaiting-decision');
        var canary = document.getElementById('canary-outcomes');
        if (canary && j.canary) {
          text(canary.querySelector('[data-field=sent]'), fmt(j.canary.sent));
          text(canary.querySelector('[data-field=returned]'), fmt(j.canary.returned));
          text(canary.querySelector('[data-field=window]'), j.canary.windowEndsAt || DASH);
          text(canary.querySelector('[data-field=rest]'), fmt(j.canary.rest));
          canary.setAttribute('data-verdict', j.canary.verdict || '');
        }
        if (j.state === 'running' || j.state === 'watching' || j.state === 'awaiting-decision') setTimeout(follow, 1000);
      }, function () { setTimeout(follow, 3000); });
    };
    follow();
  }

  // --- form helpers --------------------------------------------------------
  Array.prototype.forEach.call(document.querySelectorAll('input[data-select-all]'), function (box) {
    box.addEventListener('change', function () {
      Array.prototype.forEach.call(box.form.querySelectorAll('input[name=id]'), function (c) { c.checked = box.checked; });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll('input[data-confirm]'), function (input) {
    var expected = (input.getAttribute('data-confirm') || '').split('|');
    var submit = input.form.querySelector('[data-confirm-submit]');
    var check = function () { if (submit) submit.disabled = expected.indexOf(input.value.trim()) < 0; };
    input.addEventListener('input', check);
    check();
  });
})();
`;

let uplot: Promise<{ js: string; css: string }> | undefined;

/** uPlot's minified build and stylesheet, from the installed package (read once). */
export function uplotAssets(): Promise<{ js: string; css: string }> {
  uplot ??= (async () => {
    const require = createRequire(import.meta.url);
    // The package has no "exports" map; its main entry sits in dist/ beside the builds.
    const dist = dirname(require.resolve('uplot'));
    const [js, css] = await Promise.all([readFile(join(dist, 'uPlot.iife.min.js'), 'utf8'), readFile(join(dist, 'uPlot.min.css'), 'utf8')]);
    return { js, css };
  })();
  uplot.catch(() => {
    uplot = undefined;
  });
  return uplot;
}
