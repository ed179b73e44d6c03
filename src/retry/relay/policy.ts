/**
 * `RelayPolicy`'s defaults and the one `normalizeRelayPolicy` that merges every nested option
 * object with its defaults, validates everything and freezes the result, once per relay built
 * (`createRelay`, `createResilientFetch`; `relay()` builds one per call). Each optional
 * feature owns its defaults and its check in its own file: `continuation-policy.ts`,
 * `fallback-policy.ts`, `fit-policy.ts`, `downstream-policy.ts`, hedging in `route/hedge.ts`.
 * Its types (how `relay()` retries and ends) are in `shared/policy-types.ts`, below every
 * layer that reads them; they are exported from here too.
 *
 * @module
 */

import {
  commitGateDefaults,
  type NormalizedGateOptions,
  normalizeGateOptions,
} from '../../commit/gate-options.js'
import { normalizePumpPolicy } from '../../commit/pump-policy.js'
import {
  boolean,
  countNormalization,
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
import { hedgeState } from '../route/hedge.js'
import type { BackoffOptions, NormalizedRelayPolicy, RelayPolicy } from '../shared/policy-types.js'
import {
  checkTranslation,
  downstreamDefaults,
  downstreamKeys,
  normalizeDownstream,
  optionalFunction,
} from './downstream-policy.js'
import { fallbackTimeoutDefaultMs, normalizeFallback } from './fallback-policy.js'
import { normalizeFit } from './fit-policy.js'

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
  downstream: downstreamDefaults,
  maxFrameBytes: 1_048_576,
  maxErrorBodyBytes: 65_536,
  correlationIds: true,
  passThroughErrors: true,
  fitContextWindow: false,
  nonStreamingFallback: false,
  /** The non-streaming fallback's own timeout (shorter when the deadline leaves less). */
  fallbackTimeoutMs: fallbackTimeoutDefaultMs,
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

function oneOf<T extends string>(name: string, value: T, allowed: readonly T[]): T {
  if (!allowed.includes(value)) {
    const list = allowed.map((each) => `'${each}'`).join(', ')
    throw new RangeError(`${name} must be one of ${list}, got ${String(value)}`)
  }
  return value
}

function normalizeBackoff(backoff: BackoffOptions | undefined): Required<BackoffOptions> {
  countNormalization('backoff')
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
  countNormalization('retryOn')
  if (retryOn === undefined || typeof retryOn === 'function') return retryOn
  if (!Array.isArray(retryOn) || retryOn.some((s) => !Number.isInteger(s) || s < 100 || s > 599)) {
    throw new TypeError('retryOn must be a list of HTTP statuses (100–599) or a function')
  }
  return retryOn
}

/**
 * The commit gate's options for a request (a whole answer has one head, sent with it),
 * checked once: the gate checks `keepAliveIntervalMs` and `forwardHeaders` here, before
 * anything is leased.
 */
function gateOptionsOf(
  policy: RelayPolicy,
  earlyHeaders: boolean,
  keepAliveIntervalMs: number,
  downstream: NormalizedRelayPolicy['downstream'],
  writeStallTimeoutMs: number,
): NormalizedRelayPolicy['gates'] {
  const stream = Object.freeze(
    normalizeGateOptions({
      earlyHeaders,
      keepAliveIntervalMs:
        downstream.keepAlive === false ? Number.POSITIVE_INFINITY : keepAliveIntervalMs,
      keepAliveAfterContent: downstream.keepAlive === true,
      writeStallTimeoutMs,
      ...(policy.headers === undefined ? {} : { headers: policy.headers }),
      ...(policy.forwardHeaders === undefined ? {} : { forwardHeaders: policy.forwardHeaders }),
    }),
  )
  const whole: NormalizedGateOptions = Object.freeze({ ...stream, earlyHeaders: false })
  return Object.freeze({ stream, whole })
}

/** The peek's checked options, with the received text kept when continuation is on; frozen. */
function keptPeek(
  checked: NormalizedRelayPolicy['peek'],
  continuation: NormalizedRelayPolicy['continuation'],
): NormalizedRelayPolicy['peek'] {
  const peek = withKeptText(checked, continuation)
  // Frozen, the tracker's options are checked once per adapter (`checkTrackerOptions`).
  const { trackerOptions } = peek
  return Object.freeze({
    ...peek,
    trackerOptions: trackerOptions === undefined ? undefined : Object.freeze({ ...trackerOptions }),
  })
}

/**
 * Merges a policy with its defaults (every nested object the same way), validates every
 * value, including those passed on to the peek, the pump and the commit gate, and freezes the
 * result: what a relay reads on every request without checking it again (guarantee 30).
 * Throws a `RangeError` or `TypeError` naming the option; `createRelay()` calls it when the
 * relay is built, `relay()` before leasing anything.
 */
export function normalizeRelayPolicy(policy: RelayPolicy = {}): NormalizedRelayPolicy {
  countNormalization('policy')
  if (typeof policy !== 'object' || policy === null) {
    throw new TypeError(`policy must be an object, got ${policy === null ? 'null' : typeof policy}`)
  }
  rejectUnknownKeys('policy', policy, policyKeys)
  rejectUnknownKeys('policy.peek', policy.peek, peekKeys)
  rejectUnknownKeys('policy.backoff', policy.backoff, backoffKeys)
  rejectUnknownKeys('policy.downstream', policy.downstream, downstreamKeys)
  const checkedPeek = normalizePeekOptions({ ...relayDefaults.peek, ...policy.peek })
  const continuation = normalizeContinuation(policy.continueAfterCut)
  const peek = keptPeek(checkedPeek, continuation)
  const pump = Object.freeze(normalizePumpPolicy(policy))
  oneOf('onPartialEof', pump.onPartialEof, ['error', 'synthesize-stop'])
  oneOf('onThinkingOnly', pump.onThinkingOnly, ['error', 'promote-reasoning'])
  const keepAliveIntervalMs = policy.keepAliveIntervalMs ?? relayDefaults.keepAliveIntervalMs
  optionalFunction('adjustRequest', policy.adjustRequest)
  const maxAttempts = positiveInteger(
    'maxAttempts',
    policy.maxAttempts ?? relayDefaults.maxAttempts,
  )
  const deadlineMs =
    policy.deadlineMs === undefined
      ? Number.POSITIVE_INFINITY
      : timeoutMilliseconds('deadlineMs', policy.deadlineMs)
  const maxWaitMs = positiveMilliseconds('maxWaitMs', policy.maxWaitMs ?? relayDefaults.maxWaitMs)
  const backoff = Object.freeze(normalizeBackoff(policy.backoff))
  const retryOn = normalizeRetryOn(policy.retryOn)
  const overloadFallbackAfter = positiveInteger(
    'overloadFallbackAfter',
    policy.overloadFallbackAfter ?? relayDefaults.overloadFallbackAfter,
  )
  const priority = oneOf('priority', policy.priority ?? relayDefaults.priority, [
    'interactive',
    'background',
  ])
  // Without a first-output timeout nothing bounds the wait for output, so the client gets
  // its head as soon as the stream is validated (new-api's flush-before-first-frame rule).
  const earlyHeaders = boolean(
    'earlyHeaders',
    policy.earlyHeaders ??
      (peek.firstOutputTimeoutMs === Number.POSITIVE_INFINITY || relayDefaults.earlyHeaders),
  )
  const downstream = Object.freeze(normalizeDownstream(policy.downstream))
  return Object.freeze({
    maxAttempts,
    deadlineMs,
    maxWaitMs,
    backoff,
    peek,
    pump,
    retryOn,
    overloadFallbackAfter,
    priority,
    earlyHeaders,
    keepAliveIntervalMs,
    downstream,
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
    gates: gateOptionsOf(
      policy,
      earlyHeaders,
      keepAliveIntervalMs,
      downstream,
      pump.writeStallTimeoutMs,
    ),
  })
}
