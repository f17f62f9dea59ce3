import { checkEntry, checkQuery, type ActionEntry, type ActionLog, type ActionQuery, type ActionRecord } from '../../audit/entry.js';
import type { SqliteDatabase } from './driver.js';
import type { SqliteInternals } from './internals.js';

/** The action record in the SQLite store's `<prefix>actions` table; times in Unix milliseconds. */
export class SqliteActionLog<DB extends SqliteDatabase> implements ActionLog {
  constructor(private readonly store: SqliteInternals<DB>) {}

  async record(entry: ActionEntry): Promise<ActionRecord> {
    const e = checkEntry(entry);
    const id = await this.store.write(
      (db) =>
        this.store
          .statement(db, `INSERT INTO ${this.store.tables.actions} (at, actor, action, consumer, filter, count, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(e.at.getTime(), e.actor, e.action, e.consumer ?? null, e.filter === undefined ? null : JSON.stringify(e.filter), e.count, e.outcome, e.detail === undefined ? null : JSON.stringify(e.detail)).lastInsertRowid,
      'record an action',
    );
    return { id: String(id), ...e };
  }

  async list(query?: ActionQuery): Promise<ActionRecord[]> {
    const q = checkQuery(query);
    const where: string[] = [];
    const values: unknown[] = [];
    if (q.since !== undefined) {
      where.push('at >= ?');
      values.push(q.since.getTime());
    }
    if (q.action !== undefined) {
      where.push('action = ?');
      values.push(q.action);
    }
    if (q.consumer !== undefined) {
      where.push('consumer = ?');
      values.push(q.consumer);
    }
    const sql = `SELECT id, at, actor, action, consumer, filter, count, outcome, detail FROM ${this.store.tables.actions}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT ?`;
    return this.store.read((db) => (this.store.statement(db, sql).all(...values, q.limit) as Row[]).map(toRecord), 'list actions');
  }
}

interface Row {
  id: number | bigint;
  at: number | bigint;
  actor: string;
  action: string;
  consumer: string | null;
  filter: string | null;
  count: number | bigint;
  outcome: string;
  detail: string | null;
}

function toRecord(r: Row): ActionRecord {
  return {
    id: String(r.id),
    at: new Date(Number(r.at)),
    actor: r.actor,
    action: r.action,
    ...(r.consumer !== null ? { consumer: r.consumer } : {}),
    ...(r.filter !== null ? { filter: JSON.parse(r.filter) as Record<string, unknown> } : {}),
    count: Number(r.count),
    outcome: r.outcome as ActionRecord['outcome'],
    ...(r.detail !== null ? { detail: JSON.parse(r.detail) as Record<string, unknown> } : {}),
  };
}
