/**
 * A user who never touches PostgreSQL never loads `pg`, and one who never touches SQLite
 * never loads `better-sqlite3`: the main entry loads neither, each backend's entry loads
 * its own driver only when a store is first used.
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Runs `script` in a fresh Node (with tsx) and returns which drivers it loaded. */
function loadedDrivers(script: string): string[] {
  const probe = `
    import { createRequire } from 'node:module';
    ${script}
    const cache = Object.keys(createRequire(import.meta.url).cache);
    const loaded = ['pg', 'better-sqlite3'].filter((d) => cache.some((k) => k.includes('/node_modules/' + d + '/')));
    console.log(JSON.stringify(loaded));
  `;
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', probe], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, DATABASE_URL: 'postgres://127.0.0.1:1/none' } });
  return JSON.parse(out.trim().split('\n').pop() as string) as string[];
}

describe('entry points', () => {
  it('the main entry loads no database driver', () => {
    expect(loadedDrivers(`await import('./src/index.ts');`)).toEqual([]);
  });

  it('warren/sqlite loads better-sqlite3 only when a store is used, and never pg', () => {
    expect(loadedDrivers(`const { sqliteStore } = await import('./src/store/sqlite/index.ts'); sqliteStore({ filename: ':memory:' });`)).toEqual([]);
    expect(loadedDrivers(`const { sqliteStore } = await import('./src/store/sqlite/index.ts'); const s = sqliteStore({ filename: ':memory:' }); await s.migrate(); await s.close();`)).toEqual(['better-sqlite3']);
  });

  it('warren/postgres loads pg only when a store is used, and never better-sqlite3', () => {
    expect(loadedDrivers(`const { postgresStore } = await import('./src/store/postgres/index.ts'); postgresStore({});`)).toEqual([]);
    expect(loadedDrivers(`const { postgresStore } = await import('./src/store/postgres/index.ts'); const s = postgresStore({ connectTimeoutMs: 200 }); await s.migrate().catch(() => undefined); await s.close();`)).toEqual(['pg']);
  });
});
