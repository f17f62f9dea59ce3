/*
 * Masking passwords in URLs. Done on the text, never by parsing the URL: a password with a
 * raw `/`, `#`, `?` or `@` makes a URL parser put the authority's end in the wrong place,
 * and a masking that parses then shows the password as a host, a path or a fragment. The
 * rule is simple enough to hold whatever a password holds: everything between `://` and
 * the last `@` is the user information.
 */

/** A user name as URLs spell it (RFC 3986 userinfo without the colon): kept when masking. */
const PLAIN_USER = /^[A-Za-z0-9._~%!$&'()*+,;=-]+$/;

/** A `password=` parameter (libpq takes one), masked too. */
const PASSWORD_PARAM = /([?&]password=)[^&#\s"'<>]*/gi;

/** The user information of a URL (between `://` and the last `@`), or undefined when it has none. */
function userInfo(url: string): { scheme: string; info: string; rest: string } | undefined {
  const start = url.indexOf('://');
  if (start < 0) return undefined;
  const at = url.lastIndexOf('@');
  if (at < start + 3) return undefined;
  return { scheme: url.slice(0, start + 3), info: url.slice(start + 3, at), rest: url.slice(at) };
}

/**
 * The user name and password of a URL as written, without parsing it (so a password with a
 * raw `/`, `#` or `@` is still found whole), or undefined when it names no password.
 */
export function credentialsOf(url: string): { user: string; password: string } | undefined {
  const u = userInfo(url);
  if (!u) return undefined;
  const colon = u.info.indexOf(':');
  if (colon < 0) return undefined;
  return { user: u.info.slice(0, colon), password: u.info.slice(colon + 1) };
}

/**
 * The URL with its password masked, safe to print: everything between `://` and the last
 * `@` becomes `***`, but for a plain user name before the first `:`; a `password=`
 * parameter is masked too. Whatever characters the password holds, none is shown.
 *
 * @example
 * redactUrl('amqp://ops:s3/cr@t#@rabbit-1:5672/prod'); // 'amqp://ops:***@rabbit-1:5672/prod'
 */
export function redactUrl(url: string): string {
  const u = userInfo(url);
  let out = url;
  if (u) {
    const colon = u.info.indexOf(':');
    const user = colon < 0 ? u.info : u.info.slice(0, colon);
    // No password (postgres://app@db) leaves the user as it is; a user part that is not a plain name is masked whole.
    const shown = !PLAIN_USER.test(user) ? '***' : colon < 0 ? user : `${user}:***`;
    out = `${u.scheme}${shown}${u.rest}`;
  }
  return out.replace(PASSWORD_PARAM, '$1***');
}

const SCHEME_CHAR = /[A-Za-z0-9+.-]/;
const LETTER = /[A-Za-z]/;
const SPACE = /\s/;

/**
 * Every URL in `text` masked as {@link redactUrl} does: error texts from drivers can
 * carry the URL they were given. A URL is a scheme, `://`, then anything but white space
 * up to the next URL, so a password with quotes or brackets in it is still masked (at
 * worst, more than the password is). One pass over the text, with no regular expression
 * that could backtrack, however long the text.
 */
export function redactUrls(text: string): string {
  const starts: number[] = [];
  for (let i = text.indexOf('://'); i >= 0; i = text.indexOf('://', i + 3)) {
    let s = i;
    while (s > 0 && i - s < 32 && SCHEME_CHAR.test(text.charAt(s - 1))) s -= 1;
    while (s < i && !LETTER.test(text.charAt(s))) s += 1;
    if (s < i && (starts.length === 0 || s >= (starts.at(-1) as number))) starts.push(s);
  }
  let out = '';
  let copied = 0;
  starts.forEach((start, k) => {
    const limit = starts[k + 1] ?? text.length;
    let end = start;
    while (end < limit && !SPACE.test(text.charAt(end))) end += 1;
    out += text.slice(copied, start) + redactUrl(text.slice(start, end));
    copied = end;
  });
  return (out + text.slice(copied)).replace(PASSWORD_PARAM, '$1***');
}
