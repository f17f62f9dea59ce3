/**
 * Who may use the console, and as what. The console asks `authorize(request)` for every
 * request; these helpers build that function for a bearer token, basic auth against a
 * file of scrypt-hashed passwords, or a header set by a trusted proxy.
 */
import { createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { InvalidOptionError } from '../errors.js';

/** `viewer` reads every page; `operator` also replays, purges, pauses and releases. */
export type ConsoleRole = 'viewer' | 'operator';

/** Who is asking, as `authorize` tells. */
export interface ConsoleUser {
  /** A name for the action record, e.g. `alice`. */
  readonly user: string;
  readonly role: ConsoleRole;
}

/** Decides who a request comes from; `null` refuses it (401). */
export type Authorize = (request: Request) => ConsoleUser | null | Promise<ConsoleUser | null>;

export function isRole(value: unknown): value is ConsoleRole {
  return value === 'viewer' || value === 'operator';
}

function scrypt(password: string, salt: Buffer, keylen: number, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => scryptCb(password, salt, keylen, options, (error, key) => (error ? reject(error) : resolve(key))));
}

const SCRYPT = { N: 16384, r: 8, p: 1 } as const;

/**
 * Hashes a password for a users file: `scrypt$N$r$p$salt$hash` (salt and hash in base64).
 *
 * @example
 * const line = `alice:operator:${await hashPassword('correct horse')}`;
 */
export async function hashPassword(password: string): Promise<string> {
  if (password.length === 0) throw new InvalidOptionError('password', 'is empty');
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, 32, { ...SCRYPT, maxmem: 64 * 1024 * 1024 });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

/** True when `password` matches a hash made by {@link hashPassword}. */
export async function verifyPassword(password: string, hash: string): Promise<boolean> {
  const parts = hash.split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [N, r, p] = parts.slice(1, 4).map(Number) as [number, number, number];
  if (![N, r, p].every((n) => Number.isSafeInteger(n) && n > 0) || N > 1 << 20) return false;
  const salt = Buffer.from(parts[4] as string, 'base64');
  const expected = Buffer.from(parts[5] as string, 'base64');
  if (expected.length < 16) return false;
  const key = await scrypt(password, salt, expected.length, { N, r, p, maxmem: 256 * N * r + 64 * 1024 * 1024 });
  return timingSafeEqual(key, expected);
}

/** One line of a users file. */
export interface UserEntry {
  readonly user: string;
  readonly role: ConsoleRole;
  readonly hash: string;
}

/**
 * Reads a users file: one `name:role:hash` per line (role `viewer` or `operator`, hash
 * from `warren console hash-password`); blank lines and lines starting with `#` are
 * skipped. Throws naming the line that is wrong.
 */
export function parseUsers(text: string, source = 'users file'): Map<string, UserEntry> {
  const users = new Map<string, UserEntry>();
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const m = /^([^:\s]+):([^:\s]+):(scrypt\$\S+)$/.exec(line);
    if (!m) throw new InvalidOptionError('users', `${source} line ${i + 1} is not name:role:hash`, 'Make each line name:viewer|operator:HASH, with HASH from `warren console hash-password`.');
    const role = m[2];
    if (!isRole(role)) throw new InvalidOptionError('users', `${source} line ${i + 1}: role ${JSON.stringify(role)} is neither viewer nor operator`);
    users.set(m[1] as string, { user: m[1] as string, role, hash: m[3] as string });
  });
  if (users.size === 0) throw new InvalidOptionError('users', `${source} names no user`, 'Add a line name:operator:HASH (HASH from `warren console hash-password`).');
  return users;
}

/** Reads and parses a users file. */
export async function readUsersFile(path: string): Promise<Map<string, UserEntry>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new InvalidOptionError('users', `cannot read ${path}: ${error instanceof Error ? error.message : String(error)}`);
  }
  return parseUsers(text, path);
}

function basicCredentials(request: Request): { user: string; password: string } | undefined {
  const header = request.headers.get('authorization');
  const m = header ? /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header) : null;
  if (!m) return undefined;
  const decoded = Buffer.from(m[1] as string, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return undefined;
  return { user: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
}

function sameSecret(a: string, b: string): boolean {
  // Compare digests so the comparison takes the same time whatever the lengths.
  const da = createHmac('sha256', 'warren-console').update(a).digest();
  const db = createHmac('sha256', 'warren-console').update(b).digest();
  return timingSafeEqual(da, db);
}

/** Options of {@link basicAuth}: how repeated failed sign-ins are slowed. */
export interface BasicAuthOptions {
  /** Failed sign-ins a name may have (within 15 minutes) before it is slowed. @default 5 */
  readonly freeFailures?: number;
  /** After one more failure, the name's sign-ins are refused unchecked this long; doubled at each further failure. @default 1000 */
  readonly penaltyMs?: number;
  /** The longest penalty. @default 60000 */
  readonly maxPenaltyMs?: number;
  /** How many names' failures are remembered; the oldest is forgotten first. @default 10000 */
  readonly maxTracked?: number;
}

const FAILURE_WINDOW_MS = 15 * 60_000;

/**
 * Basic auth against users with scrypt-hashed passwords. Verified passwords are cached
 * (by a keyed digest, never in clear) so each request does not pay scrypt's cost.
 * A name nobody has is checked against a hash all the same, so a wrong password takes
 * as long whether the user exists or not. Past `freeFailures` failures, a name (known or
 * not) is refused unchecked for a penalty that doubles with each further failure, so
 * guessing is slowed however many requests are sent at once; a browser already signed in
 * with the right password (the cache) is not.
 */
export function basicAuth(users: ReadonlyMap<string, UserEntry>, options: BasicAuthOptions = {}): Authorize {
  const free = options.freeFailures ?? 5;
  const penaltyMs = options.penaltyMs ?? 1000;
  const maxPenaltyMs = options.maxPenaltyMs ?? 60_000;
  const maxTracked = options.maxTracked ?? 10_000;
  for (const [name, v, min] of [['freeFailures', free, 0], ['penaltyMs', penaltyMs, 0], ['maxPenaltyMs', maxPenaltyMs, 0], ['maxTracked', maxTracked, 1]] as const) {
    if (!Number.isSafeInteger(v) || v < min) throw new InvalidOptionError(name, `${v} is not a whole number of at least ${min}`);
  }
  const verified = new Map<string, string>();
  const failures = new Map<string, { count: number; last: number; until: number }>();
  const key = randomBytes(32);
  // Made once, on the first unknown name: what such a name's password is checked against.
  let dummy: Promise<string> | undefined;
  const failed = (name: string): null => {
    const now = Date.now();
    const before = failures.get(name);
    const count = before !== undefined && now - before.last < FAILURE_WINDOW_MS ? before.count + 1 : 1;
    const until = count > free ? now + Math.min(maxPenaltyMs, penaltyMs * 2 ** Math.min(30, count - free - 1)) : 0;
    // Delete, then set: the map's order is then the order of last failure, oldest first.
    failures.delete(name);
    failures.set(name, { count, last: now, until });
    for (const oldest of failures.keys()) {
      if (failures.size <= maxTracked) break;
      failures.delete(oldest);
    }
    return null;
  };
  return async (request) => {
    const c = basicCredentials(request);
    if (!c) return null;
    const name = c.user.slice(0, 200);
    const entry = users.get(c.user);
    const digest = createHmac('sha256', key).update(`${c.user}\0${c.password}`).digest('base64');
    if (entry && verified.get(c.user) === digest) return { user: entry.user, role: entry.role };
    if ((failures.get(name)?.until ?? 0) > Date.now()) return null;
    dummy ??= hashPassword(randomBytes(18).toString('base64'));
    const ok = await verifyPassword(c.password, entry?.hash ?? (await dummy));
    if (!entry || !ok) return failed(name);
    failures.delete(name);
    verified.set(c.user, digest);
    return { user: entry.user, role: entry.role };
  };
}

/** Options of {@link tokenAuth}. */
export interface TokenAuthOptions {
  /**
   * Names a token holder may not sign in under (basic auth with the token as password):
   * the names of a users file used beside the tokens, so that no one holding a token can
   * pass for one of its users. @default none
   */
  readonly reservedNames?: Iterable<string>;
}

/**
 * A shared secret: `Authorization: Bearer TOKEN`, or basic auth with the token as the
 * password (so a browser's login prompt works). Whoever holds a token is recorded as
 * `token:operator` or `token:viewer`, never as the name typed beside it: a token says
 * which role, not which person. A name in `reservedNames` typed beside a token is refused.
 */
export function tokenAuth(tokens: { operator?: string | undefined; viewer?: string | undefined }, options: TokenAuthOptions = {}): Authorize {
  for (const [role, token] of Object.entries(tokens)) {
    if (token !== undefined && token.length < 16) throw new InvalidOptionError(`${role} token`, 'is shorter than 16 characters', 'Use a long random token, e.g. `openssl rand -hex 24`.');
  }
  const reserved = new Set(options.reservedNames ?? []);
  return (request) => {
    const header = request.headers.get('authorization') ?? '';
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
    const basic = basicCredentials(request);
    const given = bearer ?? basic?.password;
    if (given === undefined) return null;
    const role: ConsoleRole | undefined =
      tokens.operator !== undefined && sameSecret(given, tokens.operator) ? 'operator' : tokens.viewer !== undefined && sameSecret(given, tokens.viewer) ? 'viewer' : undefined;
    if (role === undefined) return null;
    if (bearer === undefined && basic !== undefined && reserved.has(basic.user)) return null;
    return { user: `token:${role}`, role };
  };
}

/** Options of {@link trustedHeaderAuth}. */
export interface TrustedHeaderOptions {
  /** The header the proxy sets to the signed-in user's name, e.g. `x-forwarded-user`. */
  userHeader: string;
  /** A header the proxy sets to `viewer` or `operator`. @default none: everyone gets `defaultRole` */
  roleHeader?: string;
  /** @default 'viewer' */
  defaultRole?: ConsoleRole;
}

/**
 * Trusts a header set by an authenticating proxy (oauth2-proxy, an ingress with SSO).
 * Only safe when nothing but the proxy can reach the console.
 */
export function trustedHeaderAuth(options: TrustedHeaderOptions): Authorize {
  const fallback = options.defaultRole ?? 'viewer';
  return (request) => {
    const user = request.headers.get(options.userHeader)?.trim();
    if (!user) return null;
    const role = options.roleHeader === undefined ? fallback : request.headers.get(options.roleHeader)?.trim().toLowerCase();
    return { user, role: isRole(role) ? role : fallback };
  };
}

/** The first method that recognizes the request decides. */
export function anyOf(...methods: readonly Authorize[]): Authorize {
  return async (request) => {
    for (const m of methods) {
      const who = await m(request);
      if (who) return who;
    }
    return null;
  };
}

/**
 * The CSRF token of a session: a keyed digest of its role and name (under the server's
 * secret), so it needs no server state and no cookie, and a viewer signed in under an
 * operator's name does not get that operator's token.
 */
export function csrfToken(secret: Buffer, user: ConsoleUser): string {
  // JSON keeps the two apart: no name can be made to read as another role and name.
  return createHmac('sha256', secret).update(`csrf\0${JSON.stringify([user.role, user.user])}`).digest('base64url');
}

/** True when `given` is the session's CSRF token. */
export function checkCsrf(secret: Buffer, user: ConsoleUser, given: string | undefined): boolean {
  if (given === undefined || given === '') return false;
  return sameSecret(given, csrfToken(secret, user));
}
