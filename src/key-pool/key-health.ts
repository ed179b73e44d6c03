/**
 * One key's health, as a state machine: cooldowns from rate limits, timed auth holds with a
 * probe, and a failure-rate circuit breaker over a sliding window. The in-memory pool keeps
 * one {@link KeyState} per key and asks {@link KeyHealth} what it can do and what an outcome
 * teaches; the Redis pool's Lua scripts (`redis/scripts.ts`) follow the same rules.
 *
 * @module
 */

import { positiveNumber as positive } from '../options.js'
import { outcomeKinds } from './outcomes.js'
import type { KeyHeadroom, KeyOutcome, KeyStateEvent, KeyStateSnapshot, PoolKey } from './types.js'
import { countInWindow, pruneWindow, type WindowBucket, windowTotals } from './window.js'

/**
 * One resource's stated budget: `left` as stated by the response to a lease taken when the
 * key's spent counter stood at `base`; believed until `until` (the reset), then unknown.
 */
export interface Budget {
  left: number
  base: number
  until: number
}

/** What a lease spent of its key when it was taken (cumulative counters after it). */
export interface Spent {
  readonly requests: number
  readonly tokens: number
}

/** What a key is doing, mutable, one per key of a pool. */
export interface KeyState {
  readonly key: PoolKey
  readonly weight: number
  readonly maxInflight: number
  disabled: boolean
  /** Epoch ms an auth hold lasts; 0 = an operator hold (or not disabled). */
  disabledUntil: number
  cooldownUntil: number
  window: WindowBucket[]
  failures: number
  circuit: 'closed' | 'open' | 'half-open'
  circuitUntil: number
  /** Bumped whenever the circuit opens or closes: older leases no longer speak for it. */
  generation: number
  /** Serial of the half-open circuit's probe lease. */
  probe: number | undefined
  /** Serial of the auth hold's probe lease. */
  authProbe: number | undefined
  inflight: number
  leases: number
  currentWeight: number
  outcomes: Record<KeyOutcome['kind'], number>
  /** Bare 429s (no `retryAfterMs`) since the last success: the next one cools for longer. */
  strikes: number
  /** What the rate-limit headers last stated of the request budget (`headroom` selection). */
  requestBudget: Budget | undefined
  tokenBudget: Budget | undefined
  /** Requests and tokens leased so far (cumulative; a statement is counted from its lease's). */
  spentRequests: number
  spentTokens: number
  /** Decaying average time to first output, and when it was last sampled (`fastest`). */
  latencyMs: number | undefined
  latencyAt: number
  /**
   * `headroom`: the key's spent requests when a budget it had run out of reached its reset.
   * The next lease is its refill probe; until that lease reports (or `refillProbeUntil`),
   * the key counts as out.
   */
  refillProbe: number | undefined
  refillProbeUntil: number
}

/** What one key can do for an acquire right now. */
export type Availability =
  | { readonly kind: 'free' }
  | { readonly kind: 'busy' }
  | { readonly kind: 'cooling'; readonly wait: number; readonly rateLimited: boolean }
  | { readonly kind: 'held'; readonly wait: number }
  | { readonly kind: 'off' }

/** One lease, as its key's health counts it. */
export interface LeaseRecord {
  readonly serial: number
  readonly generation: number
  /** When it was handed out: its commit measures the key's time to first output. */
  readonly acquiredAt: number
  /** The key's spent counters after this lease: what its response's headroom is counted from. */
  readonly spent: Spent
  committed: boolean
  reported: boolean
}

/** The rules a key's health follows (the pool's options). */
export interface HealthRules {
  readonly breakerWindowMs: number
  readonly circuitOpenMs: number
  readonly authDisableMs: number
  readonly defaultCooldownMs: number
  readonly maxCooldownMs: number
  readonly minCooldownMs: number
  readonly failureThreshold: number
  readonly breakerFailureRatio: number
}

/** A key's state before anything happened to it. */
export function initialKeyState(key: PoolKey, maxInflight: number): KeyState {
  return {
    key,
    weight: key.weight === undefined ? 1 : positive(`weight of key "${key.id}"`, key.weight),
    maxInflight:
      key.maxInflight === undefined
        ? maxInflight
        : positive(`maxInflight of key "${key.id}"`, key.maxInflight),
    disabled: false,
    disabledUntil: 0,
    cooldownUntil: 0,
    window: [],
    failures: 0,
    circuit: 'closed',
    circuitUntil: 0,
    generation: 0,
    probe: undefined,
    authProbe: undefined,
    inflight: 0,
    leases: 0,
    currentWeight: 0,
    strikes: 0,
    requestBudget: undefined,
    tokenBudget: undefined,
    spentRequests: 0,
    spentTokens: 0,
    latencyMs: undefined,
    latencyAt: 0,
    refillProbe: undefined,
    refillProbeUntil: 0,
    outcomes: Object.fromEntries(outcomeKinds.map((kind) => [kind, 0])) as Record<
      KeyOutcome['kind'],
      number
    >,
  }
}

/** A key's state as a snapshot saved it. */
export function restore(state: KeyState, saved: KeyStateSnapshot, now: number): void {
  state.disabled = saved.disabled
  state.disabledUntil = saved.disabled ? (saved.disabledUntil ?? 0) : 0
  state.cooldownUntil = saved.cooldownUntil
  state.failures = saved.failures
  // Restored failures count as failures of this bucket, with no lease to dilute them.
  if (saved.failures > 0) state.window = [[now, 0, saved.failures]]
  state.circuit = saved.circuit
  state.circuitUntil = saved.circuitUntil
}

/** A finite, non-negative number of milliseconds, or nothing. */
function givenMs(value: number | undefined): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined
}

/** The reset of a budget the 429's headers say is spent, when they say one is. */
function spentBudgetReset(headroom: KeyHeadroom | undefined): number | undefined {
  if (headroom === undefined) return undefined
  let reset: number | undefined
  const take = (remaining: number | undefined, resetMs: number | undefined) => {
    const ms = givenMs(resetMs)
    if (ms !== undefined && givenMs(remaining) !== undefined && (remaining as number) < 1) {
      reset = Math.max(reset ?? 0, ms)
    }
  }
  take(headroom.requestsRemaining, headroom.requestsResetMs)
  take(headroom.tokensRemaining, headroom.tokensResetMs)
  return reset
}

/**
 * How long a 429 cools its key: the wait it gave (or the reset of the budget its headers say
 * is spent), at least `minCooldownMs`; a bare 429 backs off from `minCooldownMs`, doubling
 * with each bare 429 since the key's last success, up to `defaultCooldownMs`. Never more
 * than `maxCooldownMs`.
 */
function rateLimitCooldown(
  state: KeyState,
  outcome: Extract<KeyOutcome, { kind: 'rate-limited' }>,
  rules: HealthRules,
): number {
  const given = givenMs(outcome.retryAfterMs) ?? spentBudgetReset(outcome.headroom)
  let wait: number
  if (given === undefined) {
    state.strikes += 1
    wait = Math.min(
      rules.minCooldownMs * 2 ** Math.min(state.strikes - 1, 30),
      rules.defaultCooldownMs,
    )
  } else wait = Math.max(given, rules.minCooldownMs)
  return Math.min(wait, rules.maxCooldownMs)
}

/** The state machine over every key of one pool: what a key can do, what an outcome teaches. */
export class KeyHealth {
  constructor(
    private readonly rules: HealthRules,
    private readonly tell: (state: KeyState, event: Omit<KeyStateEvent, 'keyId'>) => void,
  ) {}

  refresh(state: KeyState, now: number): void {
    if (pruneWindow(state.window, now, this.rules.breakerWindowMs)) {
      state.failures = windowTotals(state.window).failures
    }
    if (state.circuit === 'open' && state.circuitUntil <= now) {
      state.circuit = 'half-open'
      state.probe = undefined
      this.tell(state, { state: 'circuit-half-open', reason: 'timer' })
    }
  }

  availability(state: KeyState, now: number): Availability {
    if (state.disabled && state.disabledUntil === 0) return { kind: 'off' }
    if (state.disabled && state.disabledUntil > now) {
      return { kind: 'held', wait: state.disabledUntil - now }
    }
    const cooldown = Math.max(0, state.cooldownUntil - now)
    const open = state.circuit === 'open' ? Math.max(0, state.circuitUntil - now) : 0
    if (cooldown > 0 || open > 0) {
      return { kind: 'cooling', wait: Math.max(cooldown, open), rateLimited: open === 0 }
    }
    if (state.inflight >= state.maxInflight) return { kind: 'busy' }
    if (state.circuit === 'half-open' && state.probe !== undefined) return { kind: 'busy' }
    if (state.disabled && state.authProbe !== undefined) return { kind: 'busy' }
    return { kind: 'free' }
  }

  /** A probe's first output (or a `success`/`rejected` report) closes or re-enables. */
  provenGood(state: KeyState, record: LeaseRecord): void {
    if (state.probe === record.serial) {
      state.probe = undefined
      state.circuit = 'closed'
      state.generation++
      state.window = []
      state.failures = 0
      this.tell(state, { state: 'circuit-closed', reason: 'probe-succeeded' })
    }
    if (state.authProbe === record.serial) {
      state.authProbe = undefined
      state.disabled = false
      state.disabledUntil = 0
      this.tell(state, { state: 'enabled', reason: 'probe-succeeded' })
    }
  }

  openCircuit(state: KeyState, now: number, reason: 'failure-rate' | 'probe-failed') {
    state.circuit = 'open'
    state.circuitUntil = now + this.rules.circuitOpenMs
    state.generation++
    state.window = []
    state.failures = 0
    this.tell(state, { state: 'circuit-open', reason, until: state.circuitUntil })
  }

  /** An auth failure, with or without a lease: held for `authDisableMs`, then one probe. */
  holdForAuth(state: KeyState, now: number): void {
    // An operator hold stays an operator hold.
    if (state.disabled && state.disabledUntil === 0) return
    state.disabled = true
    state.disabledUntil = now + this.rules.authDisableMs
    this.tell(state, { state: 'disabled', reason: 'auth-failed', until: state.disabledUntil })
  }

  learn(state: KeyState, record: LeaseRecord, outcome: KeyOutcome, now: number): void {
    this.refresh(state, now)
    const kind = outcome.kind
    // A no-op after commit(): the probe slot was consumed then.
    if (kind === 'success' || kind === 'rejected') this.provenGood(state, record)
    const probe = state.probe === record.serial
    // Whatever else the outcome, the probe slots this lease held are free again.
    if (probe) state.probe = undefined
    if (state.authProbe === record.serial) state.authProbe = undefined
    if (kind === 'success') state.strikes = 0
    if (kind === 'rate-limited') {
      const until = now + rateLimitCooldown(state, outcome, this.rules)
      if (until > state.cooldownUntil) {
        state.cooldownUntil = until
        this.tell(state, { state: 'cooling', reason: 'rate-limited', until })
      }
    } else if (kind === 'auth-failed') {
      this.holdForAuth(state, now)
    } else if (kind === 'server-error') {
      if (probe) this.openCircuit(state, now, 'probe-failed')
      else if (state.circuit === 'closed' && record.generation === state.generation) {
        countInWindow(state.window, now, this.rules.breakerWindowMs, 2)
        const { leases, failures } = windowTotals(state.window)
        state.failures = failures
        if (
          failures >= this.rules.failureThreshold &&
          failures >= this.rules.breakerFailureRatio * leases
        ) {
          this.openCircuit(state, now, 'failure-rate')
        }
      }
    }
  }
}
