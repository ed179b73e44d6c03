/**
 * The retry orchestrator and the pure pieces it decides with.
 *
 * @module
 */

export type {
  AttemptFailure,
  BaseFailureReason,
  ConnectionErrorVerdict,
  FailureReason,
  FailureVerdict,
} from './classify.js'
export type { ClientBodyCheck } from './client-request.js'
export type { ContextOverflow, ContextWindowFitOptions } from './context-window.js'
export { fitContextWindow } from './context-window.js'
export type { ContinuationRecord } from './continuation.js'
export type { ContinueAfterCutOptions } from './continuation-policy.js'
export { isFirstPartyApi } from './correlation.js'
export { giveUpResponse } from './give-up.js'
export type {
  AdaptiveHedgeOptions,
  Hedging,
  HedgingOptions,
  HedgingSnapshot,
  NormalizedHedging,
} from './hedge.js'
export { createHedging } from './hedge.js'
export type {
  AttemptResultName,
  HedgeReport,
  HedgeSkipReason,
  RelayFailureReason,
  RequestFacts,
} from './outcome.js'
export type { ClientHeaders, ReadyAttempt, ReadyAttemptOptions } from './ready-attempt.js'
export { fetchAttempt } from './ready-attempt.js'
export type {
  AdjustRequestContext,
  AttemptContext,
  AttemptContextBase,
  AttemptFunction,
  AttemptRecord,
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
} from './relay.js'
export { relay } from './relay.js'
export type {
  ClientRequestRead,
  ReadClientRequestOptions,
  ReadRequestBodyOptions,
} from './request-body.js'
export { readClientRequest, readRequestBody } from './request-body.js'
export type { FetchFunction, ResilientFetchOptions } from './resilient-fetch.js'
export { createResilientFetch } from './resilient-fetch.js'
