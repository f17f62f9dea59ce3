// How the parked commands print one message in full and write JSON lines, on the queue
// and from the archive alike.
import { createWriteStream } from 'node:fs';
import { attemptHistory, decodeBody, plainValue, summarize, type ParkedMessage } from '../../park/message.js';
import type { CommandContext } from '../command.js';
import { CliError, EXIT, UsageError } from '../errors.js';
import { plural, when } from '../format.js';

/** A parked message in full: the failure, attempt history, routing, properties, every header and the body. */
export function printDetails(ctx: CommandContext, m: ParkedMessage): void {
  ctx.out('Failure');
  const failure: Array<[string, string]> = [
    ['error class', m.errorClass ?? '-'],
    ['message', m.errorMessage ?? '-'],
    ['reason', m.reason ?? '-'],
    ['attempts', m.attempts === undefined ? '-' : String(m.attempts)],
    ['first failed', when(m.firstFailedAt)],
    ['last failed', when(m.lastFailedAt)],
    ['parked at', when(m.parkedAt)],
    ['fingerprint', m.fingerprint],
  ];
  for (const [k, v] of failure) ctx.out(`  ${`${k}:`.padEnd(14)}${v.replace(/\n/g, '\n' + ' '.repeat(16))}`);
  if (m.errorStack) {
    ctx.out('  stack:');
    for (const frame of m.errorStack.split('\n')) ctx.out(`    ${frame}`);
  }
  ctx.out();
  ctx.out('Attempt history');
  const history = attemptHistory(m);
  if (history.length === 0) ctx.out('  (no failure recorded in the headers)');
  for (const h of history) ctx.out(`  ${h.at ? when(h.at) : '(time unknown)'.padEnd(20)}  ${h.detail}`);
  ctx.out();
  ctx.out('Routing');
  ctx.out(`  exchange:     ${m.exchange ?? '-'}`);
  ctx.out(`  routing key:  ${m.routingKey}`);
  ctx.out(`  consumer:     ${m.consumer ?? '-'}`);
  ctx.out(`  replays:      ${m.replays}${m.replayedAt ? ` (last ${when(m.replayedAt)})` : ''}`);
  ctx.out();
  ctx.out('Properties');
  const { headers: _h, ...props } = m.properties;
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null) continue;
    const stamp = k === 'timestamp' && typeof v === 'number' ? ` (${when(new Date(v * 1000))})` : '';
    ctx.out(`  ${k}: ${JSON.stringify(plainValue(v))}${stamp}`);
  }
  ctx.out();
  ctx.out('Headers');
  for (const [k, v] of Object.entries(m.headers).sort(([a], [b]) => a.localeCompare(b))) {
    const value = plainValue(v);
    ctx.out(`  ${k}: ${typeof value === 'string' ? value.replace(/\n/g, '\n    ') : JSON.stringify(value)}`);
  }
  ctx.out();
  const body = decodeBody(m.content);
  if (body.kind === 'json') {
    ctx.out(`Body (JSON, ${plural(m.content.length, 'byte')})`);
    ctx.out(JSON.stringify(body.value, null, 2));
  } else if (body.kind === 'text') {
    ctx.out(`Body (text, ${plural(m.content.length, 'byte')})`);
    ctx.out(body.text);
  } else {
    ctx.out(`Body (binary, ${plural(body.bytes, 'byte')}, base64)`);
    ctx.out(body.base64);
  }
}

/** One parked message as `parked show --json` prints it. */
export function showJson(m: ParkedMessage) {
  const body = decodeBody(m.content);
  const { headers: _h, ...props } = m.properties;
  return {
    ...summarize(m),
    consumer: m.consumer ?? null,
    failure: { errorClass: m.errorClass ?? null, message: m.errorMessage ?? null, stack: m.errorStack ?? null, reason: m.reason ?? null, attempts: m.attempts ?? null, firstFailedAt: m.firstFailedAt?.toISOString() ?? null, lastFailedAt: m.lastFailedAt?.toISOString() ?? null, parkedAt: m.parkedAt?.toISOString() ?? null },
    history: attemptHistory(m).map((h) => ({ at: h.at?.toISOString() ?? null, event: h.event, detail: h.detail })),
    properties: plainValue(Object.fromEntries(Object.entries(props).filter(([, v]) => v !== undefined && v !== null))),
    headers: plainValue(m.headers),
    body: body.kind === 'json' ? body.value : body.kind === 'text' ? body.text : null,
    bodyEncoding: body.kind === 'binary' ? 'base64' : body.kind,
    ...(body.kind === 'binary' ? { bodyBase64: body.base64 } : {}),
  };
}

/** Writes to a stream, waiting when its buffer is full; fails on a write error. */
export function writer(stream: NodeJS.WritableStream): { write(line: string): Promise<void>; error(): Error | undefined } {
  let failure: Error | undefined;
  stream.on('error', (e: Error) => {
    failure ??= e;
  });
  return {
    async write(line: string) {
      if (failure) throw failure;
      if (!stream.write(line)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            stream.off('drain', done);
            stream.off('error', done);
            resolve();
          };
          stream.on('drain', done);
          stream.on('error', done);
        });
      }
      if (failure) throw failure;
    },
    error: () => failure,
  };
}

/**
 * Runs an export whose JSON lines go to `file` (or stdout when none is given): the file
 * is opened first (a clear error when it cannot be), and closed after. Resolves to the
 * export's result, or `undefined` when the reader went away (`| head`), a normal end.
 */
export async function exportTo<R>(stdout: NodeJS.WritableStream, file: string | undefined, run: (write: (line: string) => Promise<void>) => Promise<R>): Promise<R | undefined> {
  let stream = stdout;
  let fileStream: ReturnType<typeof createWriteStream> | undefined;
  if (file !== undefined) {
    if (file === '') throw new UsageError('--output needs a file name.');
    const s = createWriteStream(file);
    await new Promise<void>((resolve, reject) => {
      s.once('open', () => resolve());
      s.once('error', (e) => reject(new UsageError(`--output: cannot write ${file}: ${e.message}`)));
    });
    stream = s;
    fileStream = s;
  }
  const out = writer(stream);
  try {
    return await run((line) => out.write(line));
  } catch (error) {
    const e = out.error();
    if (e && (e as { code?: string }).code === 'EPIPE') return undefined;
    if (e) throw new CliError(`Writing the export failed: ${e.message}`, EXIT.failed);
    throw error;
  } finally {
    if (fileStream) {
      const f = fileStream;
      await new Promise<void>((resolve) => f.end(resolve));
    }
  }
}
