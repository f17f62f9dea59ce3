/**
 * The API reference builds from the package entries with warnings as errors: a broken
 * {@link}, a public signature that uses a type no entry exports, or an exported symbol
 * without a doc comment fails here. docs/api/ is generated (`npm run docs:api`), not
 * committed, so it cannot go stale; this test builds it into a temporary directory.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { codeEntries, ROOT, sh, type Manifest } from './pack.js';

const out = mkdtempSync(join(tmpdir(), 'warren-api-docs-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe('npm run docs:api', () => {
  it('documents every exports entry, with TypeDoc validation and warnings as errors', async () => {
    const json = join(out, 'api.json');
    await sh(process.execPath, [join(ROOT, 'scripts/api-docs.mjs'), '--out', join(out, 'html'), '--json', json], ROOT, {}, 600_000);
    expect(existsSync(join(out, 'html/index.html'))).toBe(true);
    const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as Manifest;
    const project = JSON.parse(readFileSync(json, 'utf8')) as { children?: Array<{ name: string; children?: Array<{ name: string }> }> };
    const modules = new Map((project.children ?? []).map((m) => [m.name, new Set((m.children ?? []).map((c) => c.name))]));
    // One module per entry, named as users import it.
    expect([...modules.keys()].sort()).toEqual(codeEntries(manifest).map((e) => e.specifier).sort());
    // The store types users see are in it; the internals are not.
    expect(modules.get('warren/sqlite')).toEqual(new Set(['sqliteStore', 'SqliteStore', 'SqliteStoreOptions', 'SqliteOutbox', 'SqliteDatabase', 'SqliteStatement']));
    expect(modules.get('warren/postgres')).toEqual(new Set(['postgresStore', 'PostgresStore', 'PostgresStoreOptions', 'PostgresGuardOptions', 'GUARD_IDLE_IN_TRANSACTION_TIMEOUT_MS', 'PgClient', 'PgPool', 'PgQueryResult', 'PgNotification']));
  }, 600_000);

  it('is generated, not committed', () => {
    expect(readFileSync(join(ROOT, '.gitignore'), 'utf8')).toMatch(/^docs\/api\/$/m);
  });
});
