import { HEADER, MAX_ERROR_MESSAGE_CHARS, MAX_STACK_FRAMES } from '../headers.js';

/** The readable part of a failure, as warren stores it in headers. */
export interface FailureInfo {
  /** Error class: the error's `name`, or its constructor's name, or `typeof` for non-errors. */
  readonly errorClass: string;
  /** The message, cut to {@link MAX_ERROR_MESSAGE_CHARS}. */
  readonly message: string;
  /** The first stack frames, one per line, without the message line. */
  readonly stack: string;
}

/** Cuts `text` to `max` characters, saying how much was dropped. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  const note = `… [${text.length - max} more characters cut]`;
  return text.slice(0, Math.max(0, max - note.length)) + note;
}

/** Describes anything a handler may throw, in bounded size. */
export function describeFailure(error: unknown): FailureInfo {
  if (error instanceof Error) {
    const errorClass = error.name && error.name !== 'Error' ? error.name : error.constructor?.name || 'Error';
    const frames = (error.stack ?? '')
      .split('\n')
      .filter((line) => /^\s+at /.test(line))
      .slice(0, MAX_STACK_FRAMES)
      .map((line) => truncate(line.trim(), 300));
    return { errorClass, message: truncate(String(error.message), MAX_ERROR_MESSAGE_CHARS), stack: frames.join('\n') };
  }
  let text: string;
  try {
    text = typeof error === 'string' ? error : JSON.stringify(error) ?? String(error);
  } catch {
    text = String(error);
  }
  return { errorClass: error === null ? 'null' : typeof error, message: truncate(text, MAX_ERROR_MESSAGE_CHARS), stack: '' };
}

/** The failure headers for a message that just failed, keeping the first failure time. */
export function failureHeaders(
  failure: FailureInfo,
  previous: Readonly<Record<string, unknown>>,
  now: Date,
): Record<string, string> {
  const first = previous[HEADER.firstFailedAt];
  return {
    [HEADER.errorClass]: failure.errorClass,
    [HEADER.errorMessage]: failure.message,
    [HEADER.errorStack]: failure.stack,
    [HEADER.firstFailedAt]: typeof first === 'string' && first ? first : now.toISOString(),
    [HEADER.lastFailedAt]: now.toISOString(),
  };
}

/**
 * A fingerprint that groups parked messages failing for the same cause: error
 * class, message with numbers, ids and quoted values masked, and first stack frame.
 */
export function failureFingerprint(errorClass: string, message: string, stack: string): string {
  const masked = message
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, '<id>')
    .replace(/\b[0-9a-f]{16,}\b/gi, '<id>')
    .replace(/(["'`])(?:(?!\1).){0,200}\1/g, '<str>')
    .replace(/\d+(?:\.\d+)?/g, '<n>');
  return `${errorClass}: ${masked}${stack ? ` @ ${frameSite(stack.split('\n')[0] ?? '')}` : ''}`;
}

/**
 * The first frame as `function (file)`: the directory and line are dropped, so the
 * same failure groups together across deploys, checkouts and small edits.
 */
function frameSite(line: string): string {
  const text = line.trim().replace(/^at\s+/, '');
  const m = /^(.*?)\s*\((.*)\)$/.exec(text);
  const fn = m ? m[1] : '';
  const location = (m ? m[2] : text) ?? '';
  const file = location.replace(/:\d+(?::\d+)?$/, '').split(/[\\/]/).pop() ?? location;
  return fn ? `${fn} (${file})` : file;
}
