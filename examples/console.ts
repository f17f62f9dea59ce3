/**
 * The last stop of `npm start`: the operator console over the demo's topology and the
 * retry-table tour's database, on http://127.0.0.1:8780/ until Ctrl-C. The billing
 * tour left one message parked: open it, read its error, replay it.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nodeListener, warrenConsole } from '../src/console/index.js';
import { sqliteStore } from '../src/store/sqlite/index.js';
import { topology } from './topology.js';

const url = process.env['WARREN_AMQP_URL'] ?? 'amqp://guest:guest@127.0.0.1:5672';
const filename = join(tmpdir(), 'warren-demo.db');
const wanted = Number(process.env['WARREN_CONSOLE_PORT'] ?? 8780);

const store = sqliteStore({ filename });
const server = createServer();
const port = await new Promise<number>((resolve, reject) => {
  const listen = (p: number) => server.listen(p, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  server.once('error', (error: NodeJS.ErrnoException) => {
    // Another program has the port: take any free one.
    if (error.code !== 'EADDRINUSE') return reject(error);
    server.once('error', reject);
    listen(0);
  });
  listen(wanted);
});
const ops = warrenConsole({
  topology,
  url,
  store,
  databaseName: `sqlite:${filename}`,
  // On loopback, in a demo: whoever is at this machine is the operator.
  authorize: () => ({ user: 'demo', role: 'operator' }),
  allowedHosts: [`127.0.0.1:${port}`, `localhost:${port}`],
});
server.on('request', nodeListener(ops.fetch));
console.log(`The operator console: http://127.0.0.1:${port}/  (Ctrl-C to stop)`);
console.log('The same from the command line, on any topology module:');
console.log(`  npm run warren -- console -t examples/topology.ts --db sqlite:${filename}`);

const stop = () => {
  server.closeAllConnections();
  server.close();
  void ops
    .close()
    .then(() => store.close())
    .then(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
