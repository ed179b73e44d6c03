/**
 * Which keys of the memory pool are free, kept up to date as leases, reports and timers
 * change them, so an acquire looks at a few keys however many the pool holds: each change
 * re-files one key, a cooldown, open circuit or auth hold that ends is found in a due-heap,
 * and a budget or a breaker window is brought up to date when it is next read.
 *
 * @module
 */

import { DueHeap, FreeIndex } from './free-index.js'
import type { KeyHealth, KeyState } from './key-health.js'
import type { KeySelection, KeySelector, Picked } from './selection.js'
import type { AcquireResult } from './types.js'
import { WeightedTurns } from './weighted-turns.js'

/**
 * Whether a key is free (`true`), out until an event changes it (`false`: at its cap, its
 * probe out, disabled by an operator), or out until a time (a cooldown, an open circuit, an
 * auth hold): then that time. {@link KeyHealth.availability}'s rules at `now`; an open
 * circuit always waits for its time, when the health's refresh half-opens it.
 */
function freeAt(state: KeyState, now: number): boolean | number {
  if (state.disabled && state.disabledUntil === 0) return false
  let until = state.cooldownUntil
  if (state.disabled) until = Math.max(until, state.disabledUntil)
  if (state.circuit === 'open') until = Math.max(until, state.circuitUntil)
  if (until > now || state.circuit === 'open') return until
  if (state.inflight >= state.maxInflight) return false
  if (state.circuit === 'half-open' && state.probe !== undefined) return false
  if (state.disabled && state.authProbe !== undefined) return false
  return true
}

/** The free keys of one memory pool, in pool order. */
export class FreeKeys {
  readonly #states: readonly KeyState[]
  readonly #health: KeyHealth
  readonly #free: FreeIndex
  readonly #due = new DueHeap()
  readonly #positionOf: Map<string, number>
  /** Per key: the time it is due to be looked at again (0: not scheduled). */
  readonly #dueAt: Float64Array
  /** Under least-inflight, the free index keeps each key's open leases (else 0). */
  readonly #byInflight: boolean
  /** Under `weighted`, the smooth weighted turns of the free keys. */
  readonly #weighted: WeightedTurns | undefined
  /** The latest time an acquire looked at the keys: what forgetting and pruning go by. */
  lookedAt = Number.NEGATIVE_INFINITY

  constructor(states: readonly KeyState[], health: KeyHealth, selection: KeySelection) {
    this.#states = states
    this.#health = health
    this.#free = new FreeIndex(states.length)
    this.#positionOf = new Map(states.map((state, position) => [state.key.id, position]))
    this.#dueAt = new Float64Array(states.length)
    this.#byInflight = selection === 'least-inflight'
    this.#weighted = selection === 'weighted' ? new WeightedTurns(states) : undefined
    // Every key filed once; a restored cooldown or hold is looked at by the first acquire.
    for (let position = 0; position < states.length; position++) this.#update(position, 0)
  }

  /** Index nodes and heap entries looked at so far (the counted-operations test reads it). */
  get visits(): number {
    return this.#free.visits + (this.#weighted?.visits ?? 0)
  }

  /** Re-files a key after its state changed (a lease, commit, report, hold or release). */
  changed(state: KeyState, now: number): void {
    const position = this.#positionOf.get(state.key.id)
    if (position !== undefined) this.#update(position, now)
  }

  #file(position: number, free: boolean): void {
    const state = this.#states[position] as KeyState
    this.#free.set(position, free ? (this.#byInflight ? state.inflight : 0) : undefined)
    this.#weighted?.file(position, free)
  }

  #update(position: number, now: number): void {
    const until = freeAt(this.#states[position] as KeyState, now)
    this.#file(position, until === true)
    if (typeof until === 'number' && this.#dueAt[position] !== until) {
      this.#dueAt[position] = until
      this.#due.push(until, position)
    }
  }

  /** Keys whose cooldown, open circuit or auth hold ended by `now` are looked at again. */
  advance(now: number): void {
    if (now > this.lookedAt) this.lookedAt = now
    const ended = this.#due.takeDue(now)
    if (ended.length === 0) return
    // In pool order, as a scan of every key would tell their changes.
    ended.sort((a, b) => a - b)
    for (const position of ended) {
      if ((this.#dueAt[position] as number) > now) continue
      this.#dueAt[position] = 0
      this.#health.refresh(this.#states[position] as KeyState, now)
      this.#update(position, now)
    }
  }

  /** The pick among the free keys not excluded, or nothing when none is. */
  pick(
    selector: KeySelector,
    exclude: ReadonlySet<string> | undefined,
    need: number,
    now: number,
  ): Picked | undefined {
    const out: number[] = []
    if (exclude !== undefined && exclude.size > 0) {
      for (const id of exclude) {
        const position = this.#positionOf.get(id)
        if (position !== undefined && this.#free.has(position)) {
          out.push(position)
          this.#file(position, false)
        }
      }
    }
    let picked: Picked | undefined
    if (this.#free.count > 0) {
      picked =
        this.#weighted === undefined
          ? selector.pick(this.#free, need, now)
          : { state: this.#states[this.#weighted.pick()] as KeyState }
    }
    for (const position of out) this.#file(position, true)
    return picked
  }

  /** Why no candidate is free: busy, cooling, or none at all (a scan of every key). */
  notFree(exclude: ReadonlySet<string> | undefined, now: number): AcquireResult {
    const states = this.#states
    let busy = false
    let cooling = false
    let rateLimited = true
    let earliest = Number.POSITIVE_INFINITY
    for (const state of states) {
      if (exclude?.has(state.key.id)) continue
      const found = this.#health.availability(state, now)
      if (found.kind === 'busy' || found.kind === 'free') busy = true
      else if (found.kind === 'cooling' || found.kind === 'held') {
        earliest = Math.min(earliest, found.wait)
        if (found.kind === 'cooling') cooling = true
        if (found.kind === 'held' || !found.rateLimited) rateLimited = false
      }
    }
    const retryInMs = Number.isFinite(earliest) ? earliest : undefined
    if (busy) return { kind: 'busy', retryInMs }
    if (cooling) return { kind: 'cooling', retryInMs: retryInMs ?? 0, rateLimited }
    if (states.every((state) => state.disabled)) {
      const rejectedKeyIds = states
        .filter((state) => state.disabledUntil > 0)
        .map((state) => state.key.id)
      return { kind: 'unavailable', reason: 'all-disabled', rejectedKeyIds }
    }
    return { kind: 'unavailable', reason: 'all-excluded' }
  }
}
