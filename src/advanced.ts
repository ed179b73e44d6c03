/**
 * `stream-boundary/advanced`: the pieces most users never import, kept off the root so the
 * root reads as the library's job. Every options object's defaults (to show, log or build
 * on), the helpers that sanitise and redact upstream text, and the pure decisions the relay
 * makes (how an attempt failed, what a connection error means, a `Retry-After`, a context
 * overflow), for hosts that build their own loop on the root's pieces. And the types only
 * adapter authors and such hosts name: the verdicts a
 * {@link "stream-boundary"!StreamAdapter | StreamAdapter} returns, the commit gate's, the
 * pump's and the peek's own options and results, a key pool's leases and stats (for a pool
 * of your own), and the records inside a relay's outcome.
 *
 * Every value here is stateless data or a pure function: using it beside the root entry
 * shares no state and cannot disagree with it. A type here describes values the root's
 * functions take or return; it is here only so the root stays short.
 *
 * @module stream-boundary/advanced
 */

// Listed by module: each options object's defaults (`…Defaults`), the redaction helpers
// (`protocols/sanitize.ts`), the relay's pure decisions and parsers, and the types of the
// adapter seam, the relay's own loop and a key pool's seam.
export type { StreamState, StreamTracker, StreamTrackerOptions } from './classify/index.js'
export { streamTrackerDefaults } from './classify/index.js'
export type { DeliverOptions, DeliverOutcome } from './commit/deliver.js'
export type { CommitGate, CommitGateOptions, GateState } from './commit/gate-options.js'
export { commitGateDefaults } from './commit/gate-options.js'
export { forwardableHeaders, forwardHeadersDefaults } from './commit/headers.js'
export type {
  PumpErrorCause,
  PumpOptions,
  PumpOutcome,
  PumpPolicy,
  StallStats,
} from './commit/pump-policy.js'
export { pumpDefaults } from './commit/pump-policy.js'
export type {
  FrameTranslator,
  ResponseTranslator,
  StreamTranslator,
  TranslatorContext,
} from './commit/translator.js'
export type { RequestNotSentStep } from './errors.js'
export { memoryKeyPoolDefaults } from './key-pool/memory.js'
export type {
  AcquireOptions,
  AcquireResult,
  KeyHeadroom,
  KeyLease,
  KeyStateSnapshot,
  KeyStats,
} from './key-pool/types.js'
export type { CommitOn, PeekOptions } from './peek/index.js'
export { peekDefaults } from './peek/index.js'
export { isRetryableErrorType } from './protocols/common.js'
export type { ResponseIdentity } from './protocols/identity.js'
export type { OpenAIChatContinuation } from './protocols/openai-chat-continuation.js'
export {
  maxMessageLength,
  redactSecrets,
  redactValues,
  sanitizeMessage,
} from './protocols/sanitize.js'
export type {
  BlockEdge,
  ContinuationReceived,
  ContinuationSplice,
  ErrorVerdict,
  FrameVerdict,
  KeepaliveVerdict,
  MetaVerdict,
  OutputBudgetLimits,
  OutputVerdict,
  RenderableError,
  RenderState,
  TerminalInfo,
  TerminalReason,
  TerminalVerdict,
  UpstreamErrorInfo,
} from './protocols/types.js'
export { continueAfterCutDefaults } from './retry/continuation/continuation-policy.js'
export { classifyAttemptFailure } from './retry/decisions/classify.js'
export type { ConnectionErrorVerdict } from './retry/decisions/connection-errors.js'
export { classifyConnectionError } from './retry/decisions/connection-errors.js'
export type { ContextOverflow } from './retry/decisions/context-window.js'
export { contextWindowFitDefaults, parseContextOverflow } from './retry/decisions/context-window.js'
export { parseRetryAfter } from './retry/decisions/rate-limit-headers.js'
export { relayDefaults } from './retry/relay/policy.js'
export { resilientFetchDefaults } from './retry/relay/resilient-fetch.js'
export type {
  ClientBodyCheck,
  ClientRequestRefusal,
  ClientRequestRefusalReason,
} from './retry/request/client-refusal.js'
export { checkClientBody, clientErrorBody } from './retry/request/client-request.js'
export { isFirstPartyApi } from './retry/request/correlation.js'
export type {
  AttemptRequestContext,
  ClientHeaders,
  ReadyAttempt,
  ReadyAttemptOptions,
} from './retry/request/ready-attempt.js'
export { readyAttemptDefaults } from './retry/request/ready-attempt.js'
export type {
  ClientRequestRead,
  ReadClientRequestOptions,
  ReadRequestBodyOptions,
} from './retry/request/request-body.js'
export { requestBodyDefaults } from './retry/request/request-body.js'
export { hedgingDefaults } from './retry/route/hedge.js'
export type {
  AttemptContextBase,
  CallerCredentialsContext,
  LeasedKey,
  UpstreamHttpError,
} from './retry/shared/attempt-types.js'
export type { ContinuationRecord } from './retry/shared/continuation-types.js'
export type {
  AdaptiveHedgeOptions,
  HedgingSnapshot,
  NormalizedHedging,
} from './retry/shared/hedging-types.js'
export type {
  AttemptResultName,
  HedgeReport,
  HedgeSkipReason,
  RelayFailureReason,
  RequestFacts,
} from './retry/shared/outcome.js'
export type { AdjustRequestContext, RetryOnContext } from './retry/shared/policy-types.js'
export type { AttemptFailure, BaseFailureReason, FailureVerdict } from './retry/shared/verdict.js'
export type { SseFields } from './sse/frame.js'
export type { NextFrameOptions } from './sse/reader.js'
export { frameReaderDefaults } from './sse/reader.js'
export type { FrameSource } from './sse/sources.js'
