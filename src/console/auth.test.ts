import { describe, expect, it } from 'vitest';
import { waitFor } from '../../test/helpers.js';
import { anyOf, basicAuth, checkCsrf, csrfToken, hashPassword, parseUsers, tokenAuth, trustedHeaderAuth } from './auth.js';

const req = (headers: Record<string, string>) => new Request('http://x/', { headers });
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('console auth methods', () => {
  it('a token as bearer or as the basic password; the operator and viewer tokens give their roles', async () => {
    const auth = tokenAuth({ operator: 'op-token-0123456789', viewer: 'view-token-0123456789' });
    expect(await auth(req({ authorization: 'Bearer op-token-0123456789' }))).toEqual({ user: 'token:operator', role: 'operator' });
    // The name typed beside a token is not who signed in: the token's role is.
    expect(await auth(req({ authorization: basic('alice', 'op-token-0123456789') }))).toEqual({ user: 'token:operator', role: 'operator' });
    expect(await auth(req({ authorization: basic('bob', 'view-token-0123456789') }))).toEqual({ user: 'token:viewer', role: 'viewer' });
    expect(await auth(req({ authorization: 'Bearer op-token-012345678' }))).toBeNull();
    expect(await auth(req({}))).toBeNull();
    expect(() => tokenAuth({ operator: 'short' })).toThrow(/shorter than 16 characters/);
  });

  it('beside a users file, a token holder is token:<role>, and a name of the file is refused with a token', async () => {
    const users = parseUsers(`alice:operator:${await hashPassword('alice-password')}\nvictor:viewer:${await hashPassword('victor-password')}\n`);
    const auth = anyOf(tokenAuth({ operator: 'op-token-0123456789', viewer: 'view-token-0123456789' }, { reservedNames: users.keys() }), basicAuth(users));
    expect(await auth(req({ authorization: basic('alice', 'alice-password') }))).toEqual({ user: 'alice', role: 'operator' });
    expect(await auth(req({ authorization: basic('alice', 'op-token-0123456789') }))).toBeNull();
    expect(await auth(req({ authorization: basic('victor', 'view-token-0123456789') }))).toBeNull();
    expect(await auth(req({ authorization: basic('mallory', 'op-token-0123456789') }))).toEqual({ user: 'token:operator', role: 'operator' });
    // A users file cannot name anyone token:operator (a name has no colon), so the two never meet.
    expect([...parseUsers('token:operator:scrypt$1$1$1$a$b\n').keys()]).toEqual(['token']);
  });

  it('a trusted header names the user; the role header, when named, says the role; anything else is the default', async () => {
    const auth = trustedHeaderAuth({ userHeader: 'x-forwarded-user', roleHeader: 'x-forwarded-role' });
    expect(await auth(req({ 'x-forwarded-user': 'carol', 'x-forwarded-role': 'operator' }))).toEqual({ user: 'carol', role: 'operator' });
    expect(await auth(req({ 'x-forwarded-user': 'dave', 'x-forwarded-role': 'admin' }))).toEqual({ user: 'dave', role: 'viewer' });
    expect(await auth(req({}))).toBeNull();
    const both = anyOf(tokenAuth({ operator: 'op-token-0123456789' }), auth);
    expect(await both(req({ 'x-forwarded-user': 'erin' }))).toEqual({ user: 'erin', role: 'viewer' });
  });

  it('a wrong password takes as long for a name nobody has as for a user (the hash runs for both)', async () => {
    const users = parseUsers(`alice:operator:${await hashPassword('alice-password')}\n`);
    const auth = basicAuth(users);
    const timed = async (user: string): Promise<number> => {
      const t0 = performance.now();
      expect(await auth(req({ authorization: basic(user, 'wrong') }))).toBeNull();
      return performance.now() - t0;
    };
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    const known: number[] = [];
    const unknown: number[] = [];
    // Fewer failures than slow a name down; each unknown name fails once.
    for (let i = 0; i < 3; i++) {
      known.push(await timed('alice'));
      unknown.push(await timed(`nobody-${i}`));
    }
    // scrypt takes tens of milliseconds and a map lookup microseconds: a quarter is a wide margin for a busy machine.
    expect(median(unknown)).toBeGreaterThan(median(known) / 4);
  });

  it('repeated failures for a name are slowed: past the free ones, sign-in waits out a doubling penalty; memory is bounded', async () => {
    const users = parseUsers(`alice:operator:${await hashPassword('alice-password')}\n`);
    const auth = basicAuth(users, { freeFailures: 2, penaltyMs: 300, maxTracked: 3 });
    const as = (user: string, password: string) => auth(req({ authorization: basic(user, password) }));
    for (let i = 0; i < 3; i++) expect(await as('alice', 'guess')).toBeNull();
    // In the penalty, the right password is refused too (no guess is checked meanwhile)…
    expect(await as('alice', 'alice-password')).toBeNull();
    // …and once it has passed, it signs in.
    await waitFor(async () => (await as('alice', 'alice-password')) !== null, 'the penalty passes');
    // Bounded: with room for three names, the oldest is forgotten when more fail.
    for (let i = 0; i < 3; i++) expect(await as('bob', 'guess')).toBeNull();
    for (const name of ['c1', 'c2', 'c3']) expect(await as(name, 'guess')).toBeNull();
    expect(await as('alice', 'alice-password')).toEqual({ user: 'alice', role: 'operator' });
  });

  it('a users file line that is wrong is named', () => {
    expect(() => parseUsers('alice:admin:scrypt$1$1$1$a$b\n', 'users.txt')).toThrow(/users\.txt line 1: role "admin"/);
    expect(() => parseUsers('# nobody\n', 'users.txt')).toThrow(/names no user/);
    expect(() => parseUsers('alice:operator\n', 'users.txt')).toThrow(/line 1 is not name:role:hash/);
  });

  it('a CSRF token belongs to one session, name and role, under one key', () => {
    const key = Buffer.from('k1');
    const alice = { user: 'alice', role: 'operator' } as const;
    const t = csrfToken(key, alice);
    expect(checkCsrf(key, alice, t)).toBe(true);
    expect(checkCsrf(key, { user: 'bob', role: 'operator' }, t)).toBe(false);
    // A viewer signed in under the operator's name does not get the operator's token.
    expect(csrfToken(key, { user: 'alice', role: 'viewer' })).not.toBe(t);
    expect(checkCsrf(key, alice, csrfToken(key, { user: 'alice', role: 'viewer' }))).toBe(false);
    // Nor can a name with a separator in it make another session's input.
    expect(csrfToken(key, { user: 'alice\0operator', role: 'viewer' })).not.toBe(csrfToken(key, { user: 'alice', role: 'operator' }));
    expect(checkCsrf(Buffer.from('k2'), alice, t)).toBe(false);
    expect(checkCsrf(key, alice, undefined)).toBe(false);
  });
});
