/**
 * `stream-boundary`: make LLM streaming reliable. Retry inside the window before the first
 * byte a client can see, commit once, and end honestly in the client's own protocol. Web
 * standards only: it runs on Node, Bun, Deno and Cloudflare Workers.
 *
 * Where to start:
 *
 * - a gateway route: {@link relay}, with {@link webSink} (or `nodeSink` from
 *   `stream-boundary/node`) and a key pool from {@link createMemoryKeyPool};
 * - an app on the official `openai` or `@anthropic-ai/sdk` clients:
 *   {@link createResilientFetch}, passed as their `fetch`;
 * - another upstream protocol: implement {@link StreamAdapter} and test it with `checkAdapter`
 *   from `stream-boundary/testing`.
 *
 * The groups below are the pieces those are made of, each usable alone: reading SSE
 * {@link createFrameReader | frames}, protocol adapters, the peek before the first output,
 * the downstream side (commit gate, sinks, pump), key pools, hedging, and the errors.
 *
 * @module stream-boundary
 */

// The list below is the public API, name by name (test/types/exports.test.ts pins it): a
// name a module exports is not public until it is added here.

// What a stream showed, and how it ended.
export type {
  EofClass,
  StreamState,
  StreamTracker,
  StreamTrackerOptions,
} from './classify/index.js'
export {
  classifyEof,
  createStreamTracker,
} from './classify/index.js'
export type { DeliverOptions, DeliverOutcome } from './commit/deliver.js'
export { deliver } from './commit/deliver.js'
export { failBeforeContent } from './commit/endings.js'
export { createCommitGate } from './commit/gate.js'
export type {
  CommitGate,
  CommitGateOptions,
  DownstreamSink,
  GateState,
} from './commit/gate-options.js'
export type { ForwardHeadersPolicy } from './commit/headers.js'
export { pump } from './commit/pump.js'
export type {
  DownstreamOptions,
  DownstreamTransform,
  DownstreamTransformContext,
  PumpEnd,
  PumpErrorCause,
  PumpOptions,
  PumpOutcome,
  PumpPolicy,
  StallStats,
} from './commit/pump-policy.js'
export type {
  FrameTranslator,
  ResponseTranslator,
  StreamTranslator,
  TranslatorContext,
} from './commit/translator.js'
// The downstream side: the commit gate, the Web sink, the post-commit pump.
export type { WebSink, WebSinkOptions } from './commit/web-sink.js'
export { webSink } from './commit/web-sink.js'
// Errors: one base class, a stable `code` each, and `isX()` guards that work across copies.
export type { ErrorCode, RequestNotSentStep, TimeoutKind } from './errors.js'
export {
  DownstreamClosedError,
  FrameTooLargeError,
  HeadersSentError,
  isDownstreamClosedError,
  isFrameTooLargeError,
  isHeadersSentError,
  isPeekOverflowError,
  isReaderBusyError,
  isRequestBodyTooLargeError,
  isRequestNotSentError,
  isRetryAfterCommitError,
  isStreamBoundaryError,
  isStreamTimeoutError,
  isUpstreamReadError,
  isUserCodeError,
  PeekOverflowError,
  ReaderBusyError,
  RequestBodyTooLargeError,
  RequestNotSentError,
  RetryAfterCommitError,
  StreamBoundaryError,
  StreamTimeoutError,
  UpstreamReadError,
  UserCodeError,
} from './errors.js'
// Key pools: the seam and the in-memory default.
export type { MemoryKeyPoolOptions } from './key-pool/memory.js'
export { createMemoryKeyPool } from './key-pool/memory.js'
export type { KeySelection } from './key-pool/selection.js'
export type {
  AcquireOptions,
  AcquireResult,
  KeyHeadroom,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateEvent,
  KeyStateSnapshot,
  KeyStats,
  PoolKey,
} from './key-pool/types.js'
// The retry window: read until the first visible output, commit nothing before it.
export type { CommitOn, PeekOptions, PeekOutcome } from './peek/index.js'
export { peekFirstOutput } from './peek/index.js'
export { adapterForUrl } from './protocols/adapter-for-url.js'
export { anthropicMessages } from './protocols/anthropic-messages.js'
export { geminiGenerateContent } from './protocols/gemini.js'
export type { ResponseIdentity } from './protocols/identity.js'
export { openaiChat, openaiChatWith } from './protocols/openai-chat.js'
// Protocol adapters, and what an adapter author needs to write one.
// Continuing after a cut (`policy.continueAfterCut`, guarantee 20 in docs/guarantees.md): the adapter seam, the
// OpenAI-compatible dialects, the policy's options and what the outcome records.
export type {
  OpenAIChatContinuation,
  OpenAIChatOptions,
} from './protocols/openai-chat-continuation.js'
export { openaiResponses } from './protocols/openai-responses.js'
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
  StreamAdapter,
  TerminalInfo,
  TerminalReason,
  TerminalVerdict,
  TokenUsage,
  UpstreamErrorInfo,
  UpstreamRequest,
} from './protocols/types.js'
export type { ConnectionErrorVerdict } from './retry/decisions/connection-errors.js'
export type { ContextOverflow } from './retry/decisions/context-window.js'
export { fitContextWindow } from './retry/decisions/context-window.js'
export { giveUpResponse } from './retry/relay/give-up.js'
export { relay } from './retry/relay/relay.js'
// Retrying before commit: the orchestrator, the fetch wrapper, the decisions they make.
export type { FetchFunction, ResilientFetchOptions } from './retry/relay/resilient-fetch.js'
export { createResilientFetch } from './retry/relay/resilient-fetch.js'
export type {
  ClientBodyCheck,
  ClientRequestRefusal,
  ClientRequestRefusalReason,
} from './retry/request/client-refusal.js'
export { isFirstPartyApi } from './retry/request/correlation.js'
export { fetchAttempt } from './retry/request/fetch-attempt.js'
export type {
  AttemptRequestContext,
  ClientHeaders,
  ReadyAttempt,
  ReadyAttemptOptions,
} from './retry/request/ready-attempt.js'
export type {
  ClientRequestRead,
  ReadClientRequestOptions,
  ReadRequestBodyOptions,
} from './retry/request/request-body.js'
export { readClientRequest, readRequestBody } from './retry/request/request-body.js'
export { createHedging } from './retry/route/hedge.js'
export type {
  AttemptContext,
  AttemptContextBase,
  AttemptFunction,
  AttemptRequest,
  CallerCredentialsAttemptFunction,
  CallerCredentialsContext,
  Credentials,
  LeasedKey,
  Route,
  UpstreamHttpError,
} from './retry/shared/attempt-types.js'
export type { ContinuationRecord } from './retry/shared/continuation-types.js'
export type {
  AdaptiveHedgeOptions,
  Hedging,
  HedgingOptions,
  HedgingSnapshot,
  NormalizedHedging,
} from './retry/shared/hedging-types.js'
export type {
  AttemptRecord,
  AttemptResultName,
  HedgeReport,
  HedgeSkipReason,
  RelayFailureReason,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayRequestOptions,
  RelayResult,
  RequestFacts,
} from './retry/shared/outcome.js'
export type {
  AdjustRequestContext,
  BackoffOptions,
  ContextWindowFitOptions,
  ContinueAfterCutOptions,
  RelayPolicy,
  RetryOnContext,
} from './retry/shared/policy-types.js'
export type {
  AttemptFailure,
  BaseFailureReason,
  FailureReason,
  FailureVerdict,
} from './retry/shared/verdict.js'
// Reading SSE frames: whole frames, their exact bytes, fields parsed on first access.
export type { SseFields, SseFrame } from './sse/frame.js'
export type { FrameReader, FrameReaderOptions, NextFrameOptions } from './sse/reader.js'
export { createFrameReader } from './sse/reader.js'
export type { FrameSource } from './sse/sources.js'
