import { mkdtempSync, readFileSync, rmSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidOptionError } from '../errors.js';
import { onTeardown } from '../../test/helpers.js';
import { compilePattern } from '../park/pattern.js';
import { harness } from '../store/testing/harness.js';
import { fileActionLog, filterRecord, type ActionLog } from './index.js';

function tempFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'warren-audit-'));
  onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
  return join(dir, 'sub', 'actions.jsonl');
}

const BACKENDS = ['sqlite', 'postgres', 'file'] as const;

async function open(backend: (typeof BACKENDS)[number]): Promise<ActionLog> {
  if (backend === 'file') return fileActionLog(tempFile());
  const h = await harness(backend);
  return h.store().actions;
}

describe.each(BACKENDS)('action record: %s', (backend) => {
  it('records an action and lists it back as recorded, newest first', async () => {
    const log = await open(backend);
    const at = new Date('2026-03-01T12:00:00.000Z');
    const first = await log.record({ at, actor: 'alice', action: 'parked.replay', consumer: 'billing', filter: { fingerprint: 'HttpError: carrier <n>' }, count: 12, outcome: 'ok', detail: { ratePerSecond: 50 } });
    const second = await log.record({ actor: 'bob', action: 'outbox.release', count: 1, outcome: 'partial' });
    expect(first).toMatchObject({ at, actor: 'alice', action: 'parked.replay', consumer: 'billing', count: 12, outcome: 'ok' });
    const all = await log.list();
    expect(all.map((r) => r.id)).toEqual([second.id, first.id]);
    expect(all[1]).toEqual(first);
    expect(all[0]).toEqual(second);
    expect(all[0]).not.toHaveProperty('consumer');
    expect(all[0]).not.toHaveProperty('filter');
    expect(all[1]?.filter).toEqual({ fingerprint: 'HttpError: carrier <n>' });
    expect(all[1]?.detail).toEqual({ ratePerSecond: 50 });
  });

  it('lists by action, consumer and time, and at most limit records', async () => {
    const log = await open(backend);
    const base = Date.parse('2026-03-01T00:00:00Z');
    for (let i = 0; i < 6; i++) {
      await log.record({ at: new Date(base + i * 60_000), actor: 'alice', action: i % 2 ? 'parked.purge' : 'parked.replay', consumer: i < 3 ? 'billing' : 'email', count: i, outcome: 'ok' });
    }
    expect((await log.list({ action: 'parked.purge' })).map((r) => r.count)).toEqual([5, 3, 1]);
    expect((await log.list({ consumer: 'billing' })).map((r) => r.count)).toEqual([2, 1, 0]);
    expect((await log.list({ since: new Date(base + 4 * 60_000) })).map((r) => r.count)).toEqual([5, 4]);
    expect((await log.list({ limit: 2 })).map((r) => r.count)).toEqual([5, 4]);
    expect((await log.list({ action: 'parked.replay', consumer: 'email' })).map((r) => r.count)).toEqual([4]);
    expect(await log.list({ action: 'retry.pause' })).toEqual([]);
  });

  it('refuses a malformed entry, naming the field, and records nothing', async () => {
    const log = await open(backend);
    await expect(log.record({ actor: '', action: 'parked.replay', count: 1, outcome: 'ok' })).rejects.toThrow(/actor/);
    await expect(log.record({ actor: 'a', action: 'Replay Everything', count: 1, outcome: 'ok' })).rejects.toThrow(/action/);
    await expect(log.record({ actor: 'a', action: 'parked.replay', count: -1, outcome: 'ok' })).rejects.toThrow(InvalidOptionError);
    await expect(log.record({ actor: 'a', action: 'parked.replay', count: 1, outcome: 'done' as never })).rejects.toThrow(/outcome/);
    await expect(log.record({ actor: 'a', action: 'parked.replay', count: 1, outcome: 'ok', detail: { body: 'x'.repeat(70_000) } })).rejects.toThrow(/detail/);
    await expect(log.list({ limit: 0 })).rejects.toThrow(/limit/);
    expect(await log.list()).toEqual([]);
  });
});

describe('action record in a file', () => {
  it('appends one JSON line per action, and skips a torn last line', async () => {
    const file = tempFile();
    const log = fileActionLog(file);
    await log.record({ actor: 'alice', action: 'parked.purge', consumer: 'billing', count: 3, outcome: 'ok' });
    appendFileSync(file, '{"id":"torn","at":"2026');
    await log.record({ actor: 'alice', action: 'parked.replay', consumer: 'billing', count: 2, outcome: 'ok' });
    const lines = readFileSync(file, 'utf8').split('\n');
    expect(JSON.parse(lines[0] as string)).toMatchObject({ actor: 'alice', action: 'parked.purge', count: 3 });
    expect((await log.list()).map((r) => r.action)).toEqual(['parked.replay', 'parked.purge']);
  });

  it('a file not yet written lists nothing', async () => {
    expect(await fileActionLog(tempFile()).list()).toEqual([]);
  });
});

describe('filterRecord', () => {
  it('turns patterns and times into text', () => {
    expect(filterRecord({ error: compilePattern('carrier \\d+', { ignoreCase: true }), since: new Date('2026-03-01T00:00:00Z'), messageIds: ['a'], fingerprint: 'X: y' })).toEqual({
      error: '/carrier \\d+/i',
      since: '2026-03-01T00:00:00.000Z',
      messageIds: ['a'],
      fingerprint: 'X: y',
    });
  });
});
