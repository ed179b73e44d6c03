/**
 * What one route of a request has done so far, as a value, and the one pure function that
 * advances it: `next = nextRouteProgress(state, event)`. Every change to a route's progress
 * goes through it (the loop, the attempt starter and the hedging race only say what
 * happened), so the decisions that read it (`decideNext`, `leaseNext`, hedging) see one
 * consistent state.
 *
 * @module
 */

import type { UpstreamRequest } from '../../protocols/types.js'
import type { FailureVerdict } from '../shared/verdict.js'

/** A route's progress in one request. */
export interface RouteProgress {
  /** Keys this route's attempts have used. */
  readonly tried: ReadonlySet<string>
  /** The request to send (after adjustments), when the relay was given one. */
  readonly request: UpstreamRequest | undefined
  /** Attempts that count toward `maxAttempts` (streams and whole requests; not hedges). */
  readonly attempts: number
  /** Non-streaming fallback attempts: they count toward `maxAttempts` of their own. */
  readonly fallbackAttempts: number
  /** Consecutive overload failures (429s, 529s and overload errors). */
  readonly overloads: number
  /**
   * Consecutive failures saying the provider is at capacity (529, `overloaded_error`), over
   * the streaming attempts and the fallback alike: the stop after repeated overloads reads it.
   */
  readonly capacityOverloads: number
  /**
   * Attempts that reused a key after a pause: on a key this route tried already, or, without a
   * pool, every attempt after the first. The backoff's exponent: a move to an untried key
   * (the sweep over a pool after 429s) waits for nothing and does not grow it.
   */
  readonly reuses: number
  /** When a tried key may be reused, in `performance.now()` time. */
  readonly reuseAt: number
  readonly fallbackUsed: boolean
  /** Whether the context-window fit was applied (it is tried once). */
  readonly fitted: boolean
  /** Why the previous attempt failed, told to `onRetry` once the next key is leased. */
  readonly retryReason: string | undefined
  /**
   * The last failure was one key's rate limit: the next attempt, when it starts on a key this
   * route has not tried, does not count toward `maxAttempts` (a 429 belongs to one key, so it
   * uses no attempt while an untried key remains). At most once per key: bounded by the pool.
   */
  readonly rateLimited: boolean
}

/** What happened on a route. A discriminated union on `kind`. */
export type RouteEvent =
  /**
   * An attempt started on `keyId`: `as` says what it counts toward (`attempt`: `maxAttempts`;
   * `fallback`: the fallback's own `maxAttempts`; `hedge`: nothing).
   */
  | {
      readonly kind: 'started'
      readonly keyId: string | null
      readonly as: 'attempt' | 'fallback' | 'hedge'
    }
  /**
   * A refused request was looked at: changed (`request`, by `adjustRequest` or the
   * context-window fit) or not, and whether the fit (tried once) was tried.
   */
  | {
      readonly kind: 'adjusted'
      readonly request: UpstreamRequest | undefined
      readonly fitted: boolean
    }
  /** An attempt failed with `verdict` (also while another hedged attempt runs on). */
  | { readonly kind: 'failed'; readonly verdict: FailureVerdict }
  /** A retry was decided: a tried key may be reused from `reuseAt` (an untried one at once). */
  | { readonly kind: 'retry'; readonly reuseAt: number; readonly reason: string }
  /** The non-streaming fallback was decided. */
  | { readonly kind: 'fallback'; readonly reason: string }
  /** `onRetry` was told about the retry. */
  | { readonly kind: 'retry-told' }

/** A route's state before its first attempt. */
export function initialRouteProgress(request: UpstreamRequest | undefined): RouteProgress {
  return {
    tried: new Set(),
    request,
    attempts: 0,
    fallbackAttempts: 0,
    overloads: 0,
    capacityOverloads: 0,
    reuses: 0,
    reuseAt: 0,
    fallbackUsed: false,
    fitted: false,
    retryReason: undefined,
    rateLimited: false,
  }
}

/** The route's state after `event`. Pure: `state` is never changed. */
export function nextRouteProgress(state: RouteProgress, event: RouteEvent): RouteProgress {
  switch (event.kind) {
    case 'started': {
      const untried = event.keyId !== null && !state.tried.has(event.keyId)
      const tried = untried ? new Set([...state.tried, event.keyId as string]) : state.tried
      if (event.as === 'hedge') return { ...state, tried }
      // An untried key after one key's rate limit: this attempt is free (see `rateLimited`).
      const counted = state.rateLimited && untried ? 0 : 1
      // The caller's own credentials are reused by every attempt after the first.
      const reused = event.keyId === null ? state.attempts + state.fallbackAttempts > 0 : !untried
      return {
        ...state,
        tried,
        reuses: state.reuses + (reused ? 1 : 0),
        attempts: state.attempts + (event.as === 'attempt' ? counted : 0),
        fallbackAttempts: state.fallbackAttempts + (event.as === 'fallback' ? counted : 0),
        rateLimited: false,
      }
    }
    case 'adjusted':
      return {
        ...state,
        request: event.request ?? state.request,
        fitted: state.fitted || event.fitted,
      }
    case 'failed':
      return {
        ...state,
        overloads: event.verdict.overload ? state.overloads + 1 : 0,
        capacityOverloads:
          event.verdict.key.kind === 'overloaded' ? state.capacityOverloads + 1 : 0,
        rateLimited: event.verdict.key.kind === 'rate-limited',
      }
    case 'retry':
      return {
        ...state,
        reuseAt: event.reuseAt,
        retryReason: event.reason,
      }
    case 'fallback':
      return { ...state, fallbackUsed: true, retryReason: event.reason }
    case 'retry-told':
      return { ...state, retryReason: undefined }
  }
}
