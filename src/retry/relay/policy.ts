/**
 * `RelayPolicy`: how `relay()` retries and ends, its defaults, and the one `normalize` that
 * merges every nested option object with its defaults and validates everything before any
 * key is leased.
 *
 * @module
 */

import { commitGateDefaults } from '../../commit/gate.js'
import type { ForwardHeadersPolicy } from '../../commit/headers.js'
import {
  type DownstreamOptions,
  normalizePumpPolicy,
  type PumpPolicy,
} from '../../commit/pump-policy.js'
import { positiveInteger, positiveMilliseconds, rejectUnknownKeys } from '../../options.js'
import { normalizePeekOptions, type PeekOptions } from '../../peek/index.js'
import type { RenderableError, UpstreamRequest } from '../../protocols/types.js'
import {
  type ContinueAfterCutOptions,
  continueAfterCutDefaults,
  normalizeContinuation,
  withKeptText,
} from '../continuation/continuation-policy.js'
import {
  type ContextWindowFitOptions,
  normalizeContextWindowFit,
} from '../decisions/context-window.js'
import { type HedgeState, type Hedging, hedgeState } from '../route/hedge.js'

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
  routes?: readonly import('./relay.js').Route[]
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

/**
 * Defaults of {@link RelayPolicy}.
 *
 * @group Relay
 */
export const relayDefaults = Object.freeze({
  maxAttempts: 3,
  maxWaitMs: 60_000,
  backoff: Object.freeze({ baseMs: 500, factor: 2, maxMs: 8_000, jitter: 0.25 }),
  peek: Object.freeze({ firstByteTimeoutMs: 30_000, firstOutputTimeoutMs: 600_000 }),
  overloadFallbackAfter: 3,
  priority: 'interactive' as const,
  earlyHeaders: false,
  keepAliveIntervalMs: commitGateDefaults.keepAliveIntervalMs,
  downstream: Object.freeze({ keepAlive: 'before-content' as const }),
  maxFrameBytes: 1_048_576,
  maxErrorBodyBytes: 65_536,
  correlationIds: true,
  passThroughErrors: true,
  fitContextWindow: false,
  nonStreamingFallback: false,
  /** The non-streaming fallback's own timeout (shorter when the deadline leaves less). */
  fallbackTimeoutMs: 300_000,
  continueAfterCut: continueAfterCutDefaults,
})

/** A policy with every default filled in and every value checked. */
export interface NormalizedRelayPolicy {
  readonly maxAttempts: number
  /** `Infinity` when there is no budget. */
  readonly deadlineMs: number
  readonly maxWaitMs: number
  readonly backoff: Required<BackoffOptions>
  readonly peek: Omit<PeekOptions, 'signal' | 'tracker' | 'clockStartedAt'>
  readonly pump: ReturnType<typeof normalizePumpPolicy>
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
  readonly fit: ContextWindowFitOptions | undefined
  /** The fallback's timeout, or `undefined` when the fallback is off. */
  readonly fallbackTimeoutMs: number | undefined
  /** Hedging's shared state, or `undefined` when hedging is off. */
  readonly hedge: HedgeState | undefined
  /** Continuation after a cut, or `undefined` when it is off. */
  readonly continuation: Required<ContinueAfterCutOptions> | undefined
}

/** Every option of {@link RelayPolicy}: a table the compiler keeps complete. */
const policyKeys = Object.keys({
  maxAttempts: true,
  deadlineMs: true,
  maxWaitMs: true,
  backoff: true,
  peek: true,
  retryOn: true,
  passThroughErrors: true,
  routes: true,
  overloadFallbackAfter: true,
  priority: true,
  earlyHeaders: true,
  keepAliveIntervalMs: true,
  downstream: true,
  headers: true,
  forwardHeaders: true,
  maxFrameBytes: true,
  maxErrorBodyBytes: true,
  correlationIds: true,
  adjustRequest: true,
  fitContextWindow: true,
  nonStreamingFallback: true,
  hedge: true,
  continueAfterCut: true,
  onPartialEof: true,
  onThinkingOnly: true,
  idleTimeoutMs: true,
  writeStallTimeoutMs: true,
  stallThresholdMs: true,
} satisfies Record<keyof RelayPolicy, true>)

const peekKeys = Object.keys({
  commitOn: true,
  firstByteTimeoutMs: true,
  firstOutputTimeoutMs: true,
  maxPeekBytes: true,
  maxPeekFrames: true,
  trackerOptions: true,
} satisfies Record<keyof NonNullable<RelayPolicy['peek']>, true>)

const backoffKeys = Object.keys({
  baseMs: true,
  factor: true,
  maxMs: true,
  jitter: true,
} satisfies Record<keyof BackoffOptions, true>)

const downstreamKeys = Object.keys({
  adapter: true,
  transform: true,
  translateFrames: true,
  translateStream: true,
  translateResponse: true,
  keepAlive: true,
} satisfies Record<keyof DownstreamOptions, true>)

/** The translators of `downstream`: at most one may be given. */
const translatorKeys = [
  'transform',
  'translateFrames',
  'translateStream',
  'translateResponse',
] as const

function oneOf<T extends string>(name: string, value: T, allowed: readonly T[]): T {
  if (!allowed.includes(value)) {
    const list = allowed.map((each) => `'${each}'`).join(', ')
    throw new RangeError(`${name} must be one of ${list}, got ${String(value)}`)
  }
  return value
}

function boolean(name: string, value: boolean): boolean {
  if (typeof value !== 'boolean')
    throw new TypeError(`${name} must be a boolean, got ${typeof value}`)
  return value
}

function optionalFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${name} must be a function, got ${typeof value}`)
  }
}

function normalizeBackoff(backoff: BackoffOptions | undefined): Required<BackoffOptions> {
  const merged = { ...relayDefaults.backoff, ...backoff }
  if (!(merged.baseMs >= 0) || !Number.isFinite(merged.baseMs)) {
    throw new RangeError(`backoff.baseMs must be 0 or more milliseconds, got ${merged.baseMs}`)
  }
  if (!(merged.factor >= 1) || !Number.isFinite(merged.factor)) {
    throw new RangeError(`backoff.factor must be a number of at least 1, got ${merged.factor}`)
  }
  positiveMilliseconds('backoff.maxMs', merged.maxMs)
  if (!(merged.jitter >= 0 && merged.jitter <= 1)) {
    throw new RangeError(`backoff.jitter must be between 0 and 1, got ${merged.jitter}`)
  }
  return merged
}

function normalizeFit(fit: RelayPolicy['fitContextWindow']): ContextWindowFitOptions | undefined {
  if (fit === undefined || fit === false) return undefined
  if (fit === true) return normalizeContextWindowFit({})
  if (typeof fit !== 'object' || fit === null) {
    throw new TypeError(`fitContextWindow must be a boolean or an object, got ${typeof fit}`)
  }
  return normalizeContextWindowFit(fit)
}

function normalizeFallback(fallback: RelayPolicy['nonStreamingFallback']): number | undefined {
  if (fallback === undefined || fallback === false) return undefined
  if (fallback === true) return relayDefaults.fallbackTimeoutMs
  if (typeof fallback !== 'object' || fallback === null) {
    throw new TypeError(
      `nonStreamingFallback must be a boolean or an object, got ${typeof fallback}`,
    )
  }
  return positiveMilliseconds(
    'nonStreamingFallback.timeoutMs',
    fallback.timeoutMs ?? relayDefaults.fallbackTimeoutMs,
  )
}

/** `downstream` with its defaults. */
type NormalizedDownstream = Pick<
  DownstreamOptions,
  'adapter' | 'transform' | 'translateFrames' | 'translateStream' | 'translateResponse'
> & { readonly keepAlive: boolean | 'before-content' }

function normalizeDownstream(downstream: DownstreamOptions | undefined): NormalizedDownstream {
  if (downstream === undefined)
    return { ...relayDefaults.downstream, adapter: undefined, transform: undefined }
  if (typeof downstream !== 'object' || downstream === null) {
    throw new TypeError(
      `downstream must be an object, got ${downstream === null ? 'null' : typeof downstream}`,
    )
  }
  if (downstream.adapter !== undefined && typeof downstream.adapter?.inspect !== 'function') {
    throw new TypeError('downstream.adapter must be a StreamAdapter')
  }
  const given = translatorKeys.filter((key) => downstream[key] !== undefined)
  for (const key of given) optionalFunction(`downstream.${key}`, downstream[key])
  if (given.length > 1) {
    throw new TypeError(
      `downstream takes one translator, got ${given.map((key) => `downstream.${key}`).join(' and ')}`,
    )
  }
  const whole = given.find((key) => key !== 'transform')
  if (whole !== undefined && downstream.adapter === undefined) {
    throw new TypeError(
      `downstream.${whole} needs downstream.adapter (the client's protocol): the relay renders every ending it writes in it`,
    )
  }
  const keepAlive = downstream.keepAlive ?? relayDefaults.downstream.keepAlive
  if (keepAlive !== true && keepAlive !== false && keepAlive !== 'before-content') {
    throw new TypeError(
      `downstream.keepAlive must be true, false or 'before-content', got ${String(keepAlive)}`,
    )
  }
  return {
    adapter: downstream.adapter,
    transform: downstream.transform,
    translateFrames: downstream.translateFrames,
    translateStream: downstream.translateStream,
    translateResponse: downstream.translateResponse,
    keepAlive,
  }
}

function normalizeRetryOn(retryOn: RelayPolicy['retryOn']): RelayPolicy['retryOn'] {
  if (retryOn === undefined || typeof retryOn === 'function') return retryOn
  if (!Array.isArray(retryOn) || retryOn.some((s) => !Number.isInteger(s) || s < 100 || s > 599)) {
    throw new TypeError('retryOn must be a list of HTTP statuses (100–599) or a function')
  }
  return retryOn
}

/**
 * Merges a policy with its defaults (every nested object the same way) and validates every
 * value, including those passed on to the peek, the pump and the commit gate. Throws a
 * `RangeError` or `TypeError` naming the option; `relay()` calls it before leasing anything.
 */
export function normalizeRelayPolicy(policy: RelayPolicy = {}): NormalizedRelayPolicy {
  if (typeof policy !== 'object' || policy === null) {
    throw new TypeError(`policy must be an object, got ${policy === null ? 'null' : typeof policy}`)
  }
  rejectUnknownKeys('policy', policy, policyKeys)
  rejectUnknownKeys('policy.peek', policy.peek, peekKeys)
  rejectUnknownKeys('policy.backoff', policy.backoff, backoffKeys)
  rejectUnknownKeys('policy.downstream', policy.downstream, downstreamKeys)
  if (typeof policy.nonStreamingFallback === 'object') {
    rejectUnknownKeys('policy.nonStreamingFallback', policy.nonStreamingFallback, ['timeoutMs'])
  }
  const peek = { ...relayDefaults.peek, ...policy.peek }
  normalizePeekOptions(peek)
  const continuation = normalizeContinuation(policy.continueAfterCut)
  const pump = normalizePumpPolicy(policy)
  oneOf('onPartialEof', pump.onPartialEof, ['error', 'synthesize-stop'])
  oneOf('onThinkingOnly', pump.onThinkingOnly, ['error', 'promote-reasoning'])
  // The commit gate checks keepAliveIntervalMs when it is created, before anything is leased.
  const keepAliveIntervalMs = policy.keepAliveIntervalMs ?? relayDefaults.keepAliveIntervalMs
  optionalFunction('adjustRequest', policy.adjustRequest)
  return {
    maxAttempts: positiveInteger('maxAttempts', policy.maxAttempts ?? relayDefaults.maxAttempts),
    deadlineMs:
      policy.deadlineMs === undefined
        ? Number.POSITIVE_INFINITY
        : positiveMilliseconds('deadlineMs', policy.deadlineMs),
    maxWaitMs: positiveMilliseconds('maxWaitMs', policy.maxWaitMs ?? relayDefaults.maxWaitMs),
    backoff: normalizeBackoff(policy.backoff),
    peek: withKeptText(peek, continuation),
    pump,
    retryOn: normalizeRetryOn(policy.retryOn),
    overloadFallbackAfter: positiveInteger(
      'overloadFallbackAfter',
      policy.overloadFallbackAfter ?? relayDefaults.overloadFallbackAfter,
    ),
    priority: oneOf('priority', policy.priority ?? relayDefaults.priority, [
      'interactive',
      'background',
    ]),
    // Without a first-output timeout nothing bounds the wait for output, so the client gets
    // its head as soon as the stream is validated (new-api's flush-before-first-frame rule).
    earlyHeaders: boolean(
      'earlyHeaders',
      policy.earlyHeaders ??
        (peek.firstOutputTimeoutMs === Number.POSITIVE_INFINITY || relayDefaults.earlyHeaders),
    ),
    keepAliveIntervalMs,
    downstream: normalizeDownstream(policy.downstream),
    headers: policy.headers,
    forwardHeaders: policy.forwardHeaders,
    maxFrameBytes: positiveInteger(
      'maxFrameBytes',
      policy.maxFrameBytes ?? relayDefaults.maxFrameBytes,
    ),
    maxErrorBodyBytes: positiveInteger(
      'maxErrorBodyBytes',
      policy.maxErrorBodyBytes ?? relayDefaults.maxErrorBodyBytes,
    ),
    correlationIds: boolean(
      'correlationIds',
      policy.correlationIds ?? relayDefaults.correlationIds,
    ),
    passThroughErrors: boolean(
      'passThroughErrors',
      policy.passThroughErrors ?? relayDefaults.passThroughErrors,
    ),
    adjustRequest: policy.adjustRequest,
    fit: normalizeFit(policy.fitContextWindow),
    fallbackTimeoutMs: normalizeFallback(policy.nonStreamingFallback),
    hedge: policy.hedge === undefined ? undefined : hedgeState(policy.hedge),
    continuation,
  }
}
