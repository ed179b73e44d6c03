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
 * the downstream side (commit gate, sinks, pump), key pools, hedging, and the errors. The
 * types only adapter authors and hosts that build their own loop name (an adapter's
 * verdicts, the commit gate's and the pump's own options and results, a key pool's leases)
 * are in `stream-boundary/advanced`.
 *
 * @module stream-boundary
 */

// The list below is the public API, name by name (test/types/exports.test.ts pins it): a
// name a module exports is not public until it is added here. Each name is exported from the
// module that declares it. What only adapter authors and hosts building their own loop use
// (the verdicts an adapter returns, the commit gate's and the pump's own types, the pool
// seam's lease types, the decisions' inputs) is in `stream-boundary/advanced` (advanced.ts).

// What a stream showed, and how it ended.
export type { EofClass } from './classify/index.js'
export { classifyEof, createStreamTracker } from './classify/index.js'
// The downstream side: the commit gate, the Web sink, the post-commit pump.
export { deliver } from './commit/deliver.js'
export { failBeforeContent } from './commit/endings.js'
export { createCommitGate } from './commit/gate.js'
export type { DownstreamSink } from './commit/gate-options.js'
export type { ForwardHeadersPolicy } from './commit/headers.js'
export { pump } from './commit/pump.js'
export type {
  DownstreamOptions,
  DownstreamTransform,
  DownstreamTransformContext,
  PumpEnd,
} from './commit/pump-policy.js'
export type { WebSink, WebSinkOptions } from './commit/web-sink.js'
export { webSink } from './commit/web-sink.js'
// Errors: one base class, a stable `code` each, and `isX()` guards that work across copies.
export type { ErrorCode, TimeoutKind } from './errors.js'
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
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateEvent,
  PoolKey,
} from './key-pool/types.js'
// The retry window: read until the first visible output, commit nothing before it.
export type { PeekOutcome } from './peek/index.js'
export { peekFirstOutput } from './peek/index.js'
// Protocol adapters: the four shipped, and the seam another protocol implements.
export { adapterForUrl } from './protocols/adapter-for-url.js'
export { anthropicMessages } from './protocols/anthropic-messages.js'
export { geminiGenerateContent } from './protocols/gemini.js'
export { openaiChat, openaiChatWith } from './protocols/openai-chat.js'
export type { OpenAIChatOptions } from './protocols/openai-chat-continuation.js'
export { openaiResponses } from './protocols/openai-responses.js'
export type { StreamAdapter, TokenUsage, UpstreamRequest } from './protocols/types.js'
// Retrying before commit: the orchestrator, the fetch wrapper, hedging, the attempt function
// and what a request reports.
export { fitContextWindow } from './retry/decisions/context-window.js'
export type {
  CompiledRelay,
  CreateRelayOptions,
  RelayCallOptions,
} from './retry/relay/create-relay.js'
export { createRelay } from './retry/relay/create-relay.js'
export { giveUpResponse } from './retry/relay/give-up.js'
export { relay } from './retry/relay/relay.js'
export type { FetchFunction, ResilientFetchOptions } from './retry/relay/resilient-fetch.js'
export { createResilientFetch } from './retry/relay/resilient-fetch.js'
export { fetchAttempt } from './retry/request/fetch-attempt.js'
export { readClientRequest, readRequestBody } from './retry/request/request-body.js'
export { createHedging } from './retry/route/hedge.js'
export type {
  AttemptContext,
  AttemptFunction,
  AttemptRequest,
  CallerCredentialsAttemptFunction,
  Credentials,
  Route,
} from './retry/shared/attempt-types.js'
export type { Hedging, HedgingOptions } from './retry/shared/hedging-types.js'
export type {
  AttemptRecord,
  RelayHooks,
  RelayOptions,
  RelayOutcome,
  RelayRequestOptions,
  RelayResult,
} from './retry/shared/outcome.js'
export type {
  BackoffOptions,
  ContextWindowFitOptions,
  ContinueAfterCutOptions,
  RelayPolicy,
} from './retry/shared/policy-types.js'
export type { FailureReason } from './retry/shared/verdict.js'
// Reading SSE frames: whole frames, their exact bytes, fields parsed on first access.
export type { SseFrame } from './sse/frame.js'
export type { FrameReader, FrameReaderOptions } from './sse/reader.js'
export { createFrameReader } from './sse/reader.js'
