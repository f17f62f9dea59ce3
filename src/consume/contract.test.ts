/**
 * The consumer contract, checked two ways: the README's failure table row by row (each
 * claim the table makes is read from its text and held against `decide`, so the two
 * cannot drift), and the ladder at every attempt.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { HandlerTimeoutError, InvalidPayloadError, PermanentError } from '../errors.js';
import { HEADER } from '../headers.js';
import { WaitForConditionError, type RetryTablePolicy } from '../retry-table/wait.js';
import type { RetryTable } from '../retry-table/index.js';
import { defineTopology, type QueueType } from '../topology/declaration.js';
import { decide, type Decision, type DecisionInput } from './contract.js';

const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

/** The rows of the README's "What happens on each kind of failure" table: [what happened, where it goes]. */
function failureTable(): Array<[string, string]> {
  const section = README.split('## What happens on each kind of failure')[1]?.split('\n## ')[0] ?? '';
  const rows: Array<[string, string]> = [];
  for (const line of section.split('\n')) {
    const m = /^\| (.+?) \| (.+) \|$/.exec(line.trim());
    if (!m || /^[-|\s]+$/.test(m[1] as string) || m[1] === 'what happened') continue;
    rows.push([m[1] as string, m[2] as string]);
  }
  return rows;
}

function consumer(queueType: QueueType = 'classic') {
  // The defaults the README quotes: maxAttempts 6, tiers 5s/1m/10m, crashLimit 5.
  return defineTopology({ consumers: { billing: { bindings: ['order.*'], queueType } } }).consumer('billing');
}

const table = { insert: async () => ({ id: '1', paused: false }) } as unknown as RetryTable;
class CarrierDown extends Error {}
const policy: RetryTablePolicy = { table, rules: [{ when: CarrierDown, dependency: 'carrier' }] };

function run(partial: Partial<DecisionInput> & Pick<DecisionInput, 'happened'>): Decision {
  return decide({ attempts: 0, headers: {}, consumer: consumer(), now: new Date(0), ...partial });
}

/** A claim of the README, found in a row's second column, and the decisions that keep it. */
interface Claim {
  /** Text the README must say; its groups are handed to `check`. */
  readonly says: RegExp;
  readonly check: (groups: string[]) => void;
}

const cap = consumer().maxAttempts;
const tiers = consumer().delaysMs.length;

/** Each README row (by its first column) with the claims its second column makes. */
const rows: Array<{ happened: RegExp; claims: Claim[] }> = [
  {
    happened: /^handler resolved$/,
    claims: [{ says: /^acked$/, check: () => expect(run({ happened: { kind: 'resolved' } })).toMatchObject({ kind: 'ack', duplicate: false }) }],
  },
  {
    happened: /^handler threw `PermanentError` \(or your `classify` says permanent\)$/,
    claims: [{
      says: /^parked, (first) attempt$/,
      check: () => {
        for (const attempts of [0, 2]) {
          expect(run({ attempts, happened: { kind: 'threw', error: new PermanentError('no such customer') } })).toMatchObject({ kind: 'park', reason: 'permanent-error', attempts: attempts + 1 });
          expect(run({ attempts, happened: { kind: 'threw', error: new TypeError('x') }, classify: () => 'permanent' })).toMatchObject({ kind: 'park', reason: 'permanent-error', attempts: attempts + 1 });
        }
        // A permanent error parks even where a retry-table rule would take it.
        expect(run({ happened: { kind: 'threw', error: new CarrierDown() }, retryTable: policy, classify: () => 'permanent' })).toMatchObject({ kind: 'park', reason: 'permanent-error', attempts: 1 });
      },
    }],
  },
  {
    happened: /^body is not UTF-8 JSON \(or the `decoder` cannot read it\), or the payload fails `schema`$/,
    claims: [{
      says: /^parked, first attempt, handler not run \(`invalid-json`; `invalid-payload` naming the decoder or the schema\)$/,
      check: () => {
        for (const reason of ['invalid-json', 'invalid-payload'] as const) {
          expect(run({ happened: { kind: 'invalid', reason, error: new InvalidPayloadError('bad') } })).toMatchObject({ kind: 'park', reason, attempts: 1 });
        }
      },
    }],
  },
  {
    happened: /^no message id \(and none where `messageIdFrom` looks\) while an idempotency guard is set$/,
    claims: [{
      says: /^parked \(`([a-z-]+)`, saying where it looked\)/,
      check: ([reason]) => expect(run({ happened: { kind: 'invalid', reason: 'missing-message-id', error: new InvalidPayloadError('no id') } })).toMatchObject({ kind: 'park', reason, attempts: 1 }),
    }],
  },
  {
    happened: /^handler threw anything else, attempts left$/,
    claims: [{
      says: /^retry queue of this attempt's tier, then back to this consumer only$/,
      check: () => {
        const c = consumer();
        for (let attempts = 0; attempts < cap - 1; attempts++) {
          const tier = Math.min(attempts, tiers - 1);
          expect(run({ attempts, happened: { kind: 'threw', error: new Error('flaky') } })).toMatchObject({ kind: 'retry', tier, queue: c.retryQueues[tier], delayMs: c.delaysMs[tier], attempts: attempts + 1, counted: true });
        }
      },
    }],
  },
  {
    happened: /^handler threw, `maxAttempts` runs reached$/,
    claims: [{
      says: /^parked \(`([a-z-]+)`\)$/,
      check: ([reason]) => {
        expect(run({ attempts: cap - 1, happened: { kind: 'threw', error: new Error('flaky') } })).toMatchObject({ kind: 'park', reason, attempts: cap });
        expect(run({ attempts: 1_000_000, happened: { kind: 'threw', error: new Error('flaky') } })).toMatchObject({ kind: 'park', reason });
      },
    }],
  },
  {
    happened: /^handler ran past `timeoutMs` \(default 60 s\)$/,
    claims: [{
      says: /counted as a transient failure/,
      check: () => {
        const error = new HandlerTimeoutError('billing', 60_000);
        expect(run({ happened: { kind: 'timed-out', error } })).toMatchObject({ kind: 'retry', tier: 0, attempts: 1, counted: true, error });
        expect(run({ attempts: cap - 1, happened: { kind: 'timed-out', error } })).toMatchObject({ kind: 'park', reason: 'max-attempts' });
      },
    }],
  },
  {
    happened: /^the database is down, or a copy of the message still runs \(idempotency guard\)$/,
    claims: [{
      says: /after `storeOutageHoldMs` it waits in the (first) tier without counting an attempt$/,
      check: () => {
        for (const attempts of [0, 3]) {
          expect(run({ attempts, happened: { kind: 'store-unavailable', error: new Error('down') } })).toMatchObject({ kind: 'retry', tier: 0, attempts, counted: false });
          expect(run({ attempts, happened: { kind: 'not-stored', outage: true, error: new Error('down') } })).toMatchObject({ kind: 'retry', tier: 0, attempts, counted: false });
        }
      },
    }],
  },
  {
    happened: /^handler threw `WaitForConditionError`, or an error a `retryTable` rule names \(not a permanent one\)$/,
    claims: [
      {
        says: /^a retry-table row \(acked once the row commits\)/,
        check: () => {
          const now = new Date(1_000);
          expect(run({ now, happened: { kind: 'threw', error: new WaitForConditionError('carrier', { delayMs: 5 }) }, retryTable: policy })).toMatchObject({ kind: 'wait', dependency: 'carrier', nextAttemptAt: new Date(1_005), waits: 1 });
          expect(run({ now, happened: { kind: 'threw', error: new CarrierDown('503') }, retryTable: policy })).toMatchObject({ kind: 'wait', dependency: 'carrier', nextAttemptAt: new Date(61_000) });
          // Without a retryTable option, the ladder takes it (and says why).
          const ladder = run({ happened: { kind: 'threw', error: new WaitForConditionError('carrier') } });
          expect(ladder).toMatchObject({ kind: 'retry', tier: 0 });
          expect(ladder.notes?.[0]?.message).toMatch(/no `retryTable` option/);
        },
      },
      {
        says: /parked at the policy's `maxAttempts`$/,
        check: () => {
          const waited = { [HEADER.waits]: 20 };
          expect(run({ headers: waited, happened: { kind: 'threw', error: new CarrierDown() }, retryTable: policy })).toMatchObject({ kind: 'park', reason: 'max-attempts' });
          expect(run({ headers: { [HEADER.waits]: 2 }, happened: { kind: 'threw', error: new CarrierDown() }, retryTable: { ...policy, maxAttempts: 2 } })).toMatchObject({ kind: 'park', reason: 'max-attempts' });
        },
      },
    ],
  },
  {
    happened: /^consumer closing, message never started$/,
    claims: [{ says: /^put back in its queue \(a confirmed copy, so it is not counted as a crash/, check: () => expect(run({ happened: { kind: 'never-started' } })).toEqual({ kind: 'requeue', blip: true }) }],
  },
  {
    happened: /^process crashed mid-handler$/,
    claims: [{
      says: /^the broker redelivers/,
      check: () => {
        expect(run({ happened: { kind: 'redelivered', seenInFlight: false } })).toMatchObject({ kind: 'move-back', redeliveries: 1 });
        expect(run({ consumer: consumer('quorum'), headers: { 'x-delivery-count': 1 }, happened: { kind: 'redelivered', seenInFlight: false } })).toEqual({ kind: 'run' });
      },
    }],
  },
  {
    happened: /^the same message kills the process again and again$/,
    claims: [
      {
        says: /^parked \(`([a-z-]+)`\) after `crashLimit` deliveries \(default (\d+)\), on classic and quorum queues/,
        check: ([reason, limit]) => {
          const n = Number(limit);
          expect(consumer().crashLimit).toBe(n);
          expect(run({ headers: { [HEADER.redeliveries]: n - 2 }, happened: { kind: 'redelivered', seenInFlight: false } })).toMatchObject({ kind: 'move-back', redeliveries: n - 1 });
          expect(run({ headers: { [HEADER.redeliveries]: n - 1 }, happened: { kind: 'redelivered', seenInFlight: false } })).toMatchObject({ kind: 'park', reason });
          const quorum = consumer('quorum');
          expect(run({ consumer: quorum, headers: { 'x-delivery-count': n - 1 }, happened: { kind: 'redelivered', seenInFlight: false } })).toEqual({ kind: 'run' });
          expect(run({ consumer: quorum, headers: { 'x-delivery-count': n }, happened: { kind: 'redelivered', seenInFlight: false } })).toMatchObject({ kind: 'park', reason });
        },
      },
      {
        says: /a redelivery after a connection blip this process lived through is not counted/,
        check: () => {
          expect(run({ headers: { [HEADER.redeliveries]: 100 }, happened: { kind: 'redelivered', seenInFlight: true } })).toEqual({ kind: 'run' });
          expect(run({ consumer: consumer('quorum'), headers: { 'x-delivery-count': 100 }, happened: { kind: 'redelivered', seenInFlight: true } })).toEqual({ kind: 'run' });
        },
      },
    ],
  },
  {
    happened: /^your `classify`, `schema`, logger or `onOutcome` throws$/,
    claims: [
      {
        says: /a throwing `classify` leaves the decision to warren's rules/,
        check: () => {
          const classify = () => {
            throw new Error('classifier bug');
          };
          const permanent = run({ happened: { kind: 'threw', error: new PermanentError('gone') }, classify });
          expect(permanent).toMatchObject({ kind: 'park', reason: 'permanent-error' });
          expect(permanent.notes?.[0]?.message).toMatch(/`classify` option threw/);
          expect(run({ happened: { kind: 'threw', error: new Error('flaky') }, classify })).toMatchObject({ kind: 'retry', tier: 0 });
        },
      },
      {
        says: /a throwing schema parks \(`([a-z-]+)`\)/,
        check: ([reason]) => expect(run({ happened: { kind: 'invalid', reason: 'invalid-payload', error: new InvalidPayloadError('The schema threw') } })).toMatchObject({ kind: 'park', reason }),
      },
      {
        says: /anything else parks \(`([a-z-]+)`\)$/,
        check: ([reason]) => expect(run({ attempts: 2, happened: { kind: 'failure-path-threw', error: new Error('bug') } })).toMatchObject({ kind: 'park', reason, attempts: 3, minimal: true }),
      },
    ],
  },
  {
    happened: /^your asynchronous `schema` never settles$/,
    claims: [{
      says: /^a transient failure at `timeoutMs` \(`HandlerTimeoutError`\): retried, parked at the cap$/,
      check: () => {
        const error = new HandlerTimeoutError('billing', 60_000, 'schema');
        expect(run({ happened: { kind: 'timed-out', error } })).toMatchObject({ kind: 'retry', counted: true });
        expect(run({ attempts: cap - 1, happened: { kind: 'timed-out', error } })).toMatchObject({ kind: 'park', reason: 'max-attempts', attempts: cap });
      },
    }],
  },
  {
    happened: /^the broker is slow to confirm a move \(an alarm, a stalled socket\)$/,
    claims: [{ says: /a move that fails for 5 minutes is requeued and counted by the crash-loop guard$/, check: () => expect(run({ happened: { kind: 'move-failed' } })).toEqual({ kind: 'requeue', blip: false }) }],
  },
  {
    happened: /^the copy's headers cannot be encoded/,
    claims: [{
      says: /^parked with minimal metadata \(`([a-z-]+)` for a retry\), never retried forever/,
      check: ([reason]) => {
        const retry = run({ attempts: 1, happened: { kind: 'threw', error: new Error('flaky') } });
        expect(run({ happened: { kind: 'unencodable', intended: retry } })).toMatchObject({ kind: 'park', reason, attempts: 2, minimal: true });
        const parked = run({ happened: { kind: 'threw', error: new PermanentError('gone') } });
        expect(run({ happened: { kind: 'unencodable', intended: parked } })).toMatchObject({ kind: 'park', reason: 'permanent-error', minimal: true });
      },
    }],
  },
];

describe("the README's failure table", () => {
  const readme = failureTable();

  it('has rows, and every row has its claims here', () => {
    expect(readme.length).toBeGreaterThan(10);
    for (const [happened] of readme) expect(rows.filter((r) => r.happened.test(happened)), `README row "${happened}" is not checked against decide(); add it to contract.test.ts`).toHaveLength(1);
    for (const r of rows) expect(readme.some(([happened]) => r.happened.test(happened)), `no README row matches ${String(r.happened)}`).toBe(true);
  });

  for (const r of rows) {
    it(`keeps its word: ${r.happened.source.replace(/\\/g, '').slice(1, -1)}`, () => {
      const row = readme.find(([happened]) => r.happened.test(happened));
      expect(row, 'the row is in the README').toBeDefined();
      for (const claim of r.claims) {
        const m = claim.says.exec(row![1]);
        expect(m, `the README says ${String(claim.says)} in "${row![1]}"`).not.toBeNull();
        claim.check(m!.slice(1));
      }
    });
  }
});

describe('decide', () => {
  it('climbs one tier per failure, the last one repeating, and parks at the cap with the failure it got', () => {
    const c = defineTopology({ consumers: { c: { bindings: ['x'], retry: { delays: [10, 20], maxAttempts: 5 } } } }).consumer('c');
    const error = new Error('flaky');
    const seen = [0, 1, 2, 3, 4].map((attempts) => decide({ happened: { kind: 'threw', error }, attempts, headers: {}, consumer: c }));
    expect(seen.map((d) => (d.kind === 'retry' ? `retry ${d.tier} ${d.delayMs} ${d.attempts}` : d.kind === 'park' ? `park ${d.reason} ${d.attempts}` : d.kind))).toEqual([
      'retry 0 10 1', 'retry 1 20 2', 'retry 1 20 3', 'retry 1 20 4', 'park max-attempts 5',
    ]);
    expect(seen[4]).toMatchObject({ error });
  });

  it('gives the retry table the cause a wait carries, and a tenant function that throws to the ladder with a note', () => {
    const cause = new Error('carrier answered 503');
    const wait = decide({ happened: { kind: 'threw', error: new WaitForConditionError('carrier', { cause, tenant: 'acme' }) }, attempts: 0, headers: {}, consumer: consumer(), retryTable: policy });
    expect(wait).toMatchObject({ kind: 'wait', dependency: 'carrier', tenant: 'acme', error: cause });
    const broken = decide({
      happened: { kind: 'threw', error: new CarrierDown() }, attempts: 0, headers: {}, consumer: consumer(),
      retryTable: { ...policy, tenant: () => { throw new Error('tenant bug'); } },
    });
    expect(broken).toMatchObject({ kind: 'retry', tier: 0 });
    expect(broken.notes?.[0]?.message).toMatch(/retry-table policy threw/);
  });

  it('sends a row the table refused (not an outage) to the ladder, counting the attempt', () => {
    expect(decide({ happened: { kind: 'not-stored', outage: false, error: new CarrierDown() }, attempts: 0, headers: {}, consumer: consumer() })).toMatchObject({ kind: 'retry', tier: 0, attempts: 1, counted: true });
    expect(decide({ happened: { kind: 'not-stored', outage: false, error: new CarrierDown() }, attempts: cap - 1, headers: {}, consumer: consumer() })).toMatchObject({ kind: 'park', reason: 'max-attempts' });
  });

  it('reads forged redelivery and wait counts as none', () => {
    for (const forged of ['banana', -4, 1.5, { n: 1 }, '99999999999999999999']) {
      expect(decide({ happened: { kind: 'redelivered', seenInFlight: false }, attempts: 0, headers: { [HEADER.redeliveries]: forged }, consumer: consumer() })).toMatchObject({ kind: 'move-back', redeliveries: 1 });
      expect(decide({ happened: { kind: 'threw', error: new CarrierDown() }, attempts: 0, headers: { [HEADER.waits]: forged }, consumer: consumer(), retryTable: policy })).toMatchObject({ kind: 'wait', waits: 1 });
    }
  });

  it('acks a duplicate the guard skipped', () => {
    expect(decide({ happened: { kind: 'duplicate' }, attempts: 3, headers: {}, consumer: consumer() })).toEqual({ kind: 'ack', duplicate: true });
  });
});
