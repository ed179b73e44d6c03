/**
 * The types of hedging: its options, the shared state one `Hedging` stands for, and what a
 * snapshot shows. `route/hedge.ts` makes and reads the state.
 *
 * @module
 */

import type { WindowBucket } from '../../key-pool/window.js'

/**
 * The adaptive delay: a percentile of the route's recent times to first output.
 *
 * @group Hedging
 */
export interface AdaptiveHedgeOptions {
  /** Which percentile of recent times to first output a hedge waits for. @default 0.95 */
  readonly percentile?: number
  /** How many recent first outputs per route the percentile is taken over. @default 200 */
  readonly samples?: number
  /** First outputs a route needs before its percentile is used; `initialMs` until then. @default 20 */
  readonly warmUp?: number
  /** The delay while a route warms up. @default 2_000 */
  readonly initialMs?: number
  /** The shortest adaptive delay (a fast route's p95 must not hedge every request). @default 100 */
  readonly minMs?: number
}

/**
 * Options of {@link createHedging}.
 *
 * @group Hedging
 */
export interface HedgingOptions {
  /**
   * How long the running attempt may go without visible output before a hedge starts: a
   * fixed delay in milliseconds, or `'adaptive'` (the route's recent p95 time to first
   * output, see `adaptive`). The k-th hedge of a request starts k delays after its first
   * attempt.
   * @default 'adaptive'
   */
  readonly afterMs?: number | 'adaptive'
  /** Extra attempts in flight per request at most. @default 1 */
  readonly maxHedges?: number
  /**
   * The most hedges per request over `budgetWindowMs`: at `0.1`, at most one hedge per ten
   * requests in the window; at most `maxHedges`. Requests of background priority are not
   * counted.
   * @default 0.1
   */
  readonly budget?: number
  /** The budget's sliding window. @default 60_000 */
  readonly budgetWindowMs?: number
  /**
   * Hedges allowed per window whatever the traffic, on top of `budget` × requests (a retry
   * budget's minimum allowance, as in Envoy and Finagle): without it a gateway with little
   * traffic would almost never hedge, its first request never. `0` makes the budget purely
   * proportional.
   * @default 10
   * @example { minHedgesPerWindow: 3 }
   */
  readonly minHedgesPerWindow?: number
  /**
   * Hedge on a key already in use by the request when no other key is free: an app with one
   * key (or a relay without a pool, on the caller's own credential) can hedge only so. Off
   * by default: a second request on the same key spends that key's rate limit twice.
   * @default false
   */
  readonly sameKey?: boolean
  /**
   * After a route sees an overload (429, 529, `overloaded_error`), no hedge starts on it for
   * this long: hedging must not amplify a capacity incident.
   * @default 30_000
   */
  readonly overloadPauseMs?: number
  /** The adaptive delay's window and warm-up. */
  readonly adaptive?: AdaptiveHedgeOptions
}

/**
 * What a {@link Hedging} has counted, for dashboards and tests.
 *
 * @group Hedging
 */
export interface HedgingSnapshot {
  /** Requests counted toward the budget in the current window. */
  readonly requests: number
  /** Hedges started in the current window. */
  readonly hedges: number
  /** Each route's current delay before a hedge, in milliseconds. */
  readonly delays: Readonly<Record<string, number>>
  /** Routes where hedging is paused after an overload. */
  readonly paused: readonly string[]
}

/**
 * Shared hedging state for `policy.hedge`: create one per gateway (not per request), so the
 * budget and the adaptive delay see every request.
 *
 * @group Hedging
 */
export interface Hedging {
  /** The options with their defaults filled in. */
  readonly options: NormalizedHedging
  /** What is counted now. */
  snapshot(): HedgingSnapshot
}

/**
 * {@link HedgingOptions} with every default filled in.
 *
 * @group Hedging
 */
export interface NormalizedHedging {
  readonly afterMs: number | 'adaptive'
  readonly maxHedges: number
  readonly budget: number
  readonly budgetWindowMs: number
  readonly minHedgesPerWindow: number
  readonly sameKey: boolean
  readonly overloadPauseMs: number
  readonly adaptive: Required<AdaptiveHedgeOptions>
}

/** One route's recent times to first output and its last overload. */
export interface RouteLatency {
  /** A ring of the latest times to first output. */
  readonly samples: number[]
  next: number
  overloadAt: number
}

/** The state behind a {@link Hedging}. */
export interface HedgeState {
  readonly options: NormalizedHedging
  /** `[bucket start, requests, hedges]`. */
  readonly window: WindowBucket[]
  readonly routes: Map<string, RouteLatency>
}
