import { mkdir, open, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { InvalidOptionError } from '../errors.js';
import { checkEntry, checkQuery, type ActionEntry, type ActionLog, type ActionQuery, type ActionRecord } from './entry.js';

/**
 * The action record in a JSON-lines file: one line per action, appended with one write
 * (`O_APPEND`), so several processes can record to the same file. Nothing is ever
 * rewritten; a line that does not parse (a torn write after a crash) is skipped when listing.
 * Ids are `<time in ms>-<random>`, which sort in record order within a millisecond's accuracy.
 */
export class FileActionLog implements ActionLog {
  constructor(readonly path: string) {
    if (typeof path !== 'string' || path === '') throw new InvalidOptionError('path', 'expected a file path', 'Example: fileActionLog(".warren/actions.jsonl")');
  }

  async record(entry: ActionEntry): Promise<ActionRecord> {
    const e = checkEntry(entry);
    const record: ActionRecord = { id: `${e.at.getTime().toString().padStart(15, '0')}-${Math.random().toString(36).slice(2, 10)}`, ...e };
    await mkdir(dirname(this.path), { recursive: true });
    const line = `${JSON.stringify({ ...record, at: e.at.toISOString() })}\n`;
    const fh = await open(this.path, 'a+');
    try {
      // A torn last line (a crash mid-write) would swallow this one: start on a line of its own.
      const { size } = await fh.stat();
      const last = Buffer.alloc(1);
      if (size > 0) await fh.read(last, 0, 1, size - 1);
      await fh.appendFile(size > 0 && last[0] !== 0x0a ? `\n${line}` : line, 'utf8');
    } finally {
      await fh.close();
    }
    return record;
  }

  async list(query?: ActionQuery): Promise<ActionRecord[]> {
    const q = checkQuery(query);
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ENOENT') return [];
      throw error;
    }
    const out: ActionRecord[] = [];
    const lines = text.split('\n');
    for (let i = lines.length - 1; i >= 0 && out.length < q.limit; i--) {
      const line = lines[i];
      if (!line) continue;
      let raw: Record<string, unknown>;
      try {
        raw = JSON.parse(line) as Record<string, unknown>;
      } catch {
        continue;
      }
      const at = new Date(String(raw['at']));
      if (Number.isNaN(at.getTime())) continue;
      const r = { ...raw, at } as unknown as ActionRecord;
      if (q.since !== undefined && at < q.since) continue;
      if (q.action !== undefined && r.action !== q.action) continue;
      if (q.consumer !== undefined && r.consumer !== q.consumer) continue;
      out.push(r);
    }
    return out;
  }
}

/**
 * An action record kept in a JSON-lines file (created, with its directory, on the first record).
 *
 * @example
 * const log = fileActionLog('.warren/actions.jsonl');
 * await log.record({ actor: 'alice', action: 'parked.replay', consumer: 'billing', count: 12, outcome: 'ok' });
 * console.log(await log.list({ limit: 10 }));
 */
export function fileActionLog(path: string): FileActionLog {
  return new FileActionLog(path);
}
