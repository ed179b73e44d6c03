/**
 * The retry orchestrator and the pure pieces it decides with.
 *
 * @module
 */

export type { ContinuationRecord } from './continuation/continuation.js'
export type { ContinueAfterCutOptions } from './continuation/continuation-policy.js'
export type {
  AttemptFailure,
  BaseFailureReason,
  ConnectionErrorVerdict,
  FailureReason,
  FailureVerdict,
} from './decisions/classify.js'
export type { ContextOverflow, ContextWindowFitOptions } from './decisions/context-window.js'
export { fitContextWindow } from './decisions/context-window.js'
export { giveUpResponse } from './relay/give-up.js'
export type {
  AdjustRequestContext,
  AttemptContext,
  AttemptContextBase,
  AttemptFunction,
  AttemptRecord,
  AttemptRequest,
  BackoffOptions,
  CallerCredentialsAttemptFunction,
  CallerCredentialsContext,
  Credentials,
  LeasedKey,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayPolicy,
  RelayRequestOptions,
  RetryOnContext,
  Route,
  UpstreamHttpError,
} from './relay/relay.js'
export { relay } from './relay/relay.js'
export type { FetchFunction, ResilientFetchOptions } from './relay/resilient-fetch.js'
export { createResilientFetch } from './relay/resilient-fetch.js'
export type {
  ClientBodyCheck,
  ClientRequestRefusal,
  ClientRequestRefusalReason,
} from './request/client-refusal.js'
export { isFirstPartyApi } from './request/correlation.js'
export { fetchAttempt } from './request/fetch-attempt.js'
export type {
  AttemptRequestContext,
  ClientHeaders,
  ReadyAttempt,
  ReadyAttemptOptions,
} from './request/ready-attempt.js'
export type {
  ClientRequestRead,
  ReadClientRequestOptions,
  ReadRequestBodyOptions,
} from './request/request-body.js'
export { readClientRequest, readRequestBody } from './request/request-body.js'
export type {
  AdaptiveHedgeOptions,
  Hedging,
  HedgingOptions,
  HedgingSnapshot,
  NormalizedHedging,
} from './route/hedge.js'
export { createHedging } from './route/hedge.js'
export type {
  AttemptResultName,
  HedgeReport,
  HedgeSkipReason,
  RelayFailureReason,
  RelayResult,
  RequestFacts,
} from './shared/outcome.js'
