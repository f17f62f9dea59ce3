#!/usr/bin/env node
// The `warren` executable (package.json "bin"). Everything else is in run.ts.
import { run } from './run.js';

process.exitCode = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  cwd: process.cwd(),
});
