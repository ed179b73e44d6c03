/**
 * The in-process key pool: round-robin, weighted or least-inflight selection, cooldowns
 * from rate-limit headers, auth disable, and a consecutive-failure circuit breaker.
 *
 * @module
 */

import { positiveNumber as positive } from '../options.js'
import type {
  AcquireOptions,
  AcquireResult,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateSnapshot,
  KeyStats,
  PoolKey,
} from './types.js'

/** How the next key is chosen among the usable ones. */
export type KeySelection = 'round-robin' | 'weighted' | 'least-inflight'

/** Options of {@link createMemoryKeyPool}. */
export interface MemoryKeyPoolOptions {
  /**
   * How the next key is chosen.
   * @default 'round-robin'
   */
  selection?: KeySelection
  /**
   * Most concurrent leases per key (a key's own `maxInflight` wins).
   * @default Infinity
   */
  maxInflight?: number
  /**
   * Cooldown after a rate limit that did not say how long.
   * @default 10_000
   */
  defaultCooldownMs?: number
  /**
   * Consecutive server errors that open a key's circuit.
   * @default 5
   */
  failureThreshold?: number
  /**
   * How long an open circuit stays open before one trial (half-open).
   * @default 30_000
   */
  circuitOpenMs?: number
  /** State to start from (a `toJSON()` snapshot); unknown ids are ignored. */
  initialState?: KeyPoolSnapshot
  /**
   * The clock, in epoch milliseconds.
   * @default Date.now
   */
  now?: () => number
}

/** Defaults of {@link MemoryKeyPoolOptions}. */
export const memoryKeyPoolDefaults = Object.freeze({
  selection: 'round-robin' as KeySelection,
  maxInflight: Number.POSITIVE_INFINITY,
  defaultCooldownMs: 10_000,
  failureThreshold: 5,
  circuitOpenMs: 30_000,
})

const outcomeKinds: readonly KeyOutcome['kind'][] = [
  'success',
  'rate-limited',
  'auth-failed',
  'server-error',
  'overloaded',
  'protocol-fault',
  'client-gone',
  'rejected',
  'cancelled',
]

interface KeyState {
  readonly key: PoolKey
  readonly weight: number
  readonly maxInflight: number
  disabled: boolean
  cooldownUntil: number
  failures: number
  circuit: 'closed' | 'open' | 'half-open'
  circuitUntil: number
  trialInFlight: boolean
  inflight: number
  leases: number
  currentWeight: number
  outcomes: Record<KeyOutcome['kind'], number>
}

function normalize(keys: readonly PoolKey[], options: MemoryKeyPoolOptions) {
  const ids = new Set<string>()
  for (const key of keys) {
    if (typeof key.id !== 'string' || key.id === '')
      throw new TypeError('Every key needs a non-empty string id')
    if (typeof key.secret !== 'string' || key.secret === '') {
      throw new TypeError(`Key "${key.id}" needs a non-empty secret`)
    }
    if (ids.has(key.id)) throw new TypeError(`Key id "${key.id}" appears twice`)
    ids.add(key.id)
  }
  const selection = options.selection ?? memoryKeyPoolDefaults.selection
  if (!['round-robin', 'weighted', 'least-inflight'].includes(selection)) {
    throw new RangeError(
      `selection must be 'round-robin', 'weighted' or 'least-inflight', got ${String(selection)}`,
    )
  }
  return {
    selection,
    maxInflight: positive(
      'maxInflight',
      options.maxInflight ?? memoryKeyPoolDefaults.maxInflight,
      true,
    ),
    defaultCooldownMs: positive(
      'defaultCooldownMs',
      options.defaultCooldownMs ?? memoryKeyPoolDefaults.defaultCooldownMs,
    ),
    failureThreshold: positive(
      'failureThreshold',
      options.failureThreshold ?? memoryKeyPoolDefaults.failureThreshold,
    ),
    circuitOpenMs: positive(
      'circuitOpenMs',
      options.circuitOpenMs ?? memoryKeyPoolDefaults.circuitOpenMs,
    ),
    now: options.now ?? Date.now,
  }
}

/**
 * Creates an in-memory {@link KeyPool}.
 *
 * - `rate-limited` cools the key down for the time the upstream gave (else
 *   `defaultCooldownMs`); `auth-failed` disables it until `enable(id)`; `server-error`
 *   counts toward the circuit breaker (open after `failureThreshold` in a row, for
 *   `circuitOpenMs`, then one trial); `success` resets the count.
 * - `protocol-fault`, `overloaded`, `client-gone` and `rejected` are not held against the key.
 *
 * @example
 * const pool = createMemoryKeyPool(
 *   [{ id: 'primary', secret: process.env.KEY_A! }, { id: 'backup', secret: process.env.KEY_B! }],
 *   { selection: 'least-inflight', maxInflight: 8 },
 * )
 */
export function createMemoryKeyPool(
  keys: readonly PoolKey[],
  options: MemoryKeyPoolOptions = {},
): KeyPool {
  const config = normalize(keys, options)
  const states: KeyState[] = keys.map((key) => ({
    key,
    weight: key.weight === undefined ? 1 : positive(`weight of key "${key.id}"`, key.weight),
    maxInflight:
      key.maxInflight === undefined
        ? config.maxInflight
        : positive(`maxInflight of key "${key.id}"`, key.maxInflight),
    disabled: false,
    cooldownUntil: 0,
    failures: 0,
    circuit: 'closed',
    circuitUntil: 0,
    trialInFlight: false,
    inflight: 0,
    leases: 0,
    currentWeight: 0,
    outcomes: Object.fromEntries(outcomeKinds.map((kind) => [kind, 0])) as Record<
      KeyOutcome['kind'],
      number
    >,
  }))
  const byId = new Map(states.map((state) => [state.key.id, state]))
  for (const saved of options.initialState?.keys ?? []) {
    const state = byId.get(saved.id)
    if (state === undefined) continue
    state.disabled = saved.disabled
    state.cooldownUntil = saved.cooldownUntil
    state.failures = saved.failures
    state.circuit = saved.circuit
    state.circuitUntil = saved.circuitUntil
  }
  let cursor = 0

  /** Milliseconds until the key is usable (0 = now), or `undefined` when it is disabled. */
  function waitFor(state: KeyState, now: number): number | undefined {
    if (state.disabled) return undefined
    let wait = Math.max(0, state.cooldownUntil - now)
    if (state.circuit === 'open') wait = Math.max(wait, state.circuitUntil - now)
    if (state.circuit === 'half-open' && state.trialInFlight) wait = Math.max(wait, 1)
    if (state.inflight >= state.maxInflight) wait = Math.max(wait, 1)
    return wait
  }

  function pick(usable: KeyState[]): KeyState {
    if (config.selection === 'weighted') {
      let total = 0
      let best = usable[0] as KeyState
      for (const state of usable) {
        state.currentWeight += state.weight
        total += state.weight
        if (state.currentWeight > best.currentWeight) best = state
      }
      best.currentWeight -= total
      return best
    }
    // Round-robin order from the cursor; least-inflight takes the least busy in that order.
    const ordered = [...usable].sort(
      (a, b) =>
        ((states.indexOf(a) - cursor + states.length) % states.length) -
        ((states.indexOf(b) - cursor + states.length) % states.length),
    )
    let chosen = ordered[0] as KeyState
    if (config.selection === 'least-inflight') {
      for (const state of ordered) if (state.inflight < chosen.inflight) chosen = state
    }
    cursor = (states.indexOf(chosen) + 1) % states.length
    return chosen
  }

  function lease(state: KeyState): KeyLease {
    state.inflight++
    state.leases++
    if (state.circuit === 'half-open') state.trialInFlight = true
    let reported = false
    return {
      keyId: state.key.id,
      secret: state.key.secret,
      metadata: state.key.metadata,
      commit(): void {},
      async report(outcome: KeyOutcome): Promise<void> {
        if (reported) return
        reported = true
        state.inflight--
        record(state, outcome)
      },
    }
  }

  function record(state: KeyState, outcome: KeyOutcome): void {
    state.outcomes[outcome.kind]++
    const now = config.now()
    const trial = state.trialInFlight
    state.trialInFlight = false
    switch (outcome.kind) {
      case 'success':
      case 'rejected':
        state.failures = 0
        state.circuit = 'closed'
        break
      case 'rate-limited':
        state.cooldownUntil = Math.max(
          state.cooldownUntil,
          now + (outcome.retryAfterMs ?? config.defaultCooldownMs),
        )
        break
      case 'auth-failed':
        state.disabled = true
        break
      case 'server-error':
        state.failures++
        if (trial || state.failures >= config.failureThreshold) {
          state.circuit = 'open'
          state.circuitUntil = now + config.circuitOpenMs
        }
        break
      default:
        // overloaded, protocol-fault, client-gone: not the key's fault.
        break
    }
  }

  return {
    async acquire(acquireOptions: AcquireOptions = {}): Promise<AcquireResult> {
      if (states.length === 0) return { kind: 'unavailable', reason: 'no-keys' }
      const now = config.now()
      const exclude = acquireOptions.exclude
      const usable: KeyState[] = []
      let earliest = Number.POSITIVE_INFINITY
      let candidates = 0
      let enabled = 0
      for (const state of states) {
        if (state.circuit === 'open' && state.circuitUntil <= now) state.circuit = 'half-open'
        if (!state.disabled) enabled++
        if (exclude?.has(state.key.id)) continue
        const wait = waitFor(state, now)
        if (wait === undefined) continue
        candidates++
        if (wait === 0) usable.push(state)
        else earliest = Math.min(earliest, wait)
      }
      if (usable.length > 0) return { kind: 'leased', lease: lease(pick(usable)) }
      if (candidates > 0) return { kind: 'cooling', retryInMs: earliest, rateLimited: false }
      if (enabled === 0) return { kind: 'unavailable', reason: 'all-disabled' }
      return { kind: 'unavailable', reason: 'all-excluded' }
    },
    async enable(id: string): Promise<void> {
      const state = byId.get(id)
      if (state !== undefined) state.disabled = false
    },
    async disable(id: string): Promise<void> {
      const state = byId.get(id)
      if (state !== undefined) state.disabled = true
    },
    async stats(): Promise<readonly KeyStats[]> {
      return states.map((state) => ({
        id: state.key.id,
        leases: state.leases,
        inflight: state.inflight,
        outcomes: { ...state.outcomes },
      }))
    },
    toJSON(): KeyPoolSnapshot {
      return {
        version: 1,
        keys: states.map(
          (state): KeyStateSnapshot => ({
            id: state.key.id,
            disabled: state.disabled,
            cooldownUntil: state.cooldownUntil,
            failures: state.failures,
            circuit: state.circuit,
            circuitUntil: state.circuitUntil,
          }),
        ),
      }
    },
  }
}
