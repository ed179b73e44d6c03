/**
 * Which free key an acquire leases: round-robin, weighted, least-inflight, headroom (the
 * budget the upstream's rate-limit headers stated, less what was leased since) or fastest
 * (time to first output, power of two choices). Pure arithmetic over each key's state, so the
 * Redis pool's scripts (`redis/selection-scripts.ts`) mirror it operation for operation and
 * both pools pick the same key from the same state.
 *
 * @module
 */

import type { FreeIndex } from './free-index.js'
import type { Budget, KeyState, Spent } from './key-health.js'
import type { AcquireOptions, KeyHeadroom } from './types.js'

/**
 * How the next key is chosen.
 *
 * - `round-robin`: in turn.
 * - `weighted`: smooth weighted round-robin by each key's `weight`.
 * - `least-inflight`: the key with the fewest open leases (round-robin among equals).
 * - `headroom`: by the budget each key's rate-limit headers last stated, less what was
 *   leased since; a key predicted to be out is passed over like a cooling key, and when every
 *   free key is, the answer is `busy` until the first refill (waited for within `waitMs`).
 * - `fastest`: the lower time to first output of two keys drawn at random, each key's raised
 *   by an eighth per open lease (providers serve a key's requests in parallel); on a tie the
 *   one with fewer open leases.
 *
 * @group Key pools
 */
export type KeySelection = 'round-robin' | 'weighted' | 'least-inflight' | 'headroom' | 'fastest'

/** Every selection, in the order the option's message names them. */
export const keySelections: readonly KeySelection[] = Object.freeze([
  'round-robin',
  'weighted',
  'least-inflight',
  'headroom',
  'fastest',
])

/**
 * Under `fastest`, how much each open lease raises a key's expected time to first output: a
 * key is preferred to an idle one three times slower until it holds 16 more open leases.
 * A power of two, so `inflight * fastestInflightPenalty` is exact and Lua agrees.
 */
export const fastestInflightPenalty = 0.125

/** A pick: the key, and when every candidate was predicted out, when the first refills. */
export interface Picked {
  readonly state: KeyState
  /** `headroom` only: every candidate is predicted out; epoch ms the picked one refills. */
  readonly refillAt?: number | undefined
}

/** The rules selection follows (the pool's options). */
export interface SelectionRules {
  readonly selection: KeySelection
  readonly headroomHorizonMs: number
  readonly latencyHalfLifeMs: number
}

/** The draw after `seed` of the Park–Miller generator (exact in doubles, so Lua agrees). */
function nextDraw(seed: number): number {
  return (seed * 48_271) % 2_147_483_647
}

/** A budget's prediction now: what it stated, less what was leased after the statement. */
function predicted(budget: Budget | undefined, spent: number): number | undefined {
  return budget === undefined ? undefined : budget.left - (spent - budget.base)
}

/** The largest headroom class: a key whose headroom is unknown weighs this much. */
export const headroomClassMax = 1_048_576

/** A headroom score's class: the largest power of two at most it, from 1 to the largest. */
function classOf(score: number | undefined): number {
  if (score === undefined || score >= headroomClassMax) return headroomClassMax
  if (!(score >= 2)) return 1
  // The largest power of two at most `score` is the one at most its integer part (< 2^20).
  return 1 << (31 - Math.clz32(Math.floor(score)))
}

/**
 * A key's weight under `headroom` for a request that needs `need` tokens: -1 when it is out
 * (fewer than 1 request or `need` tokens predicted, or its refill probe is out), else its
 * class: its predicted requests left (or, when it stated only tokens, its tokens left / 1000)
 * rounded down to a power of two, from 1 to {@link headroomClassMax}; unknown: the largest.
 * A weight that depends on the key alone (not on the best key's), so the Redis pool can keep
 * one sorted set per class. A number, not a pair: it runs once per free key per pick.
 */
function headroomWeight(state: KeyState, need: number): number {
  // The refill probe is out: the key waits for its report.
  if (state.refillProbe !== undefined && state.spentRequests > state.refillProbe) return -1
  const requests = predicted(state.requestBudget, state.spentRequests)
  const tokens = predicted(state.tokenBudget, state.spentTokens)
  if (
    (requests !== undefined && requests < 1) ||
    (tokens !== undefined && tokens < Math.max(need, 1))
  ) {
    return -1
  }
  return classOf(requests ?? (tokens === undefined ? undefined : tokens / 1000))
}

/** When a key that is out refills: the reset of the budget(s) it is out of, or its probe's end. */
function refillAtOf(state: KeyState): number {
  if (state.refillProbe !== undefined && state.spentRequests > state.refillProbe) {
    return state.refillProbeUntil
  }
  return Math.max(state.requestBudget?.until ?? 0, state.tokenBudget?.until ?? 0)
}

/**
 * Statements whose reset has passed are forgotten: the key's headroom is unknown again, and
 * its next lease is a refill probe: the key counts as out until that lease reports (and
 * states the new budget), at most `horizonMs`, so that acquires that waited for the refill,
 * or pile up while the key is unknown, do not all land on it at once.
 */
export function forgetPastBudgets(state: KeyState, now: number, horizonMs: number): void {
  if (state.refillProbe !== undefined && state.refillProbeUntil <= now) {
    state.refillProbe = undefined
  }
  let forgot = false
  if (state.requestBudget !== undefined && state.requestBudget.until <= now) {
    state.requestBudget = undefined
    forgot = true
  }
  if (state.tokenBudget !== undefined && state.tokenBudget.until <= now) {
    state.tokenBudget = undefined
    forgot = true
  }
  if (forgot) {
    state.refillProbe = state.spentRequests
    state.refillProbeUntil = now + horizonMs
  }
}

/** A lease reported: when it was the refill probe, the key's headroom is as it states. */
export function probeReturned(state: KeyState, spent: Spent): void {
  if (state.refillProbe !== undefined && spent.requests > state.refillProbe) {
    state.refillProbe = undefined
  }
}

/** A lease's cost, counted at once so that concurrent acquires see it. */
export function spend(state: KeyState, need: number): Spent {
  state.spentRequests += 1
  state.spentTokens += need
  return { requests: state.spentRequests, tokens: state.spentTokens }
}

/** A valid stated number: finite and not negative. */
function stated(value: number | undefined): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0
}

function budgetFrom(
  current: Budget | undefined,
  left: number | undefined,
  resetMs: number | undefined,
  base: number,
  now: number,
  horizonMs: number,
): Budget | undefined {
  if (!stated(left)) return current
  // An older lease's statement does not overwrite a newer one's.
  if (current !== undefined && current.base > base) return current
  const reset = stated(resetMs) ? Math.min(resetMs, horizonMs) : horizonMs
  return { left, base, until: now + reset }
}

/** What a response's rate-limit headers said of its key, stated after `spent`. */
export function learnHeadroom(
  state: KeyState,
  headroom: KeyHeadroom | undefined,
  spent: Spent,
  now: number,
  horizonMs: number,
): void {
  if (headroom === undefined) return
  state.requestBudget = budgetFrom(
    state.requestBudget,
    headroom.requestsRemaining,
    headroom.requestsResetMs,
    spent.requests,
    now,
    horizonMs,
  )
  state.tokenBudget = budgetFrom(
    state.tokenBudget,
    headroom.tokensRemaining,
    headroom.tokensResetMs,
    spent.tokens,
    now,
    horizonMs,
  )
}

/** The weight of one time-to-first-output sample in the key's average. */
export const latencyAlpha = 0.3

/** A committed lease's time to first output joins its key's decaying average. */
export function learnLatency(state: KeyState, sampleMs: number, now: number): void {
  const sample = Math.max(0, sampleMs)
  state.latencyMs =
    state.latencyMs === undefined
      ? sample
      : state.latencyMs + latencyAlpha * (sample - state.latencyMs)
  state.latencyAt = now
}

/** After this many half-lives without a sample, a key's latency is unknown again. */
export const latencyForgetHalfLives = 4

/**
 * A key's expected time to first output now: its average, forgotten as it ages (halved after
 * `halfLifeMs` without a sample, a third after twice that, unknown after
 * {@link latencyForgetHalfLives}), so a key that was slow looks fast again after a while and
 * is drawn and measured again. Unknown: 0, tried first.
 */
function expectedLatency(state: KeyState, now: number, halfLifeMs: number): number {
  const age = Math.max(0, now - state.latencyAt)
  if (state.latencyMs === undefined || age >= latencyForgetHalfLives * halfLifeMs) return 0
  return (state.latencyMs * halfLifeMs) / (halfLifeMs + age)
}

/** Which free key to lease. Holds the round-robin cursor and the draws of `fastest`. */
export class KeySelector {
  #cursor = 0
  #seed = 1

  constructor(
    private readonly rules: SelectionRules,
    private readonly states: readonly KeyState[],
  ) {
    this.#running = new Float64Array(rules.selection === 'headroom' ? states.length : 0)
  }

  /**
   * Picks among the keys `free` holds (at least one), in pool order. `weighted` is not
   * picked here: the pool keeps its running weights in a `WeightedTurns`.
   */
  pick(free: FreeIndex, need: number, now: number): Picked & { readonly position: number } {
    switch (this.rules.selection) {
      case 'headroom':
        return this.byHeadroom(free, need, now)
      case 'fastest':
        return this.fastest(free, now)
      case 'round-robin':
      case 'least-inflight':
        return this.inTurn(free)
      case 'weighted':
        throw new Error('weighted selection picks through WeightedTurns')
    }
  }

  /**
   * Round-robin order from the cursor; least-inflight takes the least busy in that order
   * (the free index keeps each free key's open leases under least-inflight, 0 otherwise).
   */
  private inTurn(free: FreeIndex): Picked & { readonly position: number } {
    const position = free.firstFrom(this.#cursor, free.least)
    this.#cursor = (position + 1) % this.states.length
    return { state: this.states[position] as KeyState, position }
  }

  /**
   * Keys with room share the picks by smooth weighted round-robin, each weighing its
   * {@link headroomWeight} (its predicted headroom rounded down to a power of two); keys
   * predicted out are passed over, and when every key is, the one that refills first is
   * returned with its `refillAt` (the pool answers busy and waits for it within the
   * acquire's budget). One pass over the free keys, allocating nothing.
   */
  private byHeadroom(free: FreeIndex, need: number, now: number): Picked & { position: number } {
    const { states } = this
    const running = this.#running
    let total = 0
    let chosen = -1
    let top = Number.NEGATIVE_INFINITY
    let refillsFirst = -1
    let refillAt = Number.POSITIVE_INFINITY
    for (let position = 0; position < states.length; position++) {
      if (!free.has(position)) continue
      const state = states[position] as KeyState
      forgetPastBudgets(state, now, this.rules.headroomHorizonMs)
      const weight = headroomWeight(state, need)
      if (weight < 0) {
        const at = refillAtOf(state)
        if (refillsFirst < 0 || at < refillAt) {
          refillAt = at
          refillsFirst = position
        }
        continue
      }
      // Smooth weighted round-robin: the largest running weight wins and pays the total.
      const weighed = (running[position] as number) + weight
      running[position] = weighed
      total += weight
      if (chosen < 0 || weighed > top) {
        chosen = position
        top = weighed
      }
    }
    if (chosen < 0) {
      return { state: states[refillsFirst] as KeyState, position: refillsFirst, refillAt }
    }
    running[chosen] = top - total
    return { state: states[chosen] as KeyState, position: chosen }
  }

  /** Under `headroom`: each key's running weight (smooth weighted round-robin). */
  readonly #running: Float64Array

  /**
   * Power of two choices: the lower expected latency of two draws, each raised by
   * {@link fastestInflightPenalty} per open lease; on a tie the one with fewer open leases,
   * then the first draw.
   */
  private fastest(free: FreeIndex, now: number): Picked & { readonly position: number } {
    const count = free.count
    if (count === 1) {
      const position = free.nth(0)
      return { state: this.states[position] as KeyState, position }
    }
    this.#seed = nextDraw(this.#seed)
    const first = this.#seed % count
    this.#seed = nextDraw(this.#seed)
    const second = (first + 1 + (this.#seed % (count - 1))) % count
    const pa = free.nth(first)
    const pb = free.nth(second)
    const a = this.states[pa] as KeyState
    const b = this.states[pb] as KeyState
    const cost = (state: KeyState) =>
      expectedLatency(state, now, this.rules.latencyHalfLifeMs) *
      (1 + state.inflight * fastestInflightPenalty)
    const ca = cost(a)
    const cb = cost(b)
    return cb < ca || (cb === ca && b.inflight < a.inflight)
      ? { state: b, position: pb }
      : { state: a, position: pa }
  }
}

/** The tokens a request states it needs under `selection` (0 when it states nothing usable, or when the selection does not count tokens). */
export function tokensOf(cost: AcquireOptions['cost'], selection: KeySelection): number {
  // Only headroom selection spends tokens; the relay's estimate is lazy, so a pool that never
  // reads it never writes the request's JSON out again.
  if (selection !== 'headroom') return 0
  const tokens = cost?.tokens
  return typeof tokens === 'number' && Number.isFinite(tokens) && tokens > 0 ? tokens : 0
}
