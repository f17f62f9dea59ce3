// A headless Chromium for the console's browser tests: Debian's package (scripts/chromium.sh
// installs it), driven by playwright-core, which never downloads a browser of its own.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { onTestFinished } from 'vitest';
import { onTeardown } from './helpers.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** Where screenshots go: git-ignored (.warren/), kept as test artifacts. */
export const SCREENSHOTS = join(ROOT, '.warren/test-results/screenshots');

let cachedPath: string | undefined;

/**
 * The Chromium binary: WARREN_CHROMIUM, else what scripts/chromium.sh finds (it installs
 * Debian's package when missing and it may, as root).
 */
export function chromiumPath(): string {
  if (cachedPath !== undefined) return cachedPath;
  const env = process.env['WARREN_CHROMIUM'];
  if (env !== undefined && env !== '' && existsSync(env)) return (cachedPath = env);
  for (const p of ['/usr/bin/chromium', '/usr/bin/chromium-browser']) if (existsSync(p)) return (cachedPath = p);
  try {
    cachedPath = execFileSync('bash', [join(ROOT, 'scripts/chromium.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 600_000 }).trim();
  } catch (error) {
    throw new Error(`No Chromium for the browser tests: run \`bash scripts/chromium.sh\` (as root it installs Debian's chromium), or set WARREN_CHROMIUM to a Chromium binary. (${error instanceof Error ? error.message : String(error)})`, { cause: error });
  }
  return cachedPath;
}

/** Options of {@link launchBrowser}. */
export interface LaunchOptions {
  /** @default { width: 1280, height: 800 } */
  viewport?: { width: number; height: number };
}

/** A headless Chromium and one context, closed after the test. */
export interface TestBrowser {
  readonly browser: Browser;
  readonly context: BrowserContext;
  /** A new page whose console errors and page errors fail the test (see {@link watchErrors}). */
  page(): Promise<Page>;
}

/**
 * Launches Debian's Chromium headless through playwright-core (never a downloaded
 * browser), with a fresh context; both are closed after the test.
 *
 * @example
 * const { page } = await launchBrowser();
 * const p = await page();
 * await p.goto(url);
 */
export async function launchBrowser(options: LaunchOptions = {}): Promise<TestBrowser> {
  const browser = await chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    // As root (CI, the dev machines) Chromium refuses to start with its sandbox.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
  onTeardown(() => browser.close());
  const context = await browser.newContext({ viewport: options.viewport ?? { width: 1280, height: 800 } });
  return {
    browser,
    context,
    async page() {
      const p = await context.newPage();
      watchErrors(p);
      return p;
    },
  };
}

/** The errors a page reported: console errors, and uncaught errors in its scripts. */
export interface PageErrors {
  readonly messages: string[];
  /** Throws when the page reported any error. Called after the test by {@link watchErrors}. */
  check(): void;
}

const watched = new WeakMap<Page, PageErrors>();

/**
 * Collects the page's console errors and page errors, and fails the test after it ends
 * if there were any. `allow` lists patterns of errors the test provokes on purpose
 * (a refused request shows as a console error, for one).
 */
export function watchErrors(page: Page, allow: readonly RegExp[] = []): PageErrors {
  const existing = watched.get(page);
  if (existing) return existing;
  const messages: string[] = [];
  /** Patterns are matched against `console error: TEXT (URL)` and against a page error's message. */
  const allowed = (text: string) => allow.some((re) => re.test(text)) || extraAllowed.get(page)?.some((re) => re.test(text)) === true;
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // Matched against the text with the URL it came from, e.g. a 404 names its resource only there.
    const text = `console error: ${m.text()} (${m.location().url})`;
    if (!allowed(text)) messages.push(text);
  });
  page.on('pageerror', (e) => {
    if (!allowed(e.message)) messages.push(`page error: ${e.message}`);
  });
  const errors: PageErrors = {
    messages,
    check() {
      if (messages.length > 0) throw new Error(`The page reported ${messages.length} error(s):\n${messages.join('\n')}`);
    },
  };
  watched.set(page, errors);
  // Not onTeardown: its errors are swallowed. A throw here fails the test.
  onTestFinished(() => errors.check());
  return errors;
}

const extraAllowed = new WeakMap<Page, RegExp[]>();

/** Lets a page report errors matching `patterns` without failing the test: ones it provokes on purpose. */
export function allowErrors(page: Page, ...patterns: RegExp[]): void {
  extraAllowed.set(page, [...(extraAllowed.get(page) ?? []), ...patterns]);
}

/** Fails now if the page reported an error so far. */
export function assertNoPageErrors(page: Page): void {
  watched.get(page)?.check();
}

/**
 * Saves a full-page screenshot to `.warren/test-results/screenshots/<name>.png` and
 * returns its path. `name`: letters, digits, `.`, `_` and `-`.
 */
export async function screenshot(page: Page, name: string): Promise<string> {
  if (!/^[A-Za-z0-9._-]{1,100}$/.test(name)) throw new Error(`screenshot name ${JSON.stringify(name)}: use 1-100 letters, digits, '.', '_' or '-'`);
  mkdirSync(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
