import { describe, expect, it } from 'vitest';
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
