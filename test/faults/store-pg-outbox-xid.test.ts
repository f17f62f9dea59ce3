/**
 * Strict order on PostgreSQL rests on an outbox insert taking its transaction id before
 * its row id. The insert wrote `FROM (SELECT pg_current_xact_id()) AS x`, but the planner
 * pulls that subquery up and drops the unused, stable call: the row id (nextval) came
 * first and the transaction id only at the heap insert. A relay whose snapshot fell in
 * between saw a gap with no open transaction to wait for and published the rows behind
 * it first. A BEFORE INSERT trigger that sleeps stands in for a backend descheduled in
 * that window.
 */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import type { TopologyOptions } from '../../src/index.js';
import type { OutgoingMessage } from '../../src/publish/publisher.js';
import type { PgClient } from '../../src/store/postgres/index.js';
import { harness } from '../../src/store/testing/harness.js';
import { connectWarren, onTeardown, PG_URL, testTopology, waitFor } from '../helpers.js';

describe('PostgreSQL outbox: the transaction id is taken before the row id', () => {
  it('a row whose insert is slow between its id and its write still goes out before the rows after it', async () => {
    const h = await harness('postgres');
    const store = h.store();
    await store.migrate();
    const schema = (h.spec as { schema: string }).schema;
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    onTeardown(() => admin.end());
    await admin.query(`CREATE FUNCTION "${schema}".slow() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN IF NEW.routing_key = 'order.slow' THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END$$`);
    await admin.query(`CREATE TRIGGER slow BEFORE INSERT ON ${store.tables.outbox} FOR EACH ROW EXECUTE FUNCTION "${schema}".slow()`);
    // A sequence's first nextval is logged and takes a transaction id; the next 31 are not.
    await admin.query(`SELECT nextval(pg_get_serial_sequence($1, 'id'))`, [store.tables.outbox.replace(/"/g, '')]);
    let consumer!: string;
    const topology = testTopology(({ exchange, name }): TopologyOptions => {
      consumer = name('billing');
      return { exchange, consumers: { [consumer]: { bindings: ['order.*'] } } };
    });
    const warren = await connectWarren(topology);
    const order: string[] = [];
    const publisher = { send: (m: OutgoingMessage) => (order.push(m.routingKey), warren.publisher.send(m)) };
    const relay = store.relay({ publisher, exchange: topology.exchange, pollMs: 10 });
    const slow = store.transaction((tx) => store.outbox.add(tx as PgClient, 'order.slow', {}));
    await waitFor(async () => (await admin.query(`SELECT 1 FROM pg_stat_activity WHERE query LIKE '%${schema}%' AND wait_event = 'PgSleep'`)).rowCount === 1, 'the slow insert to be in its trigger');
    await store.transaction((tx) => store.outbox.add(tx as PgClient, 'order.fast', {}));
    await relay.start();
    onTeardown(() => relay.stop());
    await slow;
    await waitFor(() => order.length === 2, 'both rows to be published');
    void consumer;
    expect(order).toEqual(['order.slow', 'order.fast']);
  });
});
