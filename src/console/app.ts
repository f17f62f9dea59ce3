/**
 * The console's routes on Hono. Every request is authorized; every POST needs the
 * user's CSRF token and, but for the export, the operator role; every response carries a strict
 * Content-Security-Policy (scripts and styles only from the console's own files). Only
 * the console's own pages and direct requests are answered (see {@link foreignRequest}),
 * HEAD does no work, and every route that does work is a POST.
 */
import { Hono, type Context } from 'hono';
import { InvalidOptionError, UnknownConsumerError, WarrenError } from '../errors.js';
import { QueueNotFoundError } from '../park/errors.js';
import { CONSOLE_CSS, CONSOLE_JS, uplotAssets } from './assets.js';
import { bodyLimit } from 'hono/body-limit';
import { checkCsrf, csrfToken } from './auth.js';
import { ConsoleData } from './data.js';
import { CSP, setSecurityHeaders } from './headers.js';
import type { Jobs } from './jobs.js';
import type { ResolvedOptions } from './options.js';
import { errorPage, type PageContext } from './pages/layout.js';
import { overviewPage } from './pages/overview.js';
import { ConsoleHttpError, type ConsoleEnv, type RouteDeps } from './http.js';
import { actionRecorder } from './recorder.js';
import { redactText } from './redact.js';
import { archiveRoutes } from './routes/archive.js';
import { parkedRoutes } from './routes/parked.js';
import { storeRoutes } from './routes/store.js';

/** The console's icon: a parked-queue square in the alert colour. */
const FAVICON_SVG = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect x="2" y="2" width="12" height="12" rx="3" fill="#b3261e"/></svg>';

export { CSP };

/**
 * Why a request comes from another site's page, or null when it comes from the console's
 * own pages or directly (an address typed, curl, a script). Browsers say where a request
 * comes from in Sec-Fetch-Site; older ones at least send Origin on cross-origin requests,
 * which must then be the console's own: its host (or the proxy's, in X-Forwarded-Host) and
 * scheme (or the proxy's, in X-Forwarded-Proto).
 */
export function foreignRequest(c: Context): string | null {
  const site = c.req.header('sec-fetch-site')?.trim().toLowerCase();
  if (site === 'cross-site') return 'this request comes from a page of another site';
  if (site === 'same-site') return 'this request comes from another origin of the same site (another host or port)';
  const origin = c.req.header('origin');
  if (origin === undefined) return null;
  const url = new URL(c.req.url);
  const first = (name: string) => c.req.header(name)?.split(',')[0]?.trim().toLowerCase() || undefined;
  const hosts = [url.host, c.req.header('host')?.toLowerCase(), first('x-forwarded-host')].filter((x): x is string => x !== undefined);
  const schemes = [url.protocol.replace(/:$/, ''), first('x-forwarded-proto')].filter((x): x is string => x !== undefined);
  const own = new Set(hosts.flatMap((host) => schemes.map((scheme) => `${scheme}://${host}`)));
  return own.has(origin.trim().toLowerCase()) ? null : `this request comes from another origin (${origin.slice(0, 100)})`;
}

/** POSTs a viewer may make: they change nothing, and are POSTs so that no other page can set them off with a link. */
const VIEWER_POSTS = [/^\/parked\/[^/]+\/export\/?$/];

function viewerMayPost(basePath: string, path: string): boolean {
  const rest = path.slice(basePath.length);
  return VIEWER_POSTS.some((re) => re.test(rest));
}

function wantsJson(c: Context): boolean {
  return c.req.path.includes('/api/') || (c.req.header('accept') ?? '').startsWith('application/json');
}

/** Builds the Hono app of one console. */
export function consoleApp(options: ResolvedOptions, data: ConsoleData, jobs: Jobs): Hono<ConsoleEnv> {
  // Not strict: /ops and /ops/ are the same page.
  const app = new Hono<ConsoleEnv>({ strict: false }).basePath(options.basePath || '/');
  const deps: RouteDeps = {
    options,
    data,
    jobs,
    ...actionRecorder(options.actionLog),
  };

  app.use('*', async (c, next) => {
    await next();
    setSecurityHeaders(c.res.headers);
  });

  // Before the body is parsed anywhere (the CSRF check reads the form): a larger one is never read whole.
  app.use(
    '*',
    bodyLimit({
      maxSize: options.maxBodyBytes,
      onError: (c) => c.text(`Refused: the request body is larger than ${options.maxBodyBytes} bytes, more than any of the console's forms sends.`, 413, { connection: 'close' }),
    }),
  );

  app.use('*', async (c, next) => {
    if (options.allowedHosts) {
      const host = (c.req.header('host') ?? '').toLowerCase();
      if (!options.allowedHosts.has(host)) return c.text(`Host ${JSON.stringify(host)} is not one this console answers to.`, 403);
    }
    // Before anything else is read or done: another site's page (an <img>, a form, a script) gets nothing.
    const foreign = foreignRequest(c);
    if (foreign) return c.text(`Refused: ${foreign}. The console answers only to its own pages and to requests made directly: open the console's address yourself.`, 403);
    const user = await options.authorize(c.req.raw);
    if (!user) {
      const res = c.text('Sign in to use the console.', 401);
      if (options.challenge) res.headers.set('www-authenticate', options.challenge);
      return res;
    }
    if (user.role !== 'viewer' && user.role !== 'operator') return c.text('authorize returned a role that is neither viewer nor operator.', 500);
    // HEAD answers with headers only and does no work: no reading of a queue, no export, no record.
    if (c.req.method === 'HEAD') return c.body(null, 200, { 'content-type': wantsJson(c) ? 'application/json' : 'text/html; charset=utf-8' });
    c.set('user', user);
    const brokerName = options.brokerName;
    c.set('page', {
      base: options.basePath,
      user,
      csrf: csrfToken(options.csrfSecret, user),
      // Asked when the page is laid out, after its reading opened the connection: the node it is on then.
      get broker() {
        return brokerName();
      },
      database: options.databaseName,
    });
    if (c.req.method !== 'GET') {
      if (c.req.method !== 'POST') return c.text('Only GET and POST are used.', 405);
      if (user.role !== 'operator' && !viewerMayPost(options.basePath, c.req.path)) return c.text(`${user.user} is a viewer: changes need the operator role.`, 403);
      let token = c.req.header('x-warren-csrf');
      if (token === undefined) {
        const type = c.req.header('content-type') ?? '';
        if (type.startsWith('application/x-www-form-urlencoded') || type.startsWith('multipart/form-data')) {
          const body = await c.req.parseBody({ all: true });
          const value = body['_csrf'];
          token = typeof value === 'string' ? value : undefined;
        }
      }
      if (!checkCsrf(options.csrfSecret, user, token)) return c.text('Missing or wrong CSRF token: reload the page and try again.', 403);
    }
    await next();
  });

  // A small icon, so a browser's request for one is answered (a 404 is a console error in Chromium).
  const icon = (c: { body: (data: string, status: 200, headers: Record<string, string>) => Response }) => c.body(FAVICON_SVG, 200, { 'content-type': 'image/svg+xml', 'cache-control': 'max-age=86400' });
  app.get('/assets/favicon.svg', (c) => icon(c));
  app.get('/favicon.ico', (c) => icon(c));
  app.get('/assets/console.js', (c) => c.body(CONSOLE_JS, 200, { 'content-type': 'text/javascript; charset=utf-8' }));
  app.get('/assets/console.css', (c) => c.body(CONSOLE_CSS, 200, { 'content-type': 'text/css; charset=utf-8' }));
  app.get('/assets/uplot.js', async (c) => c.body((await uplotAssets()).js, 200, { 'content-type': 'text/javascript; charset=utf-8' }));
  app.get('/assets/uplot.css', async (c) => c.body((await uplotAssets()).css, 200, { 'content-type': 'text/css; charset=utf-8' }));

  app.get('/', async (c) => c.html(overviewPage(c.get('page'), await data.overview())));
  app.get('/api/overview', async (c) => c.json(await data.overview()));
  app.get('/api/history', (c) => c.json(data.history()));

  // With an archive, the parked pages read it; the queue's routes answer the rest (the jobs).
  if (options.archive) archiveRoutes(app, deps, options.archive);
  parkedRoutes(app, deps);
  storeRoutes(app, deps);

  app.notFound((c) => {
    const page = c.get('page') as PageContext | undefined;
    const res = !page || wantsJson(c) ? c.json({ error: 'not found' }, 404) : c.html(errorPage(page, 'Not found', `Nothing at ${c.req.path}.`), 404);
    // Outside the base path no middleware ran: the headers are set here for those too.
    setSecurityHeaders(res.headers);
    return res;
  });

  app.onError((error, c) => {
    let status: 400 | 403 | 404 | 409 | 500 | 502 | 503 = 500;
    if (error instanceof ConsoleHttpError) status = error.status;
    else if (error instanceof InvalidOptionError) status = 400;
    else if (error instanceof UnknownConsumerError || error instanceof QueueNotFoundError) status = 404;
    else if (error instanceof WarrenError && (error.code === 'BROKER_UNREACHABLE' || error.code === 'STORE_UNAVAILABLE')) status = 502;
    else if (error instanceof WarrenError && error.code === 'UNKNOWN_DEPENDENCY') status = 400;
    const text = redactText(error instanceof Error ? error.message : String(error));
    const page = c.get('page') as PageContext | undefined;
    if (!page || wantsJson(c)) return c.json({ error: text }, status);
    return c.html(errorPage(page, status >= 500 ? 'Something failed' : 'Cannot do that', text), status);
  });
  return app;
}
