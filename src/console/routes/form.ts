import type { Context } from 'hono';
import { ConsoleHttpError } from '../http.js';

/** A form or query, read once. */
export interface Fields {
  one(name: string): string | undefined;
  all(name: string): string[];
  /** Each value of a repeated field as given (not split at commas). */
  raw(name: string): string[];
}

function fromRecord(body: Record<string, unknown>): Fields {
  const values = (name: string): string[] => {
    const v = body[name];
    const list = Array.isArray(v) ? v : v === undefined ? [] : [v];
    return list.filter((x): x is string => typeof x === 'string');
  };
  return {
    one: (name) => {
      const v = values(name)[0]?.trim();
      return v === undefined || v === '' ? undefined : v;
    },
    all: (name) => values(name).flatMap((s) => s.split(',')).map((s) => s.trim()).filter(Boolean),
    raw: (name) => values(name),
  };
}

/** The posted form (urlencoded or multipart). */
export async function formOf(c: Context): Promise<Fields> {
  return fromRecord((await c.req.parseBody({ all: true })) as Record<string, unknown>);
}

/** The query string. */
export function queryOf(c: Context): Fields {
  return fromRecord(c.req.queries() as Record<string, unknown>);
}

/** A number field within bounds, or undefined when empty; a 400 naming the field otherwise. */
export function numberField(f: Fields, name: string, label: string, min: number, max: number): number | undefined {
  const raw = f.one(name);
  if (raw === undefined) return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max) throw new ConsoleHttpError(400, `${label}: ${JSON.stringify(raw)} is not a number from ${min} to ${max}.`);
  return n;
}
