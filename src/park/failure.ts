import { HEADER, MAX_ERROR_CLASS_CHARS, MAX_ERROR_MESSAGE_CHARS, MAX_STACK_FRAME_CHARS, MAX_STACK_FRAMES } from '../headers.js';

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

/** Runs `read`, returning `fallback` when it throws: a thrown value's getters and traps are user code. */
function attempt<V>(read: () => V, fallback: V): V {
  try {
    return read();
  } catch {
    return fallback;
  }
}

/** Text for any value, never throwing: JSON when it has a JSON form, else `String()`, else a placeholder. */
function anyText(value: unknown): string {
  if (typeof value === 'string') return value;
  const json = attempt(() => JSON.stringify(value) as string | undefined, undefined);
  if (typeof json === 'string') return json;
  const text = attempt(() => String(value), undefined);
  return typeof text === 'string' ? text : `(a ${typeof value} that cannot be turned into text)`;
}

/**
 * Describes anything a handler may throw, in bounded size, and never throws itself:
 * an error whose `name`, `message` or `stack` is not a string, is huge, or is a getter
 * that throws, a Proxy, `null` and `undefined` are all described.
 */
export function describeFailure(error: unknown): FailureInfo {
  const isError = attempt(() => error instanceof Error, false);
  if (isError) {
    const e = error as Error;
    const name = attempt(() => e.name as unknown, undefined);
    const ctor = attempt(() => (e.constructor as { name?: unknown } | undefined)?.name, undefined);
    const errorClass = typeof name === 'string' && name !== '' && name !== 'Error' ? name : typeof ctor === 'string' && ctor !== '' ? ctor : 'Error';
    const message = attempt(() => e.message as unknown, undefined);
    const stack = attempt(() => e.stack as unknown, undefined);
    return {
      errorClass: truncate(errorClass, MAX_ERROR_CLASS_CHARS),
      message: truncate(message === undefined ? '' : anyText(message), MAX_ERROR_MESSAGE_CHARS),
      stack: typeof stack === 'string' ? stackFrames(stack) : '',
    };
  }
  return {
    errorClass: error === null ? 'null' : typeof error,
    message: truncate(anyText(error), MAX_ERROR_MESSAGE_CHARS),
    stack: '',
  };
}

/** The first frames of a stack, one per line, each cut short. Reads only the first lines of a huge stack. */
function stackFrames(stack: string): string {
  const frames: string[] = [];
  let from = 0;
  // A stack can be megabytes: walk it line by line, and stop at the last frame kept.
  while (frames.length < MAX_STACK_FRAMES && from < stack.length) {
    const end = stack.indexOf('\n', from);
    const line = stack.slice(from, end < 0 ? stack.length : Math.min(end, from + 10_000));
    if (/^\s+at /.test(line)) frames.push(truncate(line.trim(), MAX_STACK_FRAME_CHARS));
    if (end < 0) break;
    from = end + 1;
  }
  return frames.join('\n');
}

/** An ISO time written by warren, or undefined for anything else (a forged header can be anything). */
function ownTime(value: unknown): string | undefined {
  return typeof value === 'string' && value.length <= 40 && !Number.isNaN(Date.parse(value)) ? value : undefined;
}

/** The failure headers for a message that just failed, keeping the first failure time. */
export function failureHeaders(
  failure: FailureInfo,
  previous: Readonly<Record<string, unknown>>,
  now: Date,
): Record<string, string> {
  const at = now.toISOString();
  return {
    [HEADER.errorClass]: truncate(failure.errorClass, MAX_ERROR_CLASS_CHARS),
    [HEADER.errorMessage]: truncate(failure.message, MAX_ERROR_MESSAGE_CHARS),
    [HEADER.errorStack]: truncate(failure.stack, MAX_STACK_FRAMES * (MAX_STACK_FRAME_CHARS + 1)),
    [HEADER.firstFailedAt]: ownTime(previous[HEADER.firstFailedAt]) ?? at,
    [HEADER.lastFailedAt]: at,
  };
}

/**
 * A fingerprint that groups parked messages failing for the same cause: error
 * class, message with numbers, ids and quoted values masked, and first stack frame.
 */
export function failureFingerprint(errorClass: string, message: string, stack: string): string {
  const masked = truncate(message, MAX_ERROR_MESSAGE_CHARS)
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi, '<id>')
    .replace(/\b[0-9a-f]{16,}\b/gi, '<id>')
    .replace(/(["'`])(?:(?!\1).){0,200}\1/g, '<str>')
    .replace(/\d+(?:\.\d+)?/g, '<n>');
  return truncate(`${truncate(errorClass, MAX_ERROR_CLASS_CHARS)}: ${masked}${stack ? ` @ ${frameSite(stack.split('\n', 1)[0] ?? '')}` : ''}`, MAX_ERROR_MESSAGE_CHARS);
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
