/**
 * `RelayPolicy`'s defaults and the one `normalize` that merges every nested option object
 * with its defaults and validates everything before any key is leased. Its types (how
 * `relay()` retries and ends) are in `shared/policy-types.ts`, below every layer that reads
 * them; they are exported from here too.
 *
 * @module
 */

import { commitGateDefaults } from '../../commit/gate-options.js'
import { type DownstreamOptions, normalizePumpPolicy } from '../../commit/pump-policy.js'
import {
  boolean,
  nonNegativeMilliseconds,
  positiveInteger,
  positiveMilliseconds,
  rejectUnknownKeys,
  timeoutMilliseconds,
} from '../../options.js'
import { normalizePeekOptions } from '../../peek/index.js'
import type { StreamAdapter } from '../../protocols/types.js'
import {
  checkContinuation,
  continueAfterCutDefaults,
  normalizeContinuation,
  withKeptText,
} from '../continuation/continuation-policy.js'
import { normalizeContextWindowFit } from '../decisions/context-window.js'
import { hedgeState } from '../route/hedge.js'
import type {
  BackoffOptions,
  ContextWindowFitOptions,
  NormalizedDownstream,
  NormalizedRelayPolicy,
  RelayPolicy,
} from '../shared/policy-types.js'

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
  silenceTimeoutMs: true,
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

function optionalFunction(name: string, value: unknown): void {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${name} must be a function, got ${typeof value}`)
  }
}

function normalizeBackoff(backoff: BackoffOptions | undefined): Required<BackoffOptions> {
  const merged = { ...relayDefaults.backoff, ...backoff }
  nonNegativeMilliseconds('backoff.baseMs', merged.baseMs)
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

/**
 * A client protocol the relay cannot reach: `downstream.adapter` is another protocol than an
 * upstream adapter (the protocol of what the attempt returns) and no translator turns one into
 * the other. Without it the client would get the upstream's frames as they are.
 */
export function checkTranslation(
  downstream: NormalizedDownstream,
  upstream: readonly StreamAdapter[],
): void {
  const client = downstream.adapter
  if (client === undefined || translatorKeys.some((key) => downstream[key] !== undefined)) return
  const other = upstream.find((adapter) => adapter !== client && adapter.name !== client.name)
  if (other === undefined) return
  throw new TypeError(
    `policy.downstream.adapter is ${client.name} but the upstream adapter is ${other.name} (the protocol of what the attempt returns), and no translator was given: add downstream.transform, translateFrames, translateStream or translateResponse from ${other.name} to ${client.name}, or leave downstream.adapter out`,
  )
}

/**
 * What a policy asks of the one adapter of a `createResilientFetch({ adapter })`, checked when
 * it is made: a client protocol it can reach (see {@link checkTranslation}), and with
 * `continueAfterCut` an adapter able to continue. (`relay()` is given policies shared by
 * endpoints of several protocols: there a cut its adapter cannot continue is recorded,
 * `result: 'unsupported'`.)
 */
export function checkAdapterOptions(
  policy: NormalizedRelayPolicy,
  ...upstream: readonly StreamAdapter[]
): void {
  checkTranslation(policy.downstream, upstream)
  checkContinuation(policy.continuation, upstream)
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
        : timeoutMilliseconds('deadlineMs', policy.deadlineMs),
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
