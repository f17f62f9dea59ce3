export { Warren, type WarrenArchiveOptions, type WarrenOptions } from './warren.js';
export {
  defineTopology,
  TOPOLOGY_DEFAULTS,
  type Topology,
  type TopologyOptions,
  type ConsumerDeclaration,
  type ConsumerTopology,
  type RetryOptions,
  type InQueueRetryOptions,
  type InQueueRetry,
  type QueueType,
  type ExchangeType,
  type ExchangeDeclaration,
  type ExchangeTopology,
  type BindingDeclaration,
  type QueueBinding,
  type ArgumentValue,
} from './topology/declaration.js';
export { hasInQueueRetry, type BrokerIdentity } from './topology/broker-features.js';
export { topologySpec, consumerQueues, type TopologySpec, type QueueSpec, type ExchangeSpec, type BindingSpec, type QueueArguments, type BrokerBinding } from './topology/plan.js';
export { declareTopology, planTopology, verifyTopology, type TopologyPlan, type PlanEntry } from './topology/apply.js';
export { BrokerConnection, backoffDelay, redactUrl, type BrokerNode, type ConnectionOptions, type ReadyHook, type TlsOptions } from './connection/index.js';
export { Publisher, PUBLISH_KINDS, type PublisherOptions, type PublishReceipt, type OutgoingMessage, type PublishKind, type PublishObserver } from './publish/publisher.js';
export { stampMessage, type PublishOptions, type StampedMessage } from './publish/stamp.js';
export { uuidv7 } from './publish/message-id.js';
export { Consumer, type PauseOptions } from './consume/consumer.js';
export { BREAKER_DEFAULTS, CONTROL_DEFAULTS, verdictOf, type BreakerOptions, type ConsumerControl, type ConsumerPauseRow, type ControlOptions, type DependencyHealth, type FailureRateOptions, type HandPause, type IntakeState, type PauseCause, type ProbeResult, type BreakerVerdict, SHARE_DEFAULTS, type BreakerShare, type BreakerStateRow } from './breaker/index.js';
export { decide, CrashLoopError, type Decision, type DecisionInput, type DecisionNote, type Happening, type InvalidReason } from './consume/contract.js';
export { copyHeaders, minimalHeaders, originHeaders, type DeliveryFields, type MoveDecision } from './consume/copy-headers.js';
export type { DeliveryContext, TransactionContext } from './consume/context.js';
export type { ConsumerOptions, Handler, MessageContext, IdempotencyGuard, Outcome, ConsumerStats } from './consume/types.js';
export type { StandardSchemaV1, StandardResult, StandardIssue } from './consume/schema.js';
export type { Codec, Decoder } from './consume/decode.js';
export type { MessageIdSource } from './consume/message-id.js';
export { classifyFailure, type Classifier, type FailureKind } from './consume/classify.js';
export { ManagementClient, type ManagementOptions, type QueueInfo } from './management/client.js';
export { HEADER, MAX_ERROR_MESSAGE_CHARS, type ParkReason } from './headers.js';
export { describeFailure, failureFingerprint, type FailureInfo } from './park/failure.js';
export { channelSender, FAULT_EVENT_DEFAULTS, faultEvent, faultRoutingKey, publishFaultEvent, type FaultEvent, type FaultEventOptions, type FaultFacts, type ClosableFaultSender, type FaultReporting, type FaultSender, type FaultsTopology } from './park/fault-event.js';
export { readAttempts, countDeaths, type AttemptCount } from './retry/attempts.js';
export { decideRetry, parseDuration, formatDuration, retryQueueName, parkedQueueName, type Duration, type RetryDecision } from './retry/ladder.js';
export { consoleLogger, silentLogger, toLogger, pinoLogger, objectFirstLogger, isPino, isBunyan, type Logger, type ObjectFirstLogger } from './logger.js';
export * from './errors.js';
export * from './park/index.js';
export * from './audit/index.js';
export * from './store/index.js';
export * from './status/index.js';
export * from './retry-table/index.js';
export * from './archive/index.js';
export { healthOf, healthHandler, healthFetchHandler, healthReport, healthSource, storeHealth, relayHealth, schedulerHealth, type HealthReport, type HealthReason, type HealthSource, type HealthInput, type CheckableStore, type CheckOptions, type RelayHealthOptions, type HealthHandlerOptions } from './health/index.js';
