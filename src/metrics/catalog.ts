/**
 * Every metric warren exposes, in one list: its name, type, help and labels. The
 * collectors register from here, docs/metrics.md's table is checked against it, and the
 * shipped alert rules and dashboard are checked against a real scrape.
 */

/** Where a figure comes from. */
export type MetricSource = 'application' | 'broker' | 'store';

/** One metric's definition. */
export interface MetricSpec {
  readonly name: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly help: string;
  readonly labels: readonly string[];
  readonly source: MetricSource;
}

function m(source: MetricSource, type: MetricSpec['type'], name: string, labels: readonly string[], help: string): MetricSpec {
  return { name, type, help, labels, source };
}

/** Every metric warren exports, by key: name, type, labels, help and where it is read from. */
export const METRICS = {
  // --- from the application: consumers --------------------------------------------------
  deliveries: m('application', 'counter', 'warren_consumer_deliveries_total', ['consumer', 'outcome'], 'Deliveries by outcome: acked, duplicate, retried, parked, waiting (retry table), requeued, redelivery-moved (crash-loop guard).'),
  retries: m('application', 'counter', 'warren_consumer_retries_total', ['consumer', 'tier', 'delay'], 'Messages sent to a retry tier (tier 1 is the first delay).'),
  parked: m('application', 'counter', 'warren_consumer_parked_total', ['consumer', 'reason'], 'Messages parked, by reason (permanent-error, max-attempts, invalid-json, invalid-payload, missing-message-id, crash-loop).'),
  waits: m('application', 'counter', 'warren_consumer_waits_total', ['consumer', 'dependency'], 'Messages stored in the retry table, by the dependency they wait for.'),
  handlerDuration: m('application', 'histogram', 'warren_consumer_handler_duration_seconds', ['consumer', 'outcome'], 'Time from the start of processing (decode, handler, the move) to the outcome.'),
  inFlight: m('application', 'gauge', 'warren_consumer_in_flight', ['consumer'], 'Handlers running now.'),
  attached: m('application', 'gauge', 'warren_consumer_attached', ['consumer'], '1 while the consumer is attached to its queue, 0 while it is not.'),
  cancellations: m('application', 'counter', 'warren_consumer_cancellations_total', ['consumer'], 'Times the broker cancelled the consumer or closed its channel for it: a consumer timeout (RabbitMQ 4.3 quorum queues cancel the consumer; before 4.3 the channel is closed), a deleted queue, a failover. The consumer re-attaches each time; the same count as the consumer\'s stats.brokerCancels.'),
  paused: m('application', 'gauge', 'warren_consumer_paused', ['consumer', 'reason'], '1 while the consumer takes no messages, by why: hand (paused by an operator), failures (its breaker opened on transient failures), dependency:<name> (on a failing health check) or shared (another process\'s breaker opened, followed through the store); absent while it consumes.'),
  breakerOpen: m('application', 'gauge', 'warren_consumer_breaker_open_seconds', ['consumer'], 'Time the consumer\'s breaker has been open in all since the consumer started, the current opening included (consumers with a breaker only).'),
  breakerProbes: m('application', 'counter', 'warren_consumer_breaker_probes_total', ['consumer', 'result'], 'Messages a half-open breaker let through, by result: success (it closed), failure (it stays open), neutral (a permanent error or bad payload: no verdict), empty (no message to take), lost (its channel closed).'),
  // --- from the application: publisher and connections ---------------------------------
  publishes: m('application', 'counter', 'warren_publishes_total', ['kind', 'outcome'], 'Every publish warren makes, by kind (publish: the application\'s; outbox, retry-table, retry-table-park: rows the relay sent; retry, park, put-back: a consumer\'s copies; replay) and outcome: confirmed, returned (unroutable), nacked, timed_out (no confirm in time), not_confirmed (the channel closed first), not_sent (never written: the connection was blocked, its socket full or no channel open until the deadline, or the publisher closed first).'),
  confirmDuration: m('application', 'histogram', 'warren_publish_confirm_duration_seconds', ['kind'], 'Time from a publish to the broker\'s confirm, for confirmed publishes, by kind.'),
  reconnects: m('application', 'counter', 'warren_connection_reconnects_total', ['connection'], 'Connections made again after a loss (consume or publish connection).'),
  connectionUp: m('application', 'gauge', 'warren_connection_up', ['connection'], '1 while the connection is up and set up, 0 while it is not.'),
  // --- from the application's store: outbox and retry table ----------------------------
  outboxPending: m('store', 'gauge', 'warren_outbox_pending', ['store'], 'Outbox rows waiting for the relay (not sent, not flagged).'),
  outboxOldestAge: m('store', 'gauge', 'warren_outbox_oldest_pending_age_seconds', ['store'], 'Age of the oldest pending outbox row; 0 when none is pending.'),
  outboxFlagged: m('store', 'gauge', 'warren_outbox_flagged', ['store'], 'Outbox rows flagged as unpublishable (unroutable); they wait for a person.'),
  retryRows: m('store', 'gauge', 'warren_retry_table_rows', ['store', 'dependency'], 'Rows in the retry table.'),
  retryDue: m('store', 'gauge', 'warren_retry_table_due', ['store', 'dependency'], 'Unpaused rows whose next attempt has come: what the scheduler should be sending.'),
  retryPaused: m('store', 'gauge', 'warren_retry_table_paused', ['store', 'dependency'], 'Paused rows.'),
  retryUntimed: m('store', 'gauge', 'warren_retry_table_waiting_untimed', ['store'], 'Unpaused rows with no next attempt: they wait for a person.'),
  retryOldestDue: m('store', 'gauge', 'warren_retry_table_oldest_due_age_seconds', ['store'], 'How long the oldest due row has been due; 0 when none is. Growing: no scheduler drains.'),
  storeUp: m('store', 'gauge', 'warren_store_up', ['store'], '1 when the last reading of the store\'s figures succeeded, 0 when the database did not answer.'),
  schedulerMoved: m('application', 'counter', 'warren_retry_scheduler_moved_total', ['scheduler'], 'Retry-table rows a scheduler sent back to their consumer.'),
  schedulerFailures: m('application', 'counter', 'warren_retry_scheduler_failures_total', ['scheduler'], 'Scheduler passes that failed (the database was unavailable).'),
  dependencyHealthy: m('application', 'gauge', 'warren_dependency_healthy', ['dependency'], '1 when the dependency\'s last health check passed, 0 when it failed (absent before the first check).'),
  dependencyPaused: m('application', 'gauge', 'warren_dependency_paused', ['dependency'], '1 while a health check holds the dependency\'s rows paused.'),
  // --- from the failure archive, read on scrape -----------------------------------------
  archiveOpen: m('store', 'gauge', 'warren_archive_open_failures', ['consumer'], 'Archived failures still open: not replayed, purged or resolved. With an archive, the parked queue drains into it: this, plus the parked queue\'s depth, is what waits for a person.'),
  archiveRows: m('store', 'gauge', 'warren_archive_rows', ['consumer'], 'Rows in the archive, of every state (open, replayed, resolved).'),
  archiveOldest: m('store', 'gauge', 'warren_archive_oldest_seconds', ['consumer'], 'Age of the oldest row of the archive (its failure time), of any state; 0 when there is none. What retention keeps.'),
  archiveOldestOpen: m('store', 'gauge', 'warren_archive_oldest_open_seconds', ['consumer'], 'Age of the oldest open failure; 0 when none is open.'),
  archiveBehind: m('application', 'gauge', 'warren_archive_behind', ['consumer'], '1 while the ingester of this process is behind (the database does not take batches; the parked queue keeps the messages), 0 while it keeps up.'),
  archiveHeld: m('application', 'gauge', 'warren_archive_ingest_held', ['consumer'], 'Parked messages the ingester of this process holds, read and not yet stored.'),
  archiveUp: m('store', 'gauge', 'warren_archive_up', [], '1 when the last reading of the archive\'s counts succeeded, 0 when the database did not answer.'),
  archiveReadDuration: m('store', 'gauge', 'warren_archive_read_duration_seconds', [], 'How long the last reading of the archive\'s counts took (one query over the per-group counts, not the rows).'),
  // --- from the broker, read on scrape --------------------------------------------------
  queueReady: m('broker', 'gauge', 'warren_queue_messages_ready', ['consumer', 'role', 'queue'], 'Messages ready in the queue; role is work, retry or parked.'),
  queueUnacked: m('broker', 'gauge', 'warren_queue_messages_unacked', ['consumer', 'role', 'queue'], 'Messages delivered and not yet acknowledged (management API only).'),
  queueConsumers: m('broker', 'gauge', 'warren_queue_consumers', ['consumer', 'role', 'queue'], 'Consumers attached to the queue.'),
  queueRedelivered: m('broker', 'counter', 'warren_queue_redelivered_total', ['consumer', 'role', 'queue'], 'Redeliveries from a work or retry queue, as the broker counts them (management API only); rate() gives the redelivery rate. Not for parked queues, whose redeliveries are walks reading them.'),
  queuePublished: m('broker', 'counter', 'warren_queue_published_total', ['consumer', 'role', 'queue'], 'Messages published into the queue, as the broker counts them (management API only); rate() gives the inflow.'),
  queueExists: m('broker', 'gauge', 'warren_queue_exists', ['consumer', 'role', 'queue'], '1 when the declared queue exists, 0 when it does not.'),
  brokerUp: m('broker', 'gauge', 'warren_broker_up', ['source'], '1 for the source the last reading of the broker came from (management, or amqp when the management API did not answer), 0 for a source tried that did not answer; amqp has no series while the management API answers (it is not read then).'),
  brokerReadDuration: m('broker', 'gauge', 'warren_broker_read_duration_seconds', [], 'How long the last reading of the broker\'s queue figures took.'),
} as const satisfies Record<string, MetricSpec>;

/** Every metric, as a list. */
export const ALL_METRICS: readonly MetricSpec[] = Object.values(METRICS);
