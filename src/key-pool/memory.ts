/**
 * The in-process key pool: round-robin, weighted or least-inflight selection, cooldowns
 * from rate-limit headers, timed auth holds with a probe, a failure-rate circuit breaker
 * over a sliding window, and a fair FIFO queue for requests waiting at the in-flight cap.
 *
 * @module
 */

import {
  positiveMilliseconds as duration,
  positiveNumber as positive,
  rejectUnknownKeys,
} from '../options.js'
import { FreeKeys } from './free-keys.js'
import {
  initialKeyState,
  KeyHealth,
  type KeyState,
  type LeaseRecord,
  restore,
} from './key-health.js'
import { type AuthFailureWithoutLease, authFailedWithoutLease, tellKeyState } from './outcomes.js'
import {
  forgetPastBudgets,
  type KeySelection,
  KeySelector,
  keySelections,
  learnHeadroom,
  learnLatency,
  probeReturned,
  spend,
  tokensOf,
} from './selection.js'
import type {
  AcquireOptions,
  AcquireResult,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStateEvent,
  KeyStateSnapshot,
  KeyStats,
  PoolKey,
} from './types.js'
import { type Decide, type Decision, WaitQueue } from './wait-queue.js'
import { countInWindow } from './window.js'

/**
 * Options of {@link createMemoryKeyPool}.
 *
 * @group Key pools
 */
export interface MemoryKeyPoolOptions {
  /**
   * How the next key is chosen (see {@link KeySelection}).
   * @default 'round-robin'
   * @example
   * // Spend no request on a key whose rate-limit headers say it is out.
   * createMemoryKeyPool(keys, { selection: 'headroom' })
   */
  selection?: KeySelection
  /**
   * Most concurrent leases per key (a key's own `maxInflight` wins). A key at its cap is
   * *busy*, not cooling.
   * @default Infinity
   */
  maxInflight?: number
  /**
   * The longest cooldown of a rate limit that did not say how long. A key's first such 429
   * cools it for `minCooldownMs`, each further one (until a success) for twice as long, up
   * to this.
   * @default 10_000
   */
  defaultCooldownMs?: number
  /**
   * The shortest cooldown a rate limit sets: a `retry-after: 0`, a reset of `0s` or in the
   * past still keeps the key out this long instead of leasing it again at once. Also the
   * first cooldown of a bare 429 (see `defaultCooldownMs`).
   * @default 1_000
   * @example
   * // Upstream resets are sub-second and honest: trust them down to 250 ms.
   * createMemoryKeyPool(keys, { minCooldownMs: 250 })
   */
  minCooldownMs?: number
  /**
   * Under `headroom` selection, the longest a stated budget is believed: a reset further
   * away (or none stated) is cut to this, after which the key's headroom is unknown again
   * and it is tried as any unknown key is.
   * @default 60_000
   */
  headroomHorizonMs?: number
  /**
   * Under `fastest` selection, how fast a key's time to first output is forgotten: without a
   * new sample it counts half after this long (a third after twice this, nothing after four
   * times this), so a key that was slow looks fast again after a while, is drawn and
   * measured again.
   * @default 10_000
   */
  latencyHalfLifeMs?: number
  /**
   * The longest cooldown a rate limit sets (1 hour by default), whatever the upstream said:
   * one bad header (`retry-after: 31536000`, a date a year away) must not take a key out for
   * a year. A key whose limit really lasts longer is tried again after this and cools again
   * on its next 429.
   * @default 3_600_000
   * @example
   * // Try a rate-limited key again within 15 minutes, whatever its headers say.
   * createMemoryKeyPool(keys, { maxCooldownMs: 15 * 60_000 })
   */
  maxCooldownMs?: number
  /**
   * Server errors within `breakerWindowMs` needed (with `breakerFailureRatio`) to open a
   * key's circuit.
   * @default 5
   */
  failureThreshold?: number
  /**
   * The breaker's sliding window. Leases started and server errors reported are counted in
   * ten buckets over this span.
   * @default 30_000
   */
  breakerWindowMs?: number
  /**
   * Share of the leases started in the window that must have failed (with at least
   * `failureThreshold` failures) to open the circuit. Counting leases *started*, not the
   * order of reports, keeps concurrent attempts from opening a healthy key's circuit.
   * @default 0.5
   */
  breakerFailureRatio?: number
  /**
   * How long an open circuit stays open before it admits one probe lease (half-open).
   * @default 30_000
   */
  circuitOpenMs?: number
  /**
   * How long an `auth-failed` report holds a key before it admits one probe lease.
   * @default 300_000
   */
  authDisableMs?: number
  /**
   * Told of every change of a key's state (disabled, enabled, cooling, circuit open,
   * half-open, closed), with the key id and why; never a secret. The event is frozen; a
   * hook that throws is ignored.
   */
  onKeyState?: (event: KeyStateEvent) => void
  /** State to start from (a `toJSON()` snapshot); unknown ids are ignored. */
  initialState?: KeyPoolSnapshot
  /**
   * The clock, in epoch milliseconds.
   * @default Date.now
   */
  now?: () => number
}

/**
 * Defaults of {@link MemoryKeyPoolOptions}. The breaker rule: a key's circuit opens when,
 * within `breakerWindowMs`, at least `failureThreshold` server errors were reported AND they
 * are at least `breakerFailureRatio` of the leases started in that window. After
 * `circuitOpenMs` exactly one probe lease is admitted; only its result closes or re-opens
 * the circuit.
 *
 * @group Key pools
 */
export const memoryKeyPoolDefaults = Object.freeze({
  selection: 'round-robin' as KeySelection,
  maxInflight: Number.POSITIVE_INFINITY,
  defaultCooldownMs: 10_000,
  minCooldownMs: 1_000,
  headroomHorizonMs: 60_000,
  latencyHalfLifeMs: 10_000,
  maxCooldownMs: 3_600_000,
  failureThreshold: 5,
  breakerWindowMs: 30_000,
  breakerFailureRatio: 0.5,
  circuitOpenMs: 30_000,
  authDisableMs: 300_000,
})

/** Every option of {@link MemoryKeyPoolOptions}: a table the compiler keeps complete. */
const optionKeys = Object.keys({
  selection: true,
  maxInflight: true,
  defaultCooldownMs: true,
  minCooldownMs: true,
  headroomHorizonMs: true,
  latencyHalfLifeMs: true,
  maxCooldownMs: true,
  failureThreshold: true,
  breakerWindowMs: true,
  breakerFailureRatio: true,
  circuitOpenMs: true,
  authDisableMs: true,
  onKeyState: true,
  initialState: true,
  now: true,
} satisfies Record<keyof MemoryKeyPoolOptions, true>)

function normalize(keys: readonly PoolKey[], options: MemoryKeyPoolOptions) {
  rejectUnknownKeys('createMemoryKeyPool', options, optionKeys)
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
  const d = memoryKeyPoolDefaults
  const selection = options.selection ?? d.selection
  if (!keySelections.includes(selection)) {
    throw new RangeError(
      `selection must be 'round-robin', 'weighted', 'least-inflight', 'headroom' or 'fastest', got ${String(selection)}`,
    )
  }
  const ratio = options.breakerFailureRatio ?? d.breakerFailureRatio
  if (!(ratio > 0 && ratio <= 1)) {
    throw new RangeError(`breakerFailureRatio must be a number in (0, 1], got ${String(ratio)}`)
  }
  return {
    selection,
    maxInflight: positive('maxInflight', options.maxInflight ?? d.maxInflight, true),
    defaultCooldownMs: duration(
      'defaultCooldownMs',
      options.defaultCooldownMs ?? d.defaultCooldownMs,
    ),
    minCooldownMs: duration('minCooldownMs', options.minCooldownMs ?? d.minCooldownMs),
    headroomHorizonMs: duration(
      'headroomHorizonMs',
      options.headroomHorizonMs ?? d.headroomHorizonMs,
    ),
    latencyHalfLifeMs: duration(
      'latencyHalfLifeMs',
      options.latencyHalfLifeMs ?? d.latencyHalfLifeMs,
    ),
    maxCooldownMs: duration('maxCooldownMs', options.maxCooldownMs ?? d.maxCooldownMs),
    failureThreshold: positive('failureThreshold', options.failureThreshold ?? d.failureThreshold),
    breakerWindowMs: duration('breakerWindowMs', options.breakerWindowMs ?? d.breakerWindowMs),
    breakerFailureRatio: ratio,
    circuitOpenMs: duration('circuitOpenMs', options.circuitOpenMs ?? d.circuitOpenMs),
    authDisableMs: duration('authDisableMs', options.authDisableMs ?? d.authDisableMs),
    onKeyState: options.onKeyState,
    now: options.now ?? Date.now,
  }
}

/** What a lease needs of its pool: the options, the key health rules, and a wake for waiters. */
interface LeaseContext {
  readonly config: ReturnType<typeof normalize>
  readonly health: KeyHealth
  /** Re-files the lease's key in the pool's indexes, then serves waiting acquires. */
  readonly afterReport: (state: KeyState, now: number) => void
  /** Re-files the lease's key in the pool's indexes after its commit. */
  readonly changed: (state: KeyState, now: number) => void
  /** The latest time an acquire looked at the keys (budgets past it are forgotten). */
  readonly lookedAt: () => number
}

/** The lease handed out for `record` on `state`: commit once, report once. */
function leaseOf(state: KeyState, record: LeaseRecord, context: LeaseContext): KeyLease {
  const { config, health } = context
  return {
    keyId: state.key.id,
    secret: state.key.secret,
    metadata: state.key.metadata,
    commit(): void {
      if (record.committed || record.reported) return
      record.committed = true
      const now = config.now()
      learnLatency(state, now - record.acquiredAt, now)
      health.provenGood(state, record)
      context.changed(state, now)
    },
    async report(outcome: KeyOutcome): Promise<void> {
      if (record.reported) return
      record.reported = true
      state.inflight--
      state.outcomes[outcome.kind]++
      const now = config.now()
      forgetPastBudgets(state, context.lookedAt(), config.headroomHorizonMs)
      probeReturned(state, record.spent)
      if (outcome.kind === 'success' || outcome.kind === 'rate-limited') {
        learnHeadroom(state, outcome.headroom, record.spent, now, config.headroomHorizonMs)
      }
      health.learn(state, record, outcome, now)
      context.afterReport(state, now)
    },
  }
}

/**
 * Creates an in-memory {@link KeyPool}.
 *
 * - A key at its in-flight cap is `busy`; with `waitMs`, `acquire` queues first come, first
 *   served and is woken by the `report` that frees a slot (no polling).
 * - `rate-limited` cools the key down for the time the upstream gave (at least
 *   `minCooldownMs`, at most `maxCooldownMs`); a 429 that gave none backs off per key from
 *   `minCooldownMs`, doubling up to `defaultCooldownMs`, until a success. `cooling` says
 *   `rateLimited: true` only when every candidate cools for that reason.
 * - `headroom` and `fastest` selection learn from each lease: the budget its response's
 *   headers stated (`success` and `rate-limited` reports), its time to first output
 *   (acquire to `commit()`). Neither is part of `toJSON()`: both are short-lived. Under
 *   `headroom`, when every free key is predicted out, `acquire` answers `busy` until the
 *   first refill and, with `waitMs`, waits for it (or for a report stating room).
 * - An acquire costs the same at 1,000 keys as at 4 (an index of the free keys), except
 *   under `headroom`, which weighs every free key's budget on each pick.
 * - `auth-failed` holds the key for `authDisableMs`, then admits one probe lease: its
 *   `commit()` (or a `success`/`rejected` report) re-enables the key, another auth failure
 *   holds it again. `disable(id)` holds it until `enable(id)`.
 * - `server-error` feeds the breaker: the circuit opens when, within `breakerWindowMs`,
 *   server errors are at least `failureThreshold` and at least `breakerFailureRatio` of the
 *   leases started there; after `circuitOpenMs` one probe lease decides (commit, `success`
 *   or `rejected` closes; `server-error` re-opens). Leases handed out before the circuit
 *   last changed do not speak for it.
 * - `protocol-fault`, `overloaded`, `client-gone`, `rejected` and `cancelled` are not held
 *   against the key.
 *
 * @example
 * const pool = createMemoryKeyPool(
 *   [{ id: 'primary', secret: process.env.KEY_A! }, { id: 'backup', secret: process.env.KEY_B! }],
 *   { selection: 'least-inflight', maxInflight: 8, onKeyState: (e) => log.info(e) },
 * )
 *
 * @group Key pools
 */
export function createMemoryKeyPool(
  keys: readonly PoolKey[],
  options: MemoryKeyPoolOptions = {},
): KeyPool {
  const config = normalize(keys, options)
  const states = keys.map((key) => initialKeyState(key, config.maxInflight))
  const byId = new Map(states.map((state) => [state.key.id, state]))
  for (const saved of options.initialState?.keys ?? []) {
    const state = byId.get(saved.id)
    if (state !== undefined) restore(state, saved, config.now())
  }
  const tell = (state: KeyState, event: Omit<KeyStateEvent, 'keyId'>) =>
    tellKeyState(config.onKeyState, { keyId: state.key.id, ...event })
  const health = new KeyHealth(config, tell)
  const free = new FreeKeys(states, health, config.selection)
  const queue = new WaitQueue()
  const core: Core = {
    config,
    states,
    health,
    free,
    selector: new KeySelector(config, states),
    serials: 0,
    decide: (acquireOptions) => decide(core, acquireOptions),
    leaseContext: {
      config,
      health,
      changed: (state, now) => free.changed(state, now),
      lookedAt: () => free.lookedAt,
      afterReport(state, now) {
        free.changed(state, now)
        queue.serve(core.decide)
      },
    },
  }

  function setDisabled(id: string, disabled: boolean): void {
    const state = byId.get(id)
    if (state === undefined) return
    const operatorHold = state.disabled && state.disabledUntil === 0
    if (disabled ? operatorHold : !state.disabled) return
    state.disabled = disabled
    state.disabledUntil = 0
    state.authProbe = undefined
    tell(state, { state: disabled ? 'disabled' : 'enabled', reason: 'operator' })
    free.changed(state, config.now())
    if (!disabled) queue.serve(core.decide)
  }

  const pool: KeyPool & AuthFailureWithoutLease = {
    async acquire(acquireOptions: AcquireOptions = {}): Promise<AcquireResult> {
      const { signal } = acquireOptions
      if (signal?.aborted) throw signal.reason
      // Capacity freed without a report (a cooldown ended) goes to the queue first.
      if (queue.length > 0) queue.serve(core.decide)
      const [result, refillInMs] = core.decide(acquireOptions)
      const waitMs = acquireOptions.waitMs ?? 0
      if (result.kind !== 'busy' || !(waitMs > 0)) return result
      // At the cap, or every free key predicted out (then the refill is looked at first).
      return queue.wait(acquireOptions, waitMs, refillInMs, core.decide)
    },
    async enable(id: string): Promise<void> {
      setDisabled(id, false)
    },
    async disable(id: string): Promise<void> {
      setDisabled(id, true)
    },
    async stats(): Promise<readonly KeyStats[]> {
      return states.map((state) => ({
        id: state.key.id,
        leases: state.leases,
        inflight: state.inflight,
        outcomes: { ...state.outcomes },
      }))
    },
    toJSON: () => snapshotOf(core),
    [authFailedWithoutLease](keyId: string): void {
      const state = byId.get(keyId)
      if (state === undefined) return
      state.outcomes['auth-failed']++
      const now = config.now()
      health.holdForAuth(state, now)
      free.changed(state, now)
    },
  }
  return pool
}

/** One memory pool's parts, as its acquires, leases and snapshots use them. */
interface Core {
  readonly config: ReturnType<typeof normalize>
  readonly states: readonly KeyState[]
  readonly health: KeyHealth
  readonly free: FreeKeys
  readonly selector: KeySelector
  serials: number
  readonly decide: Decide
  readonly leaseContext: LeaseContext
}

/** The answer for one acquire now, leasing when a candidate is free. */
function decide(core: Core, options: AcquireOptions): Decision {
  const { config, free, states } = core
  if (states.length === 0) return [{ kind: 'unavailable', reason: 'no-keys' }]
  const now = config.now()
  free.advance(now)
  const need = tokensOf(options.cost, config.selection)
  const picked = free.pick(core.selector, options.exclude, need, now)
  if (picked === undefined) return [free.notFree(options.exclude, now)]
  const refillIn = picked.refillAt === undefined ? 0 : picked.refillAt - now
  // Every free key is predicted out: busy until the first refill, never sent to; an acquire
  // with `waitMs` waits for it (or for a report stating room) in the queue.
  if (refillIn > 0) return [{ kind: 'busy', retryInMs: refillIn }, refillIn]
  return [{ kind: 'leased', lease: lease(core, picked.state, now, need) }]
}

/** Leases `state`: counts it at once, so that concurrent acquires see it. */
function lease(core: Core, state: KeyState, now: number, need: number): KeyLease {
  const record: LeaseRecord = {
    serial: ++core.serials,
    generation: state.generation,
    acquiredAt: now,
    spent: spend(state, need),
    committed: false,
    reported: false,
  }
  state.inflight++
  state.leases++
  countInWindow(state.window, now, core.config.breakerWindowMs, 1)
  if (state.circuit === 'half-open') state.probe = record.serial
  if (state.disabled) state.authProbe = record.serial
  core.free.changed(state, now)
  return leaseOf(state, record, core.leaseContext)
}

/** The pool's `toJSON()`: the breaker's windows slid as far as the keys were last looked at. */
function snapshotOf({ states, health, free }: Core): KeyPoolSnapshot {
  if (Number.isFinite(free.lookedAt))
    for (const state of states) health.refresh(state, free.lookedAt)
  return {
    version: 1,
    keys: states.map(
      (state): KeyStateSnapshot => ({
        id: state.key.id,
        disabled: state.disabled,
        disabledUntil: state.disabledUntil,
        cooldownUntil: state.cooldownUntil,
        failures: state.failures,
        circuit: state.circuit,
        circuitUntil: state.circuitUntil,
      }),
    ),
  }
}
