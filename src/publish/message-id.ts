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

/** The character code of a hex digit (0 to 15), lower case. */
function hex(digit: number): number {
  return digit + (digit < 10 ? 48 : 87);
}

/** `-` */
const DASH = 45;

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then random bits, so ids sort
 * by creation time. Within one millisecond a counter in the random part keeps ids
 * from one process increasing.
 *
 * Built in one `String.fromCharCode` call, which makes a flat string of 36 characters
 * (56 bytes of heap). Joined from two-digit pieces with `+`, an id was a tree of a dozen
 * concatenated strings (about 450 bytes) until something flattened it: that is what a
 * publish waiting for a slot kept alive, and flattening it at the write cost as much as
 * building it. A Buffer view with `toString('hex')` slices cost twice as much.
 */
export function uuidv7(now: number = Date.now()): string {
  // A time that is not a whole number of milliseconds from 1970 to the year 10889 would
  // give an id that does not say when it was made, and would reset the counter that keeps
  // this process's ids increasing.
  if (!Number.isSafeInteger(now) || now < 0 || now > 0xffffffffffff) {
    throw new RangeError(`uuidv7: ${String(now)} is not a time in whole milliseconds since 1970 (0 to ${0xffffffffffff}); pass Date.now() or leave it out`);
  }
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
  const high = Math.floor(now / 0x1_0000_0000) & 0xffff;
  const low = now >>> 0;
  // Version 7 and the counter's top 4 bits; variant 10 and 6 random bits; then random bytes.
  const version = 0x70 | (seq >> 8);
  const variant = 0x80 | ((p[o + 8] as number) & 0x3f);
  const r9 = p[o + 9] as number;
  const r10 = p[o + 10] as number;
  const r11 = p[o + 11] as number;
  const r12 = p[o + 12] as number;
  const r13 = p[o + 13] as number;
  const r14 = p[o + 14] as number;
  const r15 = p[o + 15] as number;
  return String.fromCharCode(
    hex(high >>> 12), hex((high >>> 8) & 15), hex((high >>> 4) & 15), hex(high & 15),
    hex(low >>> 28), hex((low >>> 24) & 15), hex((low >>> 20) & 15), hex((low >>> 16) & 15), DASH,
    hex((low >>> 12) & 15), hex((low >>> 8) & 15), hex((low >>> 4) & 15), hex(low & 15), DASH,
    hex(version >> 4), hex(version & 15), hex((seq >> 4) & 15), hex(seq & 15), DASH,
    hex(variant >> 4), hex(variant & 15), hex(r9 >> 4), hex(r9 & 15), DASH,
    hex(r10 >> 4), hex(r10 & 15), hex(r11 >> 4), hex(r11 & 15), hex(r12 >> 4), hex(r12 & 15),
    hex(r13 >> 4), hex(r13 & 15), hex(r14 >> 4), hex(r14 & 15), hex(r15 >> 4), hex(r15 & 15),
  );
}
