/**
 * The relay's decisions, as pure functions: after a failed attempt, what happens next
 * (`decideNext`), and when no key is free, whether to wait for one and how (`planKeyWait`).
 * The relay's loop only acts on what these return.
 *
 * @module
 */

import type { AcquireResult } from '../../key-pool/types.js'
import type { BackoffOptions } from '../shared/policy-types.js'
import type { FailureVerdict } from '../shared/verdict.js'
import {
  busyVerdict,
  coolingVerdict,
  credentialsRejectedVerdict,
  noKeyVerdict,
  rateLimitedVerdict,
} from './pool-verdicts.js'

/** What the request has done so far on its current route, and what it may still do. */
export interface RouteState {
  /**
   * Attempts made on this route in the failed attempt's mode, the failed one included: the
   * streaming (or whole) attempts, or the non-streaming fallback's, which has `maxAttempts`
   * of its own.
   */
  readonly attempts: number
  readonly maxAttempts: number
  /** Consecutive overload failures on this route (429, 529, overload errors), the failed one included. */
  readonly overloads: number
  /**
   * Consecutive failures on this route saying the provider is at capacity (529,
   * `overloaded_error`), the failed one included, carried from the streaming attempts into
   * the fallback.
   */
  readonly capacityOverloads: number
  /** Overloads after which the next route is tried, or, on the last route, the request ends. */
  readonly overloadFallbackAfter: number
  readonly priority: 'interactive' | 'background'
  readonly hasNextRoute: boolean
  /** Whether a non-streaming fallback can still be sent on this route. */
  readonly fallbackAvailable: boolean
  /**
   * The failed attempt's mode: `stream`, `whole` (a client's non-streaming request, retried
   * on the same rules as a stream) or `non-streaming` (the fallback, retried on the same
   * rules with attempts of its own).
   */
  readonly mode: 'stream' | 'whole' | 'non-streaming'
  /**
   * Attempts on this route that reused a key (a tried one, or the caller's own credentials
   * again): the backoff's exponent, so the pause before the n-th reuse is
   * `baseMs × factor^(n−1)`. Moves to untried keys take no pause and do not count.
   */
  readonly reuses: number
  /** Why the request cannot go on, if it cannot: the client left, or the deadline passed. */
  readonly stopped?: 'client-gone' | 'deadline' | undefined
  /** The route leases its keys from a pool (a rate limit then belongs to one key of many). */
  readonly pooled?: boolean | undefined
}

/** What to do after a failed attempt. A discriminated union on `kind`. */
export type Decision =
  /**
   * Try again on this route: a free untried key now, or a tried key after `reuseDelayMs`.
   * With `onlyUntried` (one key's rate limit after `maxAttempts`): only on a key the route has
   * not tried that is not cooling; when there is none, `onlyUntried` is what follows instead.
   */
  | {
      readonly kind: 'retry'
      readonly reuseDelayMs: number
      readonly onlyUntried?: Exclude<Decision, { kind: 'retry' }> | undefined
    }
  /** Send the non-streaming fallback on this route. */
  | { readonly kind: 'fallback' }
  /** Go on with the next route. */
  | { readonly kind: 'next-route' }
  /** Stop: the client gets `verdict.status` and `verdict.error`. */
  | { readonly kind: 'give-up'; readonly verdict: FailureVerdict }
  /** Stop: the client is gone, nobody gets an answer. */
  | { readonly kind: 'client-gone' }

/**
 * The delay before reusing a tried key: exponential, capped, with jitter.
 * @internal exported for tests
 */
export function backoffDelay(
  options: Required<BackoffOptions>,
  reuses: number,
  random: () => number = Math.random,
): number {
  const raw = Math.min(options.maxMs, options.baseMs * options.factor ** Math.max(0, reuses))
  const spread = raw * options.jitter
  return Math.max(0, Math.round(raw - spread + random() * 2 * spread))
}

/** The longest pause before reusing a key after a fault that says nothing about load. */
const briefPauseMaxMs = 50

/**
 * The delay before reusing a tried key after `verdict`: a short jittered pause (10–50 ms) for a
 * fault that says nothing about load, the backoff for the rest; never more than the backoff.
 * @internal exported for tests
 */
export function reuseDelay(
  verdict: FailureVerdict,
  options: Required<BackoffOptions>,
  reuses: number,
  random: () => number = Math.random,
): number {
  const backoff = backoffDelay(options, reuses, random)
  if (verdict.recovery !== 'at-once') return backoff
  return Math.min(backoff, Math.round(briefPauseMaxMs * (0.2 + 0.8 * random())))
}

/**
 * Decides what follows a failed attempt, from the verdict and the route's state alone.
 * Never retries past `maxAttempts`, never retries what the verdict says is not worth it,
 * and never goes on once the client left or the deadline passed. A provider at capacity
 * (529, `overloaded_error`) `overloadFallbackAfter` times in a row is not asked again: the
 * next route, or the end of the request (the reference's stop after repeated 529s, so an
 * overloaded provider is not hammered). The non-streaming fallback retries on the same
 * rules, with its own attempts. Content commit is the caller's check: a failure is only
 * ever decided on before content.
 */
export function decideNext(
  state: RouteState,
  verdict: FailureVerdict,
  backoff: Required<BackoffOptions>,
  random: () => number = Math.random,
): Decision {
  if (state.stopped === 'client-gone' || verdict.key.kind === 'client-gone') {
    return { kind: 'client-gone' }
  }
  if (state.stopped === 'deadline') return { kind: 'give-up', verdict }
  const anotherModelMayWork = verdict.retryable || verdict.overload
  const nextRoute: Decision =
    state.hasNextRoute && anotherModelMayWork && state.priority !== 'background'
      ? { kind: 'next-route' }
      : { kind: 'give-up', verdict }
  // The fallback is sent once per route: never from the fallback itself.
  const fallbackAvailable = state.fallbackAvailable && state.mode !== 'non-streaming'
  if (verdict.reason === 'streaming-unsupported') {
    return fallbackAvailable ? { kind: 'fallback' } : { kind: 'give-up', verdict }
  }
  // Overload is shared by every key: background traffic backs off at once.
  if (verdict.overload && state.priority === 'background') return { kind: 'give-up', verdict }
  if (!verdict.retryable) return verdict.overload ? nextRoute : { kind: 'give-up', verdict }
  if (verdict.overload && state.overloads >= state.overloadFallbackAfter && state.hasNextRoute) {
    return { kind: 'next-route' }
  }
  if (verdict.key.kind === 'overloaded' && state.capacityOverloads >= state.overloadFallbackAfter) {
    return nextRoute
  }
  if (state.attempts >= state.maxAttempts) {
    const exhausted = fallbackAvailable ? { kind: 'fallback' as const } : nextRoute
    // A 429 belongs to one key: it uses no attempt while an untried key that is not cooling
    // remains (the route's progress does not count the attempt on it).
    if (verdict.key.kind !== 'rate-limited' || state.pooled !== true) return exhausted
    return { kind: 'retry', reuseDelayMs: 0, onlyUntried: exhausted }
  }
  return { kind: 'retry', reuseDelayMs: reuseDelay(verdict, backoff, state.reuses, random) }
}

/** The pool's answers that did not lease, as `planKeyWait` reads them. */
export type NotLeased = Exclude<AcquireResult, { kind: 'leased' }>

/** What `planKeyWait` is given. */
export interface KeyWaitInput {
  /** The pool's answer for keys not yet tried in this request. */
  readonly untried: NotLeased
  /** The pool's answer for every key, when some were tried already. */
  readonly all?: NotLeased | undefined
  /** Milliseconds the request may still wait: the deadline and `maxWaitMs` both bound it. */
  readonly budgetMs: number
  readonly priority: 'interactive' | 'background'
  /** The last attempt's failure, if any: what the client gets when the budget runs out. */
  readonly last?: FailureVerdict | undefined
}

/** How to get the next key. A discriminated union on `kind`. */
export type KeyWaitPlan =
  /** Wait this long (a cooldown, a backoff), then ask the pool again. */
  | { readonly kind: 'sleep'; readonly ms: number }
  /** Wait up to this long for a busy key's release; `includeTried` when tried keys may be reused. */
  | { readonly kind: 'wait-release'; readonly ms: number; readonly includeTried: boolean }
  | { readonly kind: 'give-up'; readonly verdict: FailureVerdict }

/**
 * Plans the wait for the key usable soonest when none is free now: the earliest of a cooling
 * key's cooldown end or a busy key's release (a free tried key is reused after its backoff
 * by the caller). The request
 * waits only within its budget; "every key is rate limited" is said only when every
 * candidate cools because of upstream rate limits, and a key that is only busy is never
 * called rate limited.
 */
export function planKeyWait(input: KeyWaitInput): KeyWaitPlan {
  const answers = input.all === undefined ? [input.untried] : [input.untried, input.all]
  const busy = answers.some((answer) => answer.kind === 'busy')
  const cooling = answers.filter(
    (answer): answer is Extract<NotLeased, { kind: 'cooling' | 'busy' }> =>
      (answer.kind === 'cooling' || answer.kind === 'busy') && answer.retryInMs !== undefined,
  )
  const soonest = Math.min(...cooling.map((answer) => answer.retryInMs as number))
  if (busy) {
    const ms = Math.min(soonest, input.budgetMs)
    if (ms <= 0) return { kind: 'give-up', verdict: busyVerdict(Math.min(soonest, 1_000)) }
    return { kind: 'wait-release', ms, includeTried: input.all?.kind === 'busy' }
  }
  if (Number.isFinite(soonest)) {
    if (soonest <= input.budgetMs && input.priority !== 'background') {
      return { kind: 'sleep', ms: soonest }
    }
    const rateLimited =
      cooling.length > 0 &&
      cooling.every((answer) => answer.kind === 'cooling' && answer.rateLimited)
    if (rateLimited) return { kind: 'give-up', verdict: rateLimitedVerdict(soonest) }
    if (input.last !== undefined) return { kind: 'give-up', verdict: input.last }
    return { kind: 'give-up', verdict: coolingVerdict(soonest) }
  }
  const disabled = answers.find(
    (answer): answer is Extract<NotLeased, { kind: 'unavailable' }> =>
      answer.kind === 'unavailable' && answer.reason === 'all-disabled',
  )
  if (disabled !== undefined && input.last === undefined) {
    return { kind: 'give-up', verdict: credentialsRejectedVerdict(disabled.rejectedKeyIds ?? []) }
  }
  if (input.last !== undefined) return { kind: 'give-up', verdict: input.last }
  return { kind: 'give-up', verdict: noKeyVerdict('no-keys') }
}

/** The pre-commit budget ran out: a timeout, unless the last failure says something better. */
export function deadlineVerdict(previous: FailureVerdict | undefined): FailureVerdict {
  if (previous !== undefined && previous.status !== 502) return { ...previous, retryable: false }
  return {
    retryable: false,
    key: { kind: 'protocol-fault' },
    reason: 'deadline',
    overload: false,
    status: 504,
    error: { type: 'timeout', message: 'no upstream attempt produced output within the deadline' },
  }
}
