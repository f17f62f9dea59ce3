import { describe, expect, it } from 'vitest';
import { duration, parseStrict, positionalsOf, positiveNumber, wholeNumber, FILTER_FLAGS, GLOBAL_FLAGS } from './args.js';
import { describeConnectError, scrub, secretsOf } from './context.js';
import { UsageError } from './errors.js';
import { addressesOf, nodeName } from './commands/console.js';
import { coverage, purgeReport } from './commands/parked.js';
import type { ParkedOperationResult, PurgeResult } from '../park/operations.js';
import { clip, progressBar, progressLine, Progress, span, table, when } from './format.js';

describe('table', () => {
  it('aligns columns, right-aligning where asked', () => {
    expect(table(['#', 'name'], [['1', 'billing'], ['10', 'email']], ['right'])).toEqual([' #  name', ' 1  billing', '10  email']);
  });
});

describe('formatting', () => {
  it('clips, spans and times', () => {
    expect(clip('a\n  b c', 10)).toBe('a b c');
    expect(clip('abcdefghij', 5)).toBe('abcd…');
    expect(span(850)).toBe('850ms');
    expect(span(12_400)).toBe('12s');
    expect(span(185_000)).toBe('3m 05s');
    expect(span(3_720_000)).toBe('1h 02m');
    expect(when('2026-03-01T10:11:00.123Z')).toBe('2026-03-01T10:11:00Z');
    expect(when(undefined)).toBe('-');
  });
  it('draws a progress bar with rate and time left', () => {
    expect(progressBar({ done: 250, target: 1000, rate: 125 }, 8)).toBe('[██░░░░░░] 250/1,000 25% · 125/s · 6s left');
    expect(progressBar({ done: 0, target: 10, rate: 0 }, 4)).toBe('[░░░░] 0/10 0% · 0/s · time left unknown');
    expect(progressLine({ done: 5000, target: 10_000, rate: 2000, note: '12 replayed' }, 'replaying')).toBe('replaying 5,000/10,000 (50%), 2,000/s, about 3s left, 12 replayed');
  });
  it('redraws one line on a terminal and prints plain lines elsewhere', () => {
    const writes: string[] = [];
    const tty = { isTTY: true, columns: 80, write: (s: string) => writes.push(s) } as unknown as NodeJS.WriteStream;
    const p = new Progress(tty, 'replaying');
    p.update({ done: 1, target: 4, rate: 10 }, true);
    p.update({ done: 2, target: 4, rate: 10 }, true);
    p.done();
    expect(writes[0]?.startsWith('\r\u001b[K')).toBe(true);
    expect(writes[0]?.slice(4)).toMatch(/^replaying \[█+░+\] 1\/4 25%/);
    expect(writes.at(-1)).toBe('\r\x1b[K');
    const lines: string[] = [];
    const pipe = { isTTY: false, write: (s: string) => lines.push(s) } as unknown as NodeJS.WriteStream;
    const q = new Progress(pipe, 'replaying', 0);
    q.update({ done: 1, target: 4, rate: 10 }, true);
    expect(lines).toEqual(['replaying 1/4 (25%), 10/s, about 300ms left\n']);
  });
});

describe('args', () => {
  const specs = { ...GLOBAL_FLAGS, ...FILTER_FLAGS, limit: { type: 'string', label: '--limit N', help: '' } } as const;
  it('finds positionals around flags with values', () => {
    expect(positionalsOf(['--url', 'amqp://x', 'parked', '--error', 'boom', 'list', 'billing'], specs)).toEqual(['parked', 'list', 'billing']);
  });
  it('names the flag in every error', () => {
    expect(() => parseStrict(['--nope'], specs, 'parked list')).toThrow(/Unknown flag --nope for `warren parked list`/);
    expect(() => parseStrict(['--limit'], specs, 'parked list')).toThrow(/--limit needs a value/);
    const { values } = parseStrict(['--limit', '12', '--rate', '2.5', '--connect-timeout', '2s'], { ...specs, rate: { type: 'string', label: '', help: '' }, 'connect-timeout': GLOBAL_FLAGS['connect-timeout'] }, 'x');
    expect(wholeNumber(values, 'limit')).toBe(12);
    expect(positiveNumber(values, 'rate', 100)).toBe(2.5);
    expect(duration(values, 'connect-timeout')).toBe(2000);
    expect(() => wholeNumber({ limit: '1.5' }, 'limit')).toThrow(UsageError);
    expect(() => positiveNumber({ rate: '-1' }, 'rate', 100)).toThrow(/--rate: "-1"/);
    expect(() => duration({ t: '5 minutes' }, 't')).toThrow(/--t: "5 minutes" is not a duration/);
  });
});

describe('secrets', () => {
  it('masks passwords, but not a guest:guest default that equals the user name', () => {
    const secrets = secretsOf('amqp://app:s3cr%40t@rabbit:5672/shop', 'http://guest:guest@127.0.0.1:15672');
    expect(secrets).toEqual(['s3cr%40t', 's3cr@t']);
    expect(scrub('login app:s3cr@t failed for s3cr%40t', secrets)).toBe('login app:*** failed for ***');
    expect(scrub('see http://admin:hunter2@host/x', [])).toBe('see http://admin:***@host/x');
  });
  it('explains connection failures in one line without the password', () => {
    const url = 'amqp://app:s3cret@rabbit:5672';
    const lines = [
      describeConnectError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), url, 5000),
      describeConnectError(Object.assign(new Error('getaddrinfo ENOTFOUND rabbit'), { code: 'ENOTFOUND' }), url, 5000),
      describeConnectError(new Error('Handshake terminated by server: 403 (ACCESS-REFUSED) with message "ACCESS_REFUSED - Login was refused"'), url, 5000),
      describeConnectError(new Error('connect ETIMEDOUT'), url, 5000),
      describeConnectError(new Error('connect ETIMEDOUT'), 'amqp://app:s3cret@rabbit:15672', 5000),
    ];
    expect(lines[0]).toMatch(/^Cannot reach RabbitMQ at amqp:\/\/app:\*\*\*@rabbit:5672: connection refused/);
    expect(lines[1]).toMatch(/host not found/);
    expect(lines[2]).toMatch(/refused the credentials of user 'app' \(ACCESS_REFUSED\)/);
    expect(lines[3]).toMatch(/no answer within 5000 ms/);
    // The management port accepts the connection and never answers the AMQP handshake.
    expect(lines[4]).toMatch(/port 15672 is an HTTP port of RabbitMQ .*not AMQP.*Use the AMQP port in --url/);
    for (const l of lines) {
      expect(l).not.toContain('s3cret');
      expect(l).not.toContain('\n');
    }
  });
});

describe('the console names its broker', () => {
  it('by the host and port of the node connected, with its server and place in --url, never a password', () => {
    expect(nodeName({ url: 'amqp://ops:***@rabbit-2:5672/shop', address: 'rabbit-2:5672', server: 'RabbitMQ 3.10.8', tls: false, position: 2, of: 3 })).toBe('rabbit-2:5672 (RabbitMQ 3.10.8, node 2 of 3 in --url)');
    expect(nodeName({ url: 'amqps://ops@rabbit-1:5671/', address: 'rabbit-1:5671', server: undefined, tls: true, position: 1, of: 1 })).toBe('rabbit-1:5671 (TLS)');
  });

  it('before it connects, by the host and port of each node in --url, without credentials', () => {
    expect(addressesOf('amqp://ops:s3cret@rabbit-1:5673/shop, rabbit-2:5674,amqps://ops@rabbit-3, ops:s3cret@rabbit-4, amqp://ops:s3cret@[bad/x')).toEqual([
      'rabbit-1:5673',
      'rabbit-2:5674',
      'rabbit-3:5671',
      'rabbit-4',
      '[bad',
    ]);
  });
});

describe('what a parked-queue command could not see', () => {
  const walk = (over: Partial<ParkedOperationResult> = {}): ParkedOperationResult => ({
    consumer: 'billing', queue: 'billing.parked', total: 10, scanned: 10, kept: 10, removed: 0, moved: 0, failed: [], notExamined: 0, missed: 0, stopReason: 'end', rewritten: 0, readers: 0, matched: 5, limitReached: false, ...over,
  });
  const deleted = (over: Partial<PurgeResult> = {}): PurgeResult => ({ ...walk({ removed: 5, kept: 0, scanned: 9, notExamined: 1, stopReason: 'stopped' }), notFound: 0, ...over });

  it('names other consumers, one or several, and messages taken while it ran', () => {
    expect(coverage(walk())).toEqual([]);
    expect(coverage(walk({ readers: 1 }))).toEqual([expect.stringMatching(/^Not everything was seen: another consumer was reading billing\.parked when this began, and the messages it held were not examined\. Run again once it is gone/)]);
    expect(coverage(walk({ readers: 3 }))[0]).toMatch(/3 other consumers were reading billing\.parked .* the messages they held .* once they are gone/);
    expect(coverage(walk({ missed: 50 }))).toEqual([expect.stringMatching(/^Not everything was seen: 50 messages parked when this began were gone before it reached them: another consumer of billing\.parked took them/)]);
  });

  it('a purge is complete when its count saw everything and its delete found all it counted; each warning once', () => {
    expect(purgeReport(walk(), deleted())).toEqual({ lines: [], complete: true, readers: 0, missed: 0 });
    // The delete met a reader but found everything counted: nothing to say.
    expect(purgeReport(walk(), deleted({ readers: 1 }))).toMatchObject({ lines: [], complete: true });
    // It did not find some: what kept them from it is said.
    const short = purgeReport(walk(), deleted({ notFound: 2, missed: 2 }));
    expect(short).toMatchObject({ complete: false, missed: 2 });
    expect(short.lines).toEqual([expect.stringMatching(/2 messages parked when this began were gone/)]);
    // The same reader seen by both walks is named once.
    const both = purgeReport(walk({ readers: 1 }), deleted({ notFound: 1, readers: 1 }));
    expect(both.lines.filter((l) => l.includes('another consumer was reading'))).toHaveLength(1);
    expect(purgeReport(walk({ readers: 1 }), deleted())).toMatchObject({ complete: false, readers: 1 });
  });
});
