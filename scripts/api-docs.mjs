#!/usr/bin/env node
// The API reference (npm run docs:api): TypeDoc over the sources of every code entry in
// package.json's "exports", one module per entry, named as users import it
// ('warren', 'warren/sqlite', ...). Warnings are errors, and validation is on: a broken
// {@link}, a public signature that uses a type no entry exports, or an exported symbol
// with no doc comment fails the build.
//
//   node scripts/api-docs.mjs [--out DIR] [--json FILE]   (default: docs/api)
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import process from 'node:process';
import { fileURLToPath } from 'node:url';
import { Application, Converter, ReflectionKind } from 'typedoc';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i < 0 ? undefined : args[i + 1];
};
const out = resolve(flag('--out') ?? join(root, 'docs/api'));
const json = flag('--json');

/** The source file of each code entry, from its "types" target (dist/x.d.ts -> src/x.ts). */
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const entries = new Map();
for (const [key, target] of Object.entries(manifest.exports)) {
  const types = typeof target === 'object' && target !== null ? target.types : undefined;
  if (typeof types !== 'string') continue;
  const source = join(root, types.replace(/^\.\/dist\//, 'src/').replace(/\.d\.ts$/, '.ts'));
  entries.set(source, key === '.' ? manifest.name : `${manifest.name}/${key.slice(2)}`);
}

const app = await Application.bootstrapWithPlugins({
  name: `${manifest.name} ${manifest.version}`,
  entryPoints: [...entries.keys()],
  tsconfig: join(root, 'tsconfig.build.json'),
  readme: 'none',
  out,
  excludePrivate: true,
  excludeProtected: true,
  excludeInternal: true,
  treatWarningsAsErrors: true,
  treatValidationWarningsAsErrors: true,
  validation: { notExported: true, invalidLink: true, rewrittenLink: true, notDocumented: true, unusedMergeModuleWith: true },
  requiredToBeDocumented: ['Enum', 'Variable', 'Function', 'Class', 'Interface', 'TypeAlias'],
  sort: ['source-order'],
  githubPages: false,
  // Source links need a hosted repository; the reference stands without them.
  disableSources: true,
  hideGenerator: true,
});

// Name each module as users import it, not by its path: TypeDoc names a module by its
// file's path from the entries' common directory, without the extension and '/index'.
const base = commonDirectory([...entries.keys()]);
const byTypedocName = new Map([...entries].map(([file, name]) => [relative(base, file).replace(/\\/g, '/').replace(/\.ts$/, '').replace(/(^|\/)index$/, '') || 'index', name]));
app.converter.on(Converter.EVENT_RESOLVE_BEGIN, (context) => {
  for (const module of context.project.getReflectionsByKind(ReflectionKind.Module)) {
    const name = byTypedocName.get(module.name);
    if (name === undefined) {
      app.logger.error(`api-docs: module "${module.name}" matches no exports entry (${[...byTypedocName.keys()].join(', ')})`);
    } else {
      module.name = name;
    }
  }
});

function commonDirectory(files) {
  const parts = files.map((f) => dirname(f).split('/'));
  const first = parts[0] ?? [];
  let n = 0;
  while (n < first.length && parts.every((p) => p[n] === first[n])) n++;
  return first.slice(0, n).join('/') || '/';
}

const project = await app.convert();
if (!project) {
  process.stderr.write('api-docs: TypeDoc could not convert the entries (see above)\n');
  process.exit(1);
}
app.validate(project);
if (app.logger.hasErrors() || app.logger.hasWarnings()) {
  process.stderr.write(`api-docs: ${app.logger.errorCount} errors, ${app.logger.warningCount} warnings\n`);
  process.exit(1);
}
await app.generateDocs(project, out);
if (json) await app.generateJson(project, json);
if (app.logger.hasErrors() || app.logger.hasWarnings()) process.exit(1);
process.stdout.write(`api-docs: ${entries.size} entries -> ${relative(process.cwd(), out) || '.'}\n`);
