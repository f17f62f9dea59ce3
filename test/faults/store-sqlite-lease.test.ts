/**
 * The SQLite relay renews its lease while it publishes, so that "a slow publish never
 * loses its rows to another relay". A renewal is a write, and needs the file's write
 * lock: while another process holds it longer than the lease (a guarded handler's
 * transaction may last up to its `timeoutMs`, 60 s by default, longer than the default
 * 30 s lease), every renewal times out. When that process commits, the relay pass it had
 * queued behind its own transaction begins at once (its connection's FIFO), finds the
 * lease expired and publishes the rows the first relay is still publishing: the same
 * rows go out twice at the same time (and, in strict order, two relays interleave).
 *
 * Fixed: a relay takes rows over only once it has seen their lease expired, unchanged,
 * for a further `leaseMs` since its first sighting (made at a claim, after which the
 * write lock is free for the owner's renewal). The second test checks that rows of a
 * relay that really stopped still go out again, after that wait.
 */
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { OutgoingMessage } from '../../src/publish/publisher.js';
import { sqliteStore, type SqliteDatabase } from '../../src/store/sqlite/index.js';
import { onTeardown, waitFor } from '../helpers.js';

describe('SQLite relay lease', () => {
  it('a second relay does not take rows the first is still publishing while a long write transaction blocks its renewals', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-lease-'));
    onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'w.db');
    // Two processes on one file: each store has its own connection.
    const a = sqliteStore<SqliteDatabase>({ filename: file, busyTimeoutMs: 100, pruneIntervalMs: 0 });
    const b = sqliteStore<SqliteDatabase>({ filename: file, busyTimeoutMs: 5000, pruneIntervalMs: 0 });
    onTeardown(() => a.close());
    onTeardown(() => b.close());
    await a.migrate();
    await b.migrate();
    let release!: () => void;
    const confirms = new Promise<void>((r) => (release = r));
    const sends: string[] = [];
    const relayA = a.relay({ exchange: 'x', leaseMs: 300, publisher: { send: async (m: OutgoingMessage) => void (sends.push(`a:${m.routingKey}`), await confirms) } });
    const relayB = b.relay({ exchange: 'x', leaseMs: 300, publisher: { send: async (m: OutgoingMessage) => void sends.push(`b:${m.routingKey}`) } });
    await a.transaction((tx) => a.outbox.add(tx, 'row.1', {}));
    const passA = relayA.runOnce();
    await waitFor(() => sends.length === 1, 'relay A to send the row (its confirm held back)');
    // Process B: a write transaction longer than the lease, its relay's pass queued behind it.
    const long = b.transaction(() => new Promise((r) => setTimeout(r, 1000)));
    const passB = relayB.runOnce();
    await long;
    const b1 = await passB;
    release();
    await passA;
    expect(b1.claimed).toBe(0);
    expect(sends).toEqual(['a:row.1']);
  });

  it('rows of a relay that stopped renewing go out again once their lease has been seen expired for another leaseMs', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'warren-lease-'));
    onTeardown(async () => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'w.db');
    const b = sqliteStore<SqliteDatabase>({ filename: file, pruneIntervalMs: 0 });
    onTeardown(() => b.close());
    await b.migrate();
    await b.transaction((tx) => b.outbox.add(tx, 'row.1', {}));
    // A relay claimed the row and died: its lease ran out a moment ago.
    const db = new Database(file);
    db.prepare(`UPDATE ${b.tables.outbox} SET lease_owner = 'gone', lease_until = ?`).run(Date.now() - 1);
    db.close();
    const sends: string[] = [];
    const relayB = b.relay({ exchange: 'x', leaseMs: 200, publisher: { send: async (m: OutgoingMessage) => void sends.push(m.routingKey) } });
    const firstSeen = Date.now();
    expect((await relayB.runOnce()).claimed).toBe(0);
    await waitFor(async () => (await relayB.runOnce()).claimed === 1, 'the row to be taken over');
    expect(Date.now() - firstSeen).toBeGreaterThanOrEqual(200);
    expect(sends).toEqual(['row.1']);
  });
});
