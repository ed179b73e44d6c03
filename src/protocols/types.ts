/**
 * The adapter seam: what a frame *is* in one wire protocol, and the frames the library
 * writes itself in that protocol.
 *
 * @module
 */

import type { SseFrame } from '../sse/frame.js'

/**
 * Why an answer ended, normalised across protocols.
 *
 * @group Protocols
 */
export type TerminalReason =
  | 'stop'
  | 'length'
  | 'tool_use'
  | 'content_filter'
  | 'incomplete'
  | 'error'
  | 'other'

/**
 * A frame that ends the answer.
 *
 * @group Protocols
 */
export interface TerminalInfo {
  /** The normalised reason; `null` for a bare end marker such as Chat's `[DONE]`. */
  readonly reason: TerminalReason | null
  /** The protocol's own word (`end_turn`, `tool_calls`, `SAFETY`…), when it said one. */
  readonly raw: string | null
}

/**
 * An error reported by the upstream inside the stream (or a frame that could not be read).
 *
 * @group Protocols
 */
export interface UpstreamErrorInfo {
  /** The upstream's error type (`overloaded_error`, `server_error`, `UNAVAILABLE`…), or `malformed_frame`. */
  readonly type: string
  /** A sanitised message: HTML reduced to its title, length bounded, secrets redacted. */
  readonly message: string
  /** A machine code when the upstream gave one (`context_length_exceeded`), or `MALFORMED_FRAME`. */
  readonly code: string | null
  /** An HTTP-like status when the upstream gave one (Gemini's `error.code`). */
  readonly status: number | null
  /** Whether another attempt may succeed (overload, rate limit, 5xx-like); `false` for invalid requests. */
  readonly retryable: boolean
}

/**
 * Block bookkeeping some protocols need to end a stream cleanly (Anthropic content blocks).
 *
 * @group Protocols
 */
export interface BlockEdge {
  readonly index: number
  readonly edge: 'open' | 'close'
}

/**
 * Output the client can see.
 *
 * @group Protocols
 */
export interface OutputVerdict {
  /** `text` answer text, `tool` tool/function call data, `reasoning` thinking, `refusal` a refusal. */
  readonly kind: 'text' | 'tool' | 'reasoning' | 'refusal'
  /** The delta's text (for `tool`, the name or argument fragment). */
  readonly text: string
  /** Set when the same frame also ends the answer (Gemini's last chunk). */
  readonly terminal?: TerminalInfo
  readonly block?: BlockEdge
  /** Token usage the frame reported (Gemini reports it on output chunks). */
  readonly usage?: TokenUsage
}

/**
 * Bookkeeping with nothing for the client to see (role-only chunk, `message_start`, usage).
 *
 * @group Protocols
 */
export interface MetaVerdict {
  readonly kind: 'meta'
  readonly block?: BlockEdge
  /** Token usage the frame reported (OpenAI Chat's usage chunk, Anthropic's `message_start`). */
  readonly usage?: TokenUsage
}

/**
 * A keep-alive: an SSE comment, an empty frame, Anthropic `ping`.
 *
 * @group Protocols
 */
export interface KeepaliveVerdict {
  readonly kind: 'keepalive'
}

/**
 * A frame that ends the answer without output of its own.
 *
 * @group Protocols
 */
export interface TerminalVerdict {
  readonly kind: 'terminal'
  readonly terminal: TerminalInfo
  readonly block?: BlockEdge
  /** Token usage the frame reported (Responses' `response.completed`, Anthropic's `message_delta`). */
  readonly usage?: TokenUsage
}

/**
 * An error frame, or a frame that could not be read (`code: 'MALFORMED_FRAME'`).
 *
 * @group Protocols
 */
export interface ErrorVerdict {
  readonly kind: 'error'
  readonly error: UpstreamErrorInfo
  /** Token usage the same frame reported (OpenRouter's error chunk after a finish carries the final usage). */
  readonly usage?: TokenUsage
}

/**
 * What one frame is. A discriminated union on `kind`.
 *
 * @group Protocols
 */
export type FrameVerdict =
  | OutputVerdict
  | MetaVerdict
  | KeepaliveVerdict
  | TerminalVerdict
  | ErrorVerdict

/**
 * A request as the relay may rewrite it: where it goes and its JSON body.
 *
 * @group Protocols
 */
export interface UpstreamRequest {
  /** The URL, when the host gave one. */
  readonly url: string | undefined
  readonly body: Readonly<Record<string, unknown>>
}

/**
 * The bounds an adapter's {@link StreamAdapter.fitOutputBudget} must respect.
 *
 * @group Protocols
 */
export interface OutputBudgetLimits {
  /** The smallest answer budget worth retrying with (after any thinking budget). */
  readonly floorTokens: number
  /** The smallest thinking budget worth keeping when thinking must shrink to fit. */
  readonly minThinkingTokens: number
}

/**
 * An error to render as the protocol's own error frame.
 *
 * @group Protocols
 */
export interface RenderableError {
  /** The error type to report (`overloaded_error`, `upstream_error`, `timeout`…). */
  readonly type: string
  /** The message; it is sanitised again before it is written. */
  readonly message: string
  /** A machine code, if any. */
  readonly code?: string | null | undefined
  /** An HTTP-like status, if any (Gemini puts one in its error object). */
  readonly status?: number | null | undefined
}

/**
 * What renderers may read of a stream's tracked state.
 *
 * @group Protocols
 */
export interface RenderState {
  /** Frames seen so far (Responses uses it as the next `sequence_number`). */
  readonly frames: number
  /** The `data` of the first data frame (ids and model names are taken from it). */
  readonly firstData: string | undefined
  /** Content block indexes opened and not yet closed, in opening order. */
  readonly openBlocks: readonly number[]
  /** Highest block index seen, or -1. */
  readonly lastBlockIndex: number
  /** Frames of each output kind seen so far. */
  readonly counts: {
    readonly text: number
    readonly tool: number
    readonly reasoning: number
    readonly refusal: number
  }
  /** Reasoning text collected so far (bounded). */
  readonly reasoningText: string
  /** Visible text collected so far (bounded; empty unless the tracker keeps it). */
  readonly visibleText: string
}

/**
 * One wire protocol. Implement it for an upstream the library does not ship; check it with
 * `checkAdapter` from `stream-boundary/testing`.
 *
 * @group Protocols
 */
export interface StreamAdapter {
  /** A short stable name (`openai-chat`). */
  readonly name: string
  /**
   * Tracker options this protocol needs (under the host's own): Responses keeps visible text,
   * because its synthesized stop must repeat the answer.
   */
  readonly trackerDefaults?: {
    readonly keepReasoningChars?: number
    readonly keepTextChars?: number
    readonly keepFirstDataChars?: number
  }
  /**
   * Optional: `true` when the protocol sends bytes while a model thinks before its first
   * output (Anthropic's `ping` events; OpenAI Responses' keep-alive events every 30 s), so a
   * stream silent for long before output is dead: the peek's `silenceTimeoutMs` is then on
   * by default. Leave it out for a protocol that may send nothing while a model thinks.
   */
  readonly sendsWhileThinking?: boolean
  /** Says what a frame is. Never throws: malformed input is an `error` verdict. */
  inspect(frame: SseFrame): FrameVerdict
  /**
   * Optional, for speed: `true` when cheap checks on the raw bytes show the frame is an
   * ordinary output delta that neither ends the stream nor reports an error. Consulted only
   * after content was committed and when no text is kept, to skip decoding and parsing.
   * Return `false` whenever unsure. `frame` may be a view the pump points at the next frame
   * afterwards: do not keep it.
   */
  quickOutput?(frame: SseFrame): boolean
  /**
   * Optional: `true` for a frame the protocol's official client skips when it reads a stream
   * (Anthropic's SDK acts only on frames with a known event name), so a judge of what a
   * client experienced (`stream-boundary chaos`) reads the stream as that client does.
   * Without it, every frame with data counts.
   */
  clientIgnores?(frame: SseFrame): boolean
  /**
   * Optional: `true` for the frame at which the protocol's official client stops reading
   * events: the `openai` SDK ends its stream at data starting with `[DONE]` (Chat and
   * Responses alike) and ignores every byte after it. The relay writes nothing after that
   * frame, and the chaos judge reads no further. Without it, a stream ends at its body's end.
   * On its hot path the relay asks it only of frames `inspect` calls `terminal` or `error` (an
   * output delta is never decoded for it): an end marker must be one of those.
   */
  clientEndsAt?(frame: SseFrame): boolean
  /** An honest terminal error frame, written after commit. */
  renderError(error: RenderableError, state?: RenderState): Uint8Array
  /**
   * The JSON body of a non-streaming error response in this protocol (a failure before
   * anything was sent). Optional: a generic `{"error":{…}}` body is used without it.
   */
  renderErrorBody?(error: RenderableError): string
  /**
   * The same request without streaming (for the non-streaming fallback): `stream: false`, or
   * Gemini's `:generateContent` instead of `:streamGenerateContent`.
   */
  nonStreamingRequest?(request: UpstreamRequest): UpstreamRequest
  /**
   * The protocol's own stream for a complete non-streaming answer (the parsed JSON body), so a
   * client that asked for a stream still gets one.
   */
  renderFromMessage?(message: unknown): Uint8Array
  /**
   * Optional: the token usage a complete non-streaming answer (the parsed JSON body) reports.
   * In a stream, usage comes on the verdicts (`usage` on `meta`, `terminal` and output
   * verdicts). Without it, whole answers report no usage.
   */
  usageOf?(message: unknown): TokenUsage | undefined
  /**
   * The header that carries an API key in this protocol (`['authorization', 'Bearer …']`,
   * `['x-api-key', …]`). Without it, `createResilientFetch` refuses a `pool` for this adapter
   * with a `TypeError` at creation (when `createResilientFetch(...)` is called, before any
   * request): no header is guessed.
   */
  credentialHeader?(secret: string): readonly [name: string, value: string]
  /**
   * Headers every request in this protocol needs besides the credential, sent by the ready
   * attempts (`fetchAttempt`, `nodeHttpAttempt`) unless the client's forwarded headers set
   * them: Anthropic's `anthropic-version`.
   */
  readonly requestHeaders?: Readonly<Record<string, string>>
  /**
   * Optional: why a parsed client request body is not a request of this protocol the relay
   * can send (`model` missing or not a string where the body names it), or `undefined` when it
   * is. `readClientRequest` answers such a request `400` before any upstream attempt. The
   * checks every protocol shares (a JSON object, `stream` absent or a boolean) come first.
   */
  invalidRequest?(body: Readonly<Record<string, unknown>>): string | undefined
  /**
   * Whether a request URL is this protocol's endpoint (`/chat/completions`,
   * `:streamGenerateContent`…). `adapterForUrl` asks it; an adapter without it is never
   * picked from a URL.
   */
  matchesUrl?(url: URL): boolean
  /**
   * Whether a request (its URL and body text) asks for a stream. Without it, a request streams
   * when its JSON body has `"stream": true`.
   */
  isStreamingRequest?(url: URL, body: string | undefined): boolean
  /**
   * The request with its output budget lowered to at most `budgetTokens` (set when absent),
   * or `undefined` when it cannot fit within `limits`. `fitContextWindow` calls it; without
   * it no request is adjusted and the upstream's refusal stands.
   */
  fitOutputBudget?(
    request: UpstreamRequest,
    budgetTokens: number,
    limits: OutputBudgetLimits,
  ): UpstreamRequest | undefined
  /**
   * Optional, and only where the protocol lets a request continue a partial answer (a
   * prefilled final assistant message): the request that asks for the rest of an answer cut
   * after `received`, or `null` when that is not sound for this request (Anthropic with
   * extended thinking). With {@link StreamAdapter.spliceContinuation} it turns on the relay's
   * `continueAfterCut`; without it a cut always ends with the honest error.
   */
  buildContinuation?(
    request: UpstreamRequest,
    received: ContinuationReceived,
  ): UpstreamRequest | null
  /**
   * Optional, with {@link StreamAdapter.buildContinuation}: a fresh splice for one
   * continuation stream, given what the client received and the client's stream state (its
   * ids and open blocks). It must add no character the model did not write after `received`
   * and drop none (guarantee 20 in docs/guarantees.md).
   */
  spliceContinuation?(received: ContinuationReceived, client: RenderState): ContinuationSplice
  /** A clean end for a stream that had output but lost its terminal event. */
  renderStop(state: RenderState): Uint8Array
  /** The collected reasoning as visible text, for the thinking-only fallback (no end frames). */
  renderReasoningAsText(state: RenderState): Uint8Array
}

/**
 * Tokens an upstream said an answer used. Every field is what the protocol reported, when it
 * reported it: nothing is estimated. `inputTokens` includes cached input and `outputTokens`
 * includes reasoning in every protocol.
 *
 * One rule merges a stream's reports: **the later report wins, field by field**, even when
 * its count is lower; a field it leaves out keeps its earlier value. Per protocol:
 *
 * - OpenAI Chat Completions and compatibles: `usage`, or Groq's `x_groq.usage` when `usage` is
 *   absent. `outputTokens` is `completion_tokens` (OpenAI's convention: it includes
 *   reasoning), plus `completion_tokens_details.reasoning_tokens` only when the report's own
 *   `total_tokens` says reasoning was left out (xAI: 12 prompt + 1 completion + 290 reasoning
 *   = 303 total gives 291).
 * - OpenAI Responses: the `usage` of `response.completed` / `response.incomplete`.
 * - Anthropic Messages: `message_start`'s usage, replaced field by field by `message_delta`'s
 *   (the final, cumulative report). `inputTokens` adds the cache reads and writes to
 *   `input_tokens` (a `message_delta` that leaves the cache counts out keeps the earlier ones
 *   in the sum). When the report has `iterations` (compaction), `inputTokens` and
 *   `outputTokens` are the sums over the iterations, what is billed (a 60385/522 compaction
 *   step and a 612/2819 message give 60997/3341), less any iteration that names a `model` of
 *   its own (an advisor's, billed as that model); `output_tokens_details.thinking_tokens` is
 *   `reasoningTokens`.
 * - Gemini: each chunk's `usageMetadata` is a snapshot, the last one wins. `inputTokens` is
 *   `promptTokenCount` plus `toolUsePromptTokenCount`; `outputTokens` is
 *   `candidatesTokenCount` plus `thoughtsTokenCount` (either may be absent).
 *
 * @group Peek and classify
 */
export interface TokenUsage {
  /** Input (prompt) tokens, cached ones included (and, for Gemini, the built-in tools' prompt). */
  readonly inputTokens?: number
  /** Output (completion) tokens, reasoning included. */
  readonly outputTokens?: number
  /** Input tokens read from the provider's prompt cache. */
  readonly cachedInputTokens?: number
  /** Input tokens written to the provider's prompt cache (Anthropic). */
  readonly cacheCreationInputTokens?: number
  /** Output tokens spent on reasoning, when the protocol says. */
  readonly reasoningTokens?: number
}

/**
 * What the client already received of the answer when the upstream was cut: the adapter
 * builds the continuation request from it.
 *
 * @group Protocols
 */
export interface ContinuationReceived {
  /** Every character of answer text the client got, in order (its open text block last). */
  readonly text: string
}

/**
 * Turns the frames of one continuation stream into frames of the client's stream: the
 * continuation's preamble is dropped, its deltas continue the client's open block with the
 * client's indices and ids, and its terminal ends the client's message. Made once per
 * continuation by {@link StreamAdapter.spliceContinuation}; it may keep state.
 *
 * @group Protocols
 */
export type ContinuationSplice = (frame: SseFrame) => readonly SseFrame[]
