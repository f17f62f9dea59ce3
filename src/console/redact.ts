import { redactUrl } from '../connection/url.js';

/** Any URL with a password in `text`, masked: error texts from drivers can carry the one they were given. */
export function redactText(text: string): string {
  return text
    .replace(/[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]+/gi, (url) => redactUrl(url))
    .replace(/([a-z][a-z0-9+.-]*:\/\/[^:@/\s]+):[^@/\s]+@/gi, '$1:***@')
    .replace(/([?&]password=)[^&\s"'<>]*/gi, '$1***');
}

export { redactUrl };
