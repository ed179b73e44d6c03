/**
 * Hedging's shared state: the budget (hedges per request over a sliding window), each
 * route's recent time to first output (for the adaptive delay) and each route's last
 * overload. One {@link Hedging} serves every request of a gateway; `relay()` reads and adds
 * to it through the functions below.
 *
 * @module
 */

import { now } from '../../call-safely.js'
import { countInWindow, pruneWindow, windowTotals } from '../../key-pool/window.js'
import {
  countNormalization,
  nonNegativeMilliseconds,
  positiveInteger,
  positiveMilliseconds,
  rejectUnknownKeys,
} from '../../options.js'
import type {
  AdaptiveHedgeOptions,
  HedgeState,
  Hedging,
  HedgingOptions,
  HedgingSnapshot,
  NormalizedHedging,
  RouteLatency,
} from '../shared/hedging-types.js'

/**
 * Defaults of {@link HedgingOptions}.
 *
 * @group Hedging
 */
export const hedgingDefaults = Object.freeze({
  afterMs: 'adaptive' as const,
  maxHedges: 1,
  budget: 0.1,
  budgetWindowMs: 60_000,
  minHedgesPerWindow: 10,
  sameKey: false,
  overloadPauseMs: 30_000,
  adaptive: Object.freeze({
    percentile: 0.95,
    samples: 200,
    warmUp: 20,
    initialMs: 2_000,
    minMs: 100,
  }),
})

const states = new WeakMap<Hedging, HedgeState>()

function fraction(name: string, value: number, low: number, high: number): number {
  if (typeof value !== 'number' || !(value > low && value <= high)) {
    throw new RangeError(`${name} must be a number above ${low} and at most ${high}, got ${value}`)
  }
  return value
}

const optionKeys = {
  afterMs: true,
  maxHedges: true,
  budget: true,
  budgetWindowMs: true,
  minHedgesPerWindow: true,
  sameKey: true,
  overloadPauseMs: true,
  adaptive: true,
} satisfies Record<keyof HedgingOptions, true>

const adaptiveKeys = {
  percentile: true,
  samples: true,
  warmUp: true,
  initialMs: true,
  minMs: true,
} satisfies Record<keyof AdaptiveHedgeOptions, true>

function normalizeHedging(options: HedgingOptions): NormalizedHedging {
  countNormalization('createHedging')
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(
      `createHedging() options must be an object, got ${options === null ? 'null' : typeof options}`,
    )
  }
  rejectUnknownKeys('createHedging', options, Object.keys(optionKeys))
  rejectUnknownKeys('createHedging: adaptive', options.adaptive, Object.keys(adaptiveKeys))
  const afterMs = options.afterMs ?? hedgingDefaults.afterMs
  if (afterMs !== 'adaptive') positiveMilliseconds('hedge.afterMs', afterMs)
  const adaptive = { ...hedgingDefaults.adaptive, ...options.adaptive }
  fraction('hedge.adaptive.percentile', adaptive.percentile, 0, 1)
  positiveInteger('hedge.adaptive.samples', adaptive.samples)
  positiveInteger('hedge.adaptive.warmUp', adaptive.warmUp)
  if (adaptive.warmUp > adaptive.samples) {
    throw new RangeError(
      `hedge.adaptive.warmUp (${adaptive.warmUp}) must not exceed hedge.adaptive.samples (${adaptive.samples})`,
    )
  }
  positiveMilliseconds('hedge.adaptive.initialMs', adaptive.initialMs)
  positiveMilliseconds('hedge.adaptive.minMs', adaptive.minMs)
  const overloadPauseMs = options.overloadPauseMs ?? hedgingDefaults.overloadPauseMs
  nonNegativeMilliseconds('hedge.overloadPauseMs', overloadPauseMs)
  const maxHedges = positiveInteger(
    'hedge.maxHedges',
    options.maxHedges ?? hedgingDefaults.maxHedges,
  )
  const minHedgesPerWindow = options.minHedgesPerWindow ?? hedgingDefaults.minHedgesPerWindow
  if (!Number.isInteger(minHedgesPerWindow) || minHedgesPerWindow < 0) {
    throw new RangeError(
      `hedge.minHedgesPerWindow must be an integer of 0 or more, got ${minHedgesPerWindow}`,
    )
  }
  const sameKey = options.sameKey ?? hedgingDefaults.sameKey
  if (typeof sameKey !== 'boolean') {
    throw new TypeError(`hedge.sameKey must be a boolean, got ${typeof sameKey}`)
  }
  return Object.freeze({
    afterMs,
    maxHedges,
    budget: fraction('hedge.budget', options.budget ?? hedgingDefaults.budget, 0, maxHedges),
    budgetWindowMs: positiveMilliseconds(
      'hedge.budgetWindowMs',
      options.budgetWindowMs ?? hedgingDefaults.budgetWindowMs,
    ),
    minHedgesPerWindow,
    sameKey,
    overloadPauseMs,
    adaptive: Object.freeze(adaptive),
  })
}

const clock = now

function routeOf(state: HedgeState, route: string): RouteLatency {
  let latency = state.routes.get(route)
  if (latency === undefined) {
    latency = { samples: [], next: 0, overloadAt: Number.NEGATIVE_INFINITY }
    state.routes.set(route, latency)
  }
  return latency
}

function percentileOf(samples: readonly number[], percentile: number): number {
  const sorted = [...samples].sort((a, b) => a - b)
  const index = Math.min(sorted.length - 1, Math.ceil(percentile * sorted.length) - 1)
  return sorted[Math.max(0, index)] as number
}

function delayOf(state: HedgeState, latency: RouteLatency | undefined): number {
  const { afterMs, adaptive } = state.options
  if (afterMs !== 'adaptive') return afterMs
  if (latency === undefined || latency.samples.length < adaptive.warmUp) return adaptive.initialMs
  return Math.max(adaptive.minMs, Math.round(percentileOf(latency.samples, adaptive.percentile)))
}

/**
 * Creates the shared state `policy.hedge` takes. Throws a `RangeError` or `TypeError` naming
 * a bad option.
 *
 * @example
 * const hedging = createHedging({ afterMs: 'adaptive', budget: 0.1 })
 * // per request:
 * relay({ ..., policy: { hedge: hedging } })
 *
 * @group Hedging
 */
export function createHedging(options: HedgingOptions = {}): Hedging {
  const state: HedgeState = { options: normalizeHedging(options), window: [], routes: new Map() }
  const hedging: Hedging = Object.freeze({
    options: state.options,
    snapshot(): HedgingSnapshot {
      const at = clock()
      pruneWindow(state.window, at, state.options.budgetWindowMs)
      const totals = windowTotals(state.window)
      const delays: Record<string, number> = {}
      const paused: string[] = []
      for (const [name, latency] of state.routes) {
        delays[name] = delayOf(state, latency)
        if (at - latency.overloadAt < state.options.overloadPauseMs) paused.push(name)
      }
      return { requests: totals.leases, hedges: totals.failures, delays, paused }
    },
  })
  states.set(hedging, state)
  return hedging
}

/** The state behind a {@link Hedging}; a `TypeError` for anything `createHedging` did not make. */
export function hedgeState(hedging: unknown): HedgeState {
  const state =
    typeof hedging === 'object' && hedging !== null ? states.get(hedging as Hedging) : undefined
  if (state === undefined) {
    throw new TypeError(
      'policy.hedge must come from createHedging(): it holds the budget and the latency window shared by every request',
    )
  }
  return state
}

/** Counts a request toward the budget. */
export function countRequest(state: HedgeState): void {
  countInWindow(state.window, clock(), state.options.budgetWindowMs, 1)
}

/**
 * Takes one hedge from the budget when it allows one: hedges in the window (this one
 * included) stay at most `minHedgesPerWindow` + `budget` × requests in the window.
 */
export function takeHedge(state: HedgeState): boolean {
  if (!hedgeBudgetLeft(state)) return false
  countInWindow(state.window, clock(), state.options.budgetWindowMs, 2)
  return true
}

/** Whether the budget allows one more hedge now (without taking it). */
export function hedgeBudgetLeft(state: HedgeState): boolean {
  pruneWindow(state.window, clock(), state.options.budgetWindowMs)
  const { leases: requests, failures: hedges } = windowTotals(state.window)
  const { budget, minHedgesPerWindow } = state.options
  return hedges + 1 <= minHedgesPerWindow + budget * requests + 1e-9
}

/** The delay before a hedge on `route`, in milliseconds. */
export function hedgeDelay(state: HedgeState, route: string): number {
  return delayOf(state, state.routes.get(route))
}

/** Whether hedging on `route` is paused after an overload. */
export function hedgePaused(state: HedgeState, route: string): boolean {
  const latency = state.routes.get(route)
  return latency !== undefined && clock() - latency.overloadAt < state.options.overloadPauseMs
}

/** Records an attempt's time to first output on `route`. */
export function recordFirstOutput(state: HedgeState, route: string, ms: number): void {
  const latency = routeOf(state, route)
  const size = state.options.adaptive.samples
  if (latency.samples.length < size) latency.samples.push(ms)
  else latency.samples[latency.next] = ms
  latency.next = (latency.next + 1) % size
}

/** Records an overload on `route`: hedging pauses there for `overloadPauseMs`. */
export function recordOverload(state: HedgeState, route: string): void {
  routeOf(state, route).overloadAt = clock()
}
