/** The headers every answer of the console carries, the Node adapter's own included. */

/** The Content-Security-Policy every console response carries: nothing inline, nothing from elsewhere, never framed. */
export const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** CSP, no sniffing, no framing, no referrer to other sites, no caching. */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** Sets the security headers on `headers` (over whatever a route set). */
export function setSecurityHeaders(headers: Headers): void {
  for (const [k, v] of Object.entries(SECURITY_HEADERS)) headers.set(k, v);
}
