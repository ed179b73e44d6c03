/**
 * The retry orchestrator and the pure pieces it decides with.
 *
 * @module
 */

export type { AttemptFailure, ConnectionErrorVerdict, FailureVerdict } from './classify.js'
export { classifyAttemptFailure, classifyConnectionError } from './classify.js'
export type { ContextOverflow, ContextWindowFitOptions } from './context-window.js'
export {
  contextWindowFitDefaults,
  fitContextWindow,
  parseContextOverflow,
} from './context-window.js'
export { parseRetryAfter } from './rate-limit-headers.js'
export type {
  AdjustRequestContext,
  AttemptContext,
  AttemptFunction,
  AttemptRecord,
  BackoffOptions,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayPolicy,
  Route,
} from './relay.js'
export { relay, relayDefaults } from './relay.js'
export type { FetchFunction, ResilientFetchOptions } from './resilient-fetch.js'
export { adapterForUrl, createResilientFetch } from './resilient-fetch.js'
