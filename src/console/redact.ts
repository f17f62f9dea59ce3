import { redactUrl, redactUrls } from '../connection/url.js';

/** Any URL with a password in `text`, masked: error texts from drivers can carry the one they were given. */
export function redactText(text: string): string {
  return redactUrls(text);
}

export { redactUrl };
