// `npm run typecheck`: the project with TypeScript 5.9 (`typescript`), then with
// TypeScript 7, the native compiler (`typescript-7`, an npm alias). Both install a `tsc`
// command, so each is run by its path.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import process from 'node:process';

const compilers = [
  ['TypeScript 5.9', 'node_modules/typescript/bin/tsc'],
  ['TypeScript 7', 'node_modules/typescript-7/bin/tsc'],
];
for (const [name, tsc] of compilers) {
  if (!existsSync(tsc)) {
    process.stderr.write(`typecheck: ${name} is not installed (${tsc}); run npm install, which installs both compilers\n`);
    process.exit(1);
  }
  const { status } = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.json', '--noEmit', ...process.argv.slice(2)], { stdio: 'inherit' });
  if (status !== 0) {
    process.stderr.write(`typecheck: ${name} found errors\n`);
    process.exit(status ?? 1);
  }
}
