/**
 * `stream-boundary`: make LLM streaming reliable. Retry inside the window before the first
 * byte a client can see, commit once, and end honestly in the client's own protocol. Web
 * standards only: it runs on Node, Bun, Deno and Cloudflare Workers.
 *
 * Where to start:
 *
 * - a gateway route: {@link relay}, with {@link webSink} (or `nodeSink` from
 *   `stream-boundary/node`) and a key pool from {@link createMemoryKeyPool}; built once per
 *   endpoint with {@link createRelay};
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
// The downstream side: the commit gate, the Web sink, the post-commit pump.
export type {
  CommitGate,
  CommitGateOptions,
  DeliverOptions,
  DeliverOutcome,
  DownstreamOptions,
  DownstreamSink,
  DownstreamTransform,
  DownstreamTransformContext,
  ForwardHeadersPolicy,
  FrameTranslator,
  GateState,
  PumpEnd,
  PumpErrorCause,
  PumpOptions,
  PumpOutcome,
  PumpPolicy,
  ResponseTranslator,
  StallStats,
  StreamTranslator,
  TranslatorContext,
  WebSink,
  WebSinkOptions,
} from './commit/index.js'
export {
  createCommitGate,
  deliver,
  failBeforeContent,
  pump,
  webSink,
} from './commit/index.js'
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
export type {
  AcquireOptions,
  AcquireResult,
  KeyHeadroom,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeySelection,
  KeyStateEvent,
  KeyStateSnapshot,
  KeyStats,
  MemoryKeyPoolOptions,
  PoolKey,
} from './key-pool/index.js'
export { createMemoryKeyPool } from './key-pool/index.js'
// The retry window: read until the first visible output, commit nothing before it.
export type { CommitOn, PeekOptions, PeekOutcome } from './peek/index.js'
export { peekFirstOutput } from './peek/index.js'
export type { ResponseIdentity } from './protocols/identity.js'
// Protocol adapters, and what an adapter author needs to write one.
// Continuing after a cut (`policy.continueAfterCut`, guarantee 20 in docs/guarantees.md): the adapter seam, the
// OpenAI-compatible dialects, the policy's options and what the outcome records.
export type {
  BlockEdge,
  ContinuationReceived,
  ContinuationSplice,
  ErrorVerdict,
  FrameVerdict,
  KeepaliveVerdict,
  MetaVerdict,
  OpenAIChatContinuation,
  OpenAIChatOptions,
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
} from './protocols/index.js'
export {
  adapterForUrl,
  anthropicMessages,
  geminiGenerateContent,
  openaiChat,
  openaiChatWith,
  openaiResponses,
} from './protocols/index.js'
// Retrying before commit: the orchestrator, the fetch wrapper, the decisions they make.
export type {
  AdaptiveHedgeOptions,
  AdjustRequestContext,
  AttemptContext,
  AttemptContextBase,
  AttemptFailure,
  AttemptFunction,
  AttemptRecord,
  AttemptRequest,
  AttemptRequestContext,
  AttemptResultName,
  BackoffOptions,
  BaseFailureReason,
  CallerCredentialsAttemptFunction,
  CallerCredentialsContext,
  ClientBodyCheck,
  ClientHeaders,
  ClientRequestRead,
  ClientRequestRefusal,
  ClientRequestRefusalReason,
  ConnectionErrorVerdict,
  ContextOverflow,
  ContextWindowFitOptions,
  ContinuationRecord,
  ContinueAfterCutOptions,
  Credentials,
  FailureReason,
  FailureVerdict,
  FetchFunction,
  HedgeReport,
  HedgeSkipReason,
  Hedging,
  HedgingOptions,
  HedgingSnapshot,
  LeasedKey,
  NormalizedHedging,
  ReadClientRequestOptions,
  ReadRequestBodyOptions,
  ReadyAttempt,
  ReadyAttemptOptions,
  RelayFailureReason,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayPolicy,
  RelayRequestOptions,
  RelayResult,
  RequestFacts,
  ResilientFetchOptions,
  RetryOnContext,
  Route,
  UpstreamHttpError,
} from './retry/index.js'
export {
  createHedging,
  createResilientFetch,
  fetchAttempt,
  fitContextWindow,
  giveUpResponse,
  isFirstPartyApi,
  readClientRequest,
  readRequestBody,
  relay,
} from './retry/index.js'
// A relay built once per endpoint: options checked once, then called per request.
export type {
  CompiledRelay,
  CreateRelayOptions,
  RelayCallOptions,
} from './retry/relay/create-relay.js'
export { createRelay } from './retry/relay/create-relay.js'
// Reading SSE frames: whole frames, their exact bytes, fields parsed on first access.
export type {
  FrameReader,
  FrameReaderOptions,
  FrameSource,
  NextFrameOptions,
  SseFields,
  SseFrame,
} from './sse/index.js'
export { createFrameReader } from './sse/index.js'
