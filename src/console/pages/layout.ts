/**
 * The frame every page shares. Pages are plain functions from data to HTML, built with
 * Hono's `html` template, which escapes every interpolated string: a message body, a
 * header or an error text is always text on the page, never markup.
 */
import { html } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';
import type { ConsoleUser } from '../auth.js';

/** A fragment of HTML; interpolating it into another does not escape it twice. */
export type Fragment = HtmlEscapedString;

/** `html`, for templates that interpolate no promise (all of the console's). */
export function h(strings: TemplateStringsArray, ...values: unknown[]): Fragment {
  return html(strings, ...values) as Fragment;
}

/** What every page needs to know about the request. */
export interface PageContext {
  /** The path the console is mounted under, without a trailing slash ('' at the root). */
  readonly base: string;
  readonly user: ConsoleUser;
  /** The user's CSRF token, put in every form. */
  readonly csrf: string;
  /** Where the console reads from, passwords masked. */
  readonly broker: string;
  readonly database: string | null;
}

const NAV = [
  ['overview', '/', 'Overview'],
  ['parked', '/parked', 'Parked'],
  ['retry', '/retry', 'Retry table'],
  ['outbox', '/outbox', 'Outbox'],
  ['actions', '/actions', 'Actions'],
] as const;

/** The hidden field that carries the CSRF token in a form. */
export function csrfField(ctx: PageContext): Fragment {
  return h`<input type="hidden" name="_csrf" value="${ctx.csrf}">`;
}

/** A number, or an en dash when unknown. */
export function num(value: number | null | undefined, digits = 0): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return digits > 0 ? value.toFixed(digits) : String(value);
}

/** A duration in words: 850 ms, 42 s, 3 min, 2 h. */
export function span(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.round(ms / 3_600_000)} h`;
}

/** A time as ISO text, or an en dash. */
export function when(value: Date | string | null | undefined): string {
  if (value === null || value === undefined) return '–';
  return typeof value === 'string' ? value : value.toISOString();
}

/** Options of {@link layout}. */
export interface LayoutOptions {
  readonly title: string;
  /** Which navigation entry is current. */
  readonly section: (typeof NAV)[number][0] | 'job';
  readonly body: Fragment;
  /** The page needs the chart library. */
  readonly charts?: boolean;
}

/** The whole page: head with the console's CSS and JS files (no inline script or style), navigation, body. */
export function layout(ctx: PageContext, options: LayoutOptions): string {
  const a = (path: string) => `${ctx.base}${path}`;
  return h`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="warren-csrf" content="${ctx.csrf}">
<title>${options.title} · warren</title>
<link rel="icon" href="${a('/assets/favicon.svg')}" type="image/svg+xml">
<link rel="stylesheet" href="${a('/assets/console.css')}">
${options.charts ? h`<link rel="stylesheet" href="${a('/assets/uplot.css')}">
<script src="${a('/assets/uplot.js')}" defer></script>` : ''}
<script src="${a('/assets/console.js')}" defer></script>
</head>
<body data-base="${ctx.base}" data-role="${ctx.user.role}">
<header>
<a class="brand" href="${a('/')}">warren</a>
<nav>${NAV.map(([id, path, label]) => h`<a href="${a(path)}" data-nav="${id}"${id === options.section ? h` aria-current="page"` : ''}>${label}</a>`)}</nav>
<span class="who" id="who">${ctx.user.user} (${ctx.user.role})</span>
</header>
<main id="main">
<h1>${options.title}</h1>
${options.body}
</main>
<footer><span id="broker">broker ${ctx.broker}</span>${ctx.database ? h` · <span id="database-name">database ${ctx.database}</span>` : ''}</footer>
</body>
</html>`.toString();
}

/** A page that says what went wrong, as text. */
export function errorPage(ctx: PageContext, title: string, text: string): string {
  return layout(ctx, { title, section: 'overview', body: h`<p class="error" id="error">${text}</p>` });
}
