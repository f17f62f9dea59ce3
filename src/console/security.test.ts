// The console against an attacker: patterns that would stall it, requests from other
// sites, secrets in URLs, a forged or failing action record, and the smaller leaks.
import { describe, expect, it } from 'vitest';
import { testTopology } from '../../test/helpers.js';
import { declared, publishParked } from '../park/testing/fixtures.js';
import { get, testConsole, VIEWER } from './testing/harness.js';

function billingTopology() {
  return testTopology(({ exchange, name }) => ({
    exchange,
    retry: { delays: [20], maxAttempts: 2 },
    consumers: { billing: { queue: name('billing'), bindings: ['order.created'] } },
  }));
}

describe('console security: error patterns', () => {
  it('a pattern that would backtrack for hours is matched in linear time, and every other request is answered meanwhile', async () => {
    const topology = billingTopology();
    const conn = await declared(topology);
    const billing = topology.consumer('billing');
    // With a backtracking engine, 2^40 ways to split the a's: the process would never answer again.
    await publishParked(conn, topology, billing, [{ id: 'aaa', message: `${'a'.repeat(40)}!` }, { id: 'order', message: 'order 4242 has no customer' }]);
    const ops = testConsole(topology);
    const [stalled, other] = await Promise.all([
      get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(a+)+$/')}`, VIEWER),
      get(ops, '/api/history', VIEWER),
      get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(.+)+X$/')}`, VIEWER),
    ]);
    expect(stalled.status).toBe(200);
    expect(stalled.text).toMatch(/<b id="parked-total">2<\/b> parked, <b id="parked-matched">0<\/b> match/);
    expect(other.status).toBe(200);
    const found = await get(ops, `/parked/${billing.name}?error=${encodeURIComponent('/^(a+)+!$/')}`, VIEWER);
    expect(found.text).toMatch(/<b id="parked-matched">1<\/b>/);
    expect(found.text).toContain('data-message-id="aaa"');
  });

  it('a pattern outside the subset is refused with 400, naming the field and what is not supported', async () => {
    const topology = billingTopology();
    await declared(topology);
    const ops = testConsole(topology);
    for (const [pattern, what] of [
      ['/(a)\\1/', /a back-reference \\1 at character 4, which is not supported/],
      ['/(?=a)b/', /a lookahead \(\?=…\)/],
      ['/a/g', /the flag g, which is not supported/],
      [`/${'a'.repeat(300)}/`, /300 characters long, more than 256/],
      ['/(?:a{100}){100}/', /larger than 4000 steps/],
    ] as const) {
      const res = await get(ops, `/parked/${topology.consumer('billing').name}?error=${encodeURIComponent(pattern)}`, VIEWER);
      expect(res.status, pattern).toBe(400);
      expect(res.text, pattern).toMatch(/Invalid option `error`/);
      expect(res.text.replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&'), pattern).toMatch(what);
    }
  });
});
