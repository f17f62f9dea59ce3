import { randomBytes } from 'node:crypto';

let lastMs = 0;
let seq = 0;

/**
 * Random bytes drawn 4 KiB at a time: a `randomBytes(16)` call per id cost about 3 us,
 * more than the rest of a publish's own work (crypto.randomUUID pools the same way).
 */
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let poolOffset = 0;

/** Two hex digits for each byte value. */
const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits, so ids sort
 * by creation time. Within one millisecond a counter in the random part keeps ids
 * from one process increasing. Built straight from the pool's bytes into the string:
 * a Buffer view, writes into it and `toString('hex')` with slices cost twice as much.
 */
export function uuidv7(now: number = Date.now()): string {
  if (poolOffset + 16 > pool.length) {
    pool = randomBytes(POOL_BYTES);
    poolOffset = 0;
  }
  const p = pool;
  const o = poolOffset;
  poolOffset += 16;
  if (now <= lastMs) {
    now = lastMs;
    seq = (seq + 1) & 0xfff;
    if (seq === 0) now = ++lastMs;
  } else {
    lastMs = now;
    seq = (((p[o + 6] as number) << 8) | (p[o + 7] as number)) & 0x7ff;
  }
  // The 48-bit millisecond count, high 16 bits and low 32 bits.
  const high = Math.floor(now / 0x1_0000_0000);
  const low = now >>> 0;
  const h = HEX as readonly string[];
  return (
    (h[(high >>> 8) & 0xff] as string) + (h[high & 0xff] as string) + (h[low >>> 24] as string) + (h[(low >>> 16) & 0xff] as string) + '-' +
    (h[(low >>> 8) & 0xff] as string) + (h[low & 0xff] as string) + '-' +
    (h[0x70 | (seq >> 8)] as string) + (h[seq & 0xff] as string) + '-' +
    (h[0x80 | ((p[o + 8] as number) & 0x3f)] as string) + (h[p[o + 9] as number] as string) + '-' +
    (h[p[o + 10] as number] as string) + (h[p[o + 11] as number] as string) + (h[p[o + 12] as number] as string) +
    (h[p[o + 13] as number] as string) + (h[p[o + 14] as number] as string) + (h[p[o + 15] as number] as string)
  );
}
