/**
 * The archive's lossless encoding of AMQP field values, as JSON text. Pure.
 *
 * amqplib decodes a header table into strings, numbers, booleans, `null`, buffers
 * (byte arrays, `x`), arrays, nested tables, and typed values (`{ '!': 'timestamp',
 * value }`, `{ '!': 'decimal', value: { places, digits } }`); an application may also
 * hand it big integers. JSON keeps strings, booleans, `null` and finite numbers as they
 * are; everything else becomes an object tagged by `$`, and every table is such an
 * object too, so no value can be mistaken for a tag:
 *
 * | value | encoded |
 * |---|---|
 * | `'a'`, `true`, `null`, `42`, `1.5` | the same |
 * | `NaN`, `Infinity`, `-0` | `{ "$": "d", "v": "NaN" }` |
 * | a Buffer | `{ "$": "x", "v": "<base64>" }` |
 * | a bigint | `{ "$": "l", "v": "<decimal>" }` |
 * | an array | `{ "$": "A", "v": [ … ] }` |
 * | a table | `{ "$": "F", "v": { … } }` |
 * | `{ '!': type, value }` | `{ "$": "!", "t": type, "v": <value> }` |
 *
 * The text is pure ASCII (every other character escaped), so any database stores it as
 * it is: a NUL or a lone surrogate in a header survives. Decoding gives back what
 * amqplib gave, and republishing it writes the same field types amqplib would.
 */

/** A value of the encoding (JSON). */
export type EncodedValue = string | number | boolean | null | { readonly $: string; readonly v?: unknown; readonly t?: string };

/** Deeper than this, a value is cut (amqplib itself would recurse until the stack runs out). */
const MAX_DEPTH = 64;

function encodeValue(value: unknown, depth: number): EncodedValue | undefined {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) && !Object.is(value, -0) ? value : { $: 'd', v: Object.is(value, -0) ? '-0' : String(value) };
  if (typeof value === 'bigint') return { $: 'l', v: value.toString() };
  if (value === undefined || typeof value === 'function' || typeof value === 'symbol') return undefined;
  if (depth > MAX_DEPTH) return { $: 'cut', v: `nested deeper than ${MAX_DEPTH}` };
  if (Buffer.isBuffer(value) || value instanceof Uint8Array) return { $: 'x', v: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  if (Array.isArray(value)) return { $: 'A', v: value.map((v: unknown) => encodeValue(v, depth + 1) ?? null) };
  if (value instanceof Date) return { $: '!', t: 'timestamp', v: Math.floor(value.getTime() / 1000) };
  const obj = value as Record<string, unknown>;
  if (Object.hasOwn(obj, '!') && typeof obj['!'] === 'string') return { $: '!', t: obj['!'], v: encodeValue(obj['value'], depth + 1) ?? null };
  return { $: 'F', v: encodeTable(obj, depth + 1) };
}

function encodeTable(table: Readonly<Record<string, unknown>>, depth: number): Record<string, EncodedValue> {
  const out: Record<string, EncodedValue> = {};
  for (const key of Object.keys(table)) {
    const v = encodeValue(table[key], depth);
    if (v === undefined) continue;
    // A plain assignment keeps the object fast to build and to stringify; only `__proto__` needs defining.
    if (key === '__proto__') Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
    else out[key] = v;
  }
  return out;
}

/** JSON with every character outside printable ASCII escaped. */
const NOT_ASCII = /[^\x20-\x7e]/;
const NOT_ASCII_ALL = /[^\x20-\x7e]/g;

function asciiJson(value: unknown): string {
  const json = JSON.stringify(value);
  // Most headers are ASCII already: one scan, no copy.
  return NOT_ASCII.test(json) ? json.replace(NOT_ASCII_ALL, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`) : json;
}

/** Encodes a field table (headers, or the properties without them) as ASCII JSON text. */
export function encodeFields(table: Readonly<Record<string, unknown>> | undefined | null): string {
  return asciiJson(encodeTable(table ?? {}, 0));
}

function decodeValue(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(decodeValue); // not written by encodeFields; read leniently
  const tagged = value as { $?: unknown; v?: unknown; t?: unknown };
  switch (tagged.$) {
    case 'd':
      return tagged.v === '-0' ? -0 : Number(tagged.v);
    case 'l':
      return typeof tagged.v === 'string' && /^-?\d+$/.test(tagged.v) ? BigInt(tagged.v) : null;
    case 'x':
      return Buffer.from(typeof tagged.v === 'string' ? tagged.v : '', 'base64');
    case 'A':
      return Array.isArray(tagged.v) ? tagged.v.map(decodeValue) : [];
    case 'F':
      return decodeTable(tagged.v);
    case '!':
      return { '!': tagged.t, value: decodeValue(tagged.v) };
    case 'cut':
      return `(${String(tagged.v)})`;
    default:
      return decodeTable(value);
  }
}

function decodeTable(value: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (typeof value !== 'object' || value === null) return out;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    // A plain assignment keeps the table fast to read; only `__proto__` needs defining.
    if (k === '__proto__') Object.defineProperty(out, k, { value: decodeValue(v), enumerable: true, writable: true, configurable: true });
    else out[k] = decodeValue(v);
  }
  return out;
}

/** Decodes what {@link encodeFields} wrote; text that is not JSON gives an empty table. */
export function decodeFields(text: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return {};
  }
  return decodeTable(parsed);
}
