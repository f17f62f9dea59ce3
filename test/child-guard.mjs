// Loaded into every Node process a test spawns (through NODE_OPTIONS, set by
// test/setup.ts): an error that ends the child uncaught is written to the file named
// by WARREN_CHILD_ERRORS, so the test that spawned the child fails on it.
import { appendFileSync } from 'node:fs';
import process from 'node:process';

const file = process.env.WARREN_CHILD_ERRORS;
if (file) {
  process.on('uncaughtExceptionMonitor', (error, origin) => {
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    try {
      appendFileSync(file, `${JSON.stringify({ pid: process.pid, argv: process.argv.slice(1).join(' '), origin, error: text })}\n`);
    } catch {
      // The test run is over (the file's directory is gone); nothing to tell.
    }
  });
}
