/**
 * The types of `RelayPolicy`, of its nested options (`continueAfterCut`, `fitContextWindow`)
 * and of the policy once normalized: what every layer of the relay reads.
 * `relay/policy.ts` holds the defaults and the one `normalizeRelayPolicy`; each optional
 * feature's own defaults and check are in a file of their own beside it.
 *
 * @module
 */

import type { NormalizedGateOptions } from '../../commit/gate-options.js'
import type { ForwardHeadersPolicy } from '../../commit/headers.js'
import type {
  DownstreamOptions,
  NormalizedPumpPolicy,
  PumpPolicy,
} from '../../commit/pump-policy.js'
import type { NormalizedPeekOptions, PeekOptions } from '../../peek/index.js'
import type { RenderableError, UpstreamRequest } from '../../protocols/types.js'
import type { Route } from './attempt-types.js'
import type { HedgeState, Hedging } from './hedging-types.js'

/**
 * Exponential backoff with jitter, for retrying a key already tried in the request.
 *
 * @group Relay
 */
export interface BackoffOptions {
  /** @default 500 */
  readonly baseMs?: number
  /** @default 2 */
  readonly factor?: number
  /** @default 8_000 */
  readonly maxMs?: number
  /** Fraction of the delay added or removed at random. @default 0.25 */
  readonly jitter?: number
}

/**
 * What `adjustRequest` is told about a refused attempt.
 *
 * @group Retry decisions
 */
export interface AdjustRequestContext {
  readonly attemptNumber: number
  readonly route: string
  /** The refused attempt's HTTP status (`null` for an error frame in a stream). */
  readonly status: number | null
  /** The upstream's error, sanitised. */
  readonly error: RenderableError
  /** The request as it was sent. */
  readonly request: UpstreamRequest
}

/**
 * An upstream HTTP failure, as `retryOn` sees it.
 *
 * @group Relay
 */
export interface RetryOnContext {
  readonly status: number
  readonly headers: Headers
}

/**
 * How {@link relay} retries and ends.
 *
 * @group Relay
 */
export interface RelayPolicy extends PumpPolicy {
  /**
   * Attempts per route; `1` disables retrying.
   * @default 3
   */
  maxAttempts?: number
  /**
   * A total budget before commit, in milliseconds: no attempt starts, and no wait runs, past it,
   * so a client's own timeout is not outlived by silent retries.
   * @default undefined (no budget)
   */
  deadlineMs?: number | undefined
  /**
   * The longest the request waits for a key in one go: a cooling key's cooldown (a
   * `Retry-After`), or a busy key's release. A longer wait gives up with the answer that
   * says why (429 with `retry-after`, or 503 when every key is busy).
   * @default 60_000
   */
  maxWaitMs?: number
  /** Backoff before reusing a key already tried in this request; merged with its defaults. */
  backoff?: BackoffOptions
  /**
   * Peek options per attempt, merged with their defaults (setting one keeps the others).
   * Both clocks run from the moment the attempt is sent, so each bounds connecting and the
   * response headers too: `firstOutputTimeoutMs` alone bounds the whole pre-output phase.
   * For a non-streaming request `firstOutputTimeoutMs` bounds the whole answer (headers and
   * body) and `firstByteTimeoutMs` does not apply.
   * @default { firstByteTimeoutMs: 30_000, firstOutputTimeoutMs: 600_000 }
   */
  peek?: Omit<PeekOptions, 'signal' | 'tracker' | 'clockStartedAt'>
  /**
   * Decides which upstream HTTP failures are retried: a list of statuses, or a function
   * (returning `undefined` keeps the library's rule). Rate limits and auth failures still
   * teach the key pool what they mean.
   * @default undefined (the library's rule: 408, 409, 429, 5xx, 529 and 401/403 with another key)
   * @example { retryOn: [429, 502, 503] }
   */
  retryOn?: readonly number[] | ((failure: RetryOnContext) => boolean | undefined) | undefined
  /**
   * When the relay gives up after an upstream HTTP error, answer with that error as the
   * upstream sent it: its status, its body (bounded by `maxErrorBodyBytes`, secrets
   * redacted) and the headers that identify the request (`x-request-id`, `request-id`,
   * `retry-after`…). Failures that are the library's own (timeouts, every key busy or
   * cooling, stream faults before output) and a pool key's 401/403 (the gateway's
   * credential, not the client's) are always rendered in the protocol's shape. `false`
   * renders every failure in the protocol's shape, for gateways that normalise errors.
   * @default true
   */
  passThroughErrors?: boolean
  /** Routes tried in order after this request's own route is exhausted (model fallback). */
  routes?: readonly Route[]
  /**
   * Consecutive overload failures (429, 529, `overloaded_error`) after which the next route
   * is tried.
   * @default 3
   */
  overloadFallbackAfter?: number
  /**
   * `background` makes overload fail at once, without retries or another route, so
   * background traffic does not amplify a capacity incident.
   * @default 'interactive'
   */
  priority?: 'interactive' | 'background'
  /**
   * Send headers as soon as an upstream stream is validated; failures before content are then
   * written in-band. On by default when `peek.firstOutputTimeoutMs` is `Infinity` (nothing
   * bounds the wait for output, so the client is shown a live stream at once, as new-api
   * does); set `false` to keep the head until output even then.
   * @default false (true when `peek.firstOutputTimeoutMs` is `Infinity`)
   */
  earlyHeaders?: boolean
  /**
   * Keep-alive comment interval after headers. Where comments go (before content only, by
   * default) is `downstream.keepAlive`.
   * @default 15_000
   */
  keepAliveIntervalMs?: number
  /**
   * The client's side, when it differs from the upstream's: its protocol's adapter (renders
   * every frame and error body the library writes), a translator for upstream frames, and
   * where keep-alive comments are allowed. See `DownstreamOptions`.
   * @default { keepAlive: 'before-content' } (the upstream's protocol, frames as they came)
   * @example { downstream: { adapter: anthropicMessages, transform: openaiToAnthropic } }
   */
  downstream?: DownstreamOptions
  /** Headers added to the downstream response. */
  headers?: HeadersInit
  /**
   * Which upstream response headers reach the client (an allowlist): by default request ids
   * and processing time only; account identifiers never; per-key rate-limit headers only
   * with `{ rateLimit: true }`. See `ForwardHeadersPolicy`.
   * @default { allow: [request ids, processing time], rateLimit: false }
   */
  forwardHeaders?: ForwardHeadersPolicy
  /** The reader's frame bound. @default 1_048_576 */
  maxFrameBytes?: number
  /** How much of an upstream error body is read for its message. @default 65_536 */
  maxErrorBodyBytes?: number
  /**
   * Send a correlation id per attempt (`AttemptContext.requestId`, reported in outcomes and
   * hooks).
   * @default true
   */
  correlationIds?: boolean
  /**
   * Called when an attempt is refused for its request (a 4xx, a non-retryable error frame):
   * return a changed body to try again with it, or `undefined` to give up as usual. Needs
   * `request`.
   */
  adjustRequest?:
    | ((context: AdjustRequestContext) => Record<string, unknown> | undefined)
    | undefined
  /**
   * When input plus the output budget overflows the context window and the error says the
   * numbers, lower the budget to fit and retry once (`true`, or margin and floor). Needs
   * `request`.
   * @default false
   */
  fitContextWindow?: boolean | ContextWindowFitOptions
  /**
   * After a route's streaming attempts all failed before output (or at once on a 404/405 to the
   * streaming request), send one non-streaming request and turn its answer into the
   * protocol's stream. Needs `request` and an adapter with `nonStreamingRequest` and
   * `renderFromMessage` (all four shipped ones).
   * @default false
   */
  nonStreamingFallback?: boolean | { readonly timeoutMs?: number }
  /**
   * Hedged attempts: when the running attempt shows no output for a while, start one more on
   * another free key; the first to reach visible output answers and the others are
   * cancelled. Takes the shared state {@link createHedging} makes (one per gateway, so its
   * budget sees every request). Never for `priority: 'background'`, never without a pool.
   * @default undefined (off)
   * @example const hedging = createHedging({ afterMs: 'adaptive' }) // once
   * relay({ ..., policy: { hedge: hedging } })
   */
  hedge?: Hedging | undefined
  /**
   * Heal a cut after commit where the protocol allows a prefilled answer: when the upstream
   * stream is cut (EOF without its final event, a reset, the idle timeout) while the client's
   * answer is text only, ask for the rest (the original request with the received text as
   * the final assistant message, built by the adapter's `buildContinuation`) and splice it
   * into the client's stream (guarantee 20 in docs/guarantees.md). Needs `request` and an adapter that supports it
   * (`anthropicMessages`; `openaiChatWith({ continuation })`). Never after tool calls,
   * reasoning or refusals; when no continuation is sound or one fails, the cut is told as
   * without it. The prompt is billed again, the received text as input.
   * @default false
   * @example { continueAfterCut: { maxContinuations: 1 } }
   */
  continueAfterCut?: boolean | ContinueAfterCutOptions | undefined
}

/** `downstream` with its defaults. */
export type NormalizedDownstream = Pick<
  DownstreamOptions,
  'adapter' | 'transform' | 'translateFrames' | 'translateStream' | 'translateResponse'
> & { readonly keepAlive: boolean | 'before-content' }

/**
 * A policy with every default filled in, every value checked and frozen: each slice is in the
 * form its reader takes (the peek's, the pump's, the gate's), so nothing normalises it again
 * per request or per attempt (guarantee 30).
 */
export interface NormalizedRelayPolicy {
  readonly maxAttempts: number
  /** `Infinity` when there is no budget. */
  readonly deadlineMs: number
  readonly maxWaitMs: number
  readonly backoff: Required<BackoffOptions>
  readonly peek: NormalizedPeekOptions
  readonly pump: NormalizedPumpPolicy
  readonly retryOn: RelayPolicy['retryOn']
  readonly overloadFallbackAfter: number
  readonly priority: 'interactive' | 'background'
  readonly earlyHeaders: boolean
  readonly keepAliveIntervalMs: number
  readonly downstream: NormalizedDownstream
  readonly headers: HeadersInit | undefined
  readonly forwardHeaders: ForwardHeadersPolicy | undefined
  readonly maxFrameBytes: number
  readonly maxErrorBodyBytes: number
  readonly correlationIds: boolean
  readonly passThroughErrors: boolean
  readonly adjustRequest: RelayPolicy['adjustRequest']
  readonly fit: Readonly<Required<ContextWindowFitOptions>> | undefined
  /** The fallback's timeout, or `undefined` when the fallback is off. */
  readonly fallbackTimeoutMs: number | undefined
  /** Hedging's shared state, or `undefined` when hedging is off. */
  readonly hedge: HedgeState | undefined
  /** Continuation after a cut, or `undefined` when it is off. */
  readonly continuation: Required<ContinueAfterCutOptions> | undefined
  /** The commit gate's options for a streamed and for a whole answer (one head, no early one). */
  readonly gates: {
    readonly stream: NormalizedGateOptions
    readonly whole: NormalizedGateOptions
  }
}

/**
 * Options of {@link RelayPolicy.continueAfterCut}.
 *
 * @group Relay
 */
export interface ContinueAfterCutOptions {
  /**
   * How many continuations one answer may have (a continuation that is cut again may be
   * continued again, up to this many in all).
   * @default 1
   */
  readonly maxContinuations?: number
  /**
   * Attempts per continuation before its first output: its own pre-output retries, on the
   * pool's keys by the usual rules.
   * @default 2
   */
  readonly maxAttempts?: number
  /**
   * Each continuation's budget, from the cut to its first output sent to the client (the key
   * wait, the request, the peek, and the hold while its text still repeats what the client
   * received). `Infinity` turns it off; `0`, negatives and `NaN` are a `RangeError`.
   * @default 30_000 (the client is already waiting mid-answer: past half a minute an honest
   *   error serves it better)
   */
  readonly timeoutMs?: number
  /**
   * The most received characters a continuation may prefill; after a longer text a cut is
   * told (the relay keeps the received text only when continuation is on).
   * @default 262_144
   */
  readonly maxReceivedChars?: number
  /**
   * When a cut cannot be continued on its own route (its adapter cannot continue, or its model
   * refused a prefill), continue it on the next route, in `routes` order, whose adapter speaks
   * the same protocol and can continue, and whose model has not refused a prefill. The
   * continuation record and `onContinuation` say the route and model it ran on
   * (`continuedOn`). Off by default: the next route is another model (or provider) finishing
   * an answer another began, billed there.
   * @default false
   * @example { continueAfterCut: { nextRoute: true }, routes: [{ name: 'no-prefill', … }] }
   */
  readonly nextRoute?: boolean
}

/**
 * Options of the context-window fit.
 *
 * @group Retry decisions
 */
export interface ContextWindowFitOptions {
  /**
   * Tokens left free below the limit, for tokenizer slack.
   * @default 1024
   */
  readonly marginTokens?: number
  /**
   * The smallest output budget worth retrying with; below it, the original error stands.
   * @default 3000
   */
  readonly floorTokens?: number
  /**
   * The smallest thinking budget worth keeping when extended thinking must shrink to fit
   * (Anthropic rejects `thinking.budget_tokens` below 1,024). Below it, the original error
   * stands.
   * @default 1024
   */
  readonly minThinkingTokens?: number
}
