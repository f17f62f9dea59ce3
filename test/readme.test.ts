/**
 * The README is the three-minute page: short, and every link from it (and from the
 * pages in docs/) leads somewhere. Long text belongs in docs/, a line and a link here.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
/** 10 KB: the size of the READMEs of kysely and hono, which say what they are and link the rest. */
const MAX_README_BYTES = 10 * 1024;

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[`*_]/g, '')
    .replace(/[^\p{L}\p{N} -]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = anchor(m[1] ?? '');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Relative links of a markdown file (outside code blocks): [text](target). */
function linksOf(file: string): string[] {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
  return [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] ?? '').filter((t) => !/^[a-z]+:/i.test(t));
}

const pages = [join(root, 'README.md'), ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => join(root, 'docs', f))];

describe('README', () => {
  it(`is at most ${MAX_README_BYTES} bytes: what warren is, the two commands, one example, the failure table, links`, () => {
    const size = readFileSync(join(root, 'README.md')).byteLength;
    expect(size, `README.md is ${size} bytes; move long text to docs/ and leave a line and a link`).toBeLessThanOrEqual(MAX_README_BYTES);
  });

  it('says the two commands a newcomer runs', () => {
    const text = readFileSync(join(root, 'README.md'), 'utf8');
    expect(text).toMatch(/^npm start\b/m);
    expect(text).toMatch(/^npm test\b/m);
  });

  it('and every page in docs/ link only to files and headings that exist', () => {
    const broken: string[] = [];
    for (const page of pages) {
      for (const link of linksOf(page)) {
        const [path = '', hash] = link.split('#');
        const target = path === '' ? page : resolve(dirname(page), decodeURIComponent(path));
        const where = `${relative(root, page)} → ${link}`;
        if (!existsSync(target)) broken.push(`${where}: no such file`);
        else if (hash !== undefined && target.endsWith('.md') && !anchorsOf(target).has(hash)) broken.push(`${where}: no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });
});
