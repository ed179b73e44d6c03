/**
 * The Redis key pool: the memory pool's semantics, with the state in Redis so every gateway
 * replica sees the same cooldowns, disables, circuits and inflight counts, and a local
 * memory pool to serve from while Redis is unreachable.
 *
 * @module
 */

import type { Cluster, Redis } from 'ioredis'
import { isStreamBoundaryError, StreamBoundaryError } from '../errors.js'
import {
  createMemoryKeyPool,
  type MemoryKeyPoolOptions,
  memoryKeyPoolDefaults,
} from '../key-pool/memory.js'
import {
  type AuthFailureWithoutLease,
  authFailedWithoutLease,
  outcomeKinds,
  tellKeyState,
} from '../key-pool/outcomes.js'
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
} from '../key-pool/types.js'
import { positiveNumber as positive, rejectUnknownKeys } from '../options.js'
import { luaScripts } from './scripts.js'
import { type RedisWaiter, waitForSlot } from './slot-queue.js'

/**
 * Options of {@link createRedisKeyPool}: the memory pool's, plus where the state lives.
 *
 * @group Key pools
 */
export interface RedisKeyPoolOptions extends MemoryKeyPoolOptions {
  /**
   * The ioredis client (`new Redis(…)` or `new Cluster(…)`), owned by the host: the pool
   * never connects or quits it. Create it with `enableOfflineQueue: false` so that commands
   * fail at once while the connection is down instead of queueing.
   *
   * @example
   * const redis = new Redis(process.env.REDIS_URL!, { enableOfflineQueue: false })
   */
  redis: Redis | Cluster
  /**
   * Names this pool's state in Redis. Replicas of one pool share a prefix; two pools (two
   * routes, two providers) need two prefixes. Every Redis key is `{prefix}:…`, one hash tag,
   * so a pool lives in one Redis Cluster slot.
   *
   * @example 'gateway:openai-keys'
   */
  prefix: string
  /**
   * How long a lease counts toward `maxInflight` after its replica last renewed it. Replicas
   * renew their open leases every third of this, so a long stream keeps its slot; a crashed
   * replica's slots come back after at most this long.
   * @default 30_000
   */
  leaseTtlMs?: number
  /**
   * How long a Redis call may take before the pool gives up on it and serves locally. A
   * pool used before its client is `ready` waits this long for the connection first.
   * @default 500
   */
  commandTimeoutMs?: number
  /**
   * While degraded, how often (at most) pool activity triggers a `PING` to see whether
   * Redis is back.
   * @default 1_000
   */
  probeIntervalMs?: number
  /**
   * Called once when Redis stops answering and the pool starts serving from its local
   * fallback. Gets the error (key ids at most, never a secret). A hook that throws is ignored.
   */
  onDegraded?: (error: RedisUnavailableError) => void
  /** Called once the local state has been pushed back and Redis is the source of truth again. */
  onRecovered?: () => void
  /**
   * The clock, in epoch milliseconds. By default the scripts read Redis's own `TIME`, so
   * replicas whose clocks drift still agree on cooldowns and lease expiry; the local fallback
   * then uses `Date.now`. Pass a clock to drive the pool yourself (tests).
   * @default Redis TIME
   */
  now?: () => number
}

/**
 * Defaults of {@link RedisKeyPoolOptions}.
 *
 * @group Key pools
 */
export const redisKeyPoolDefaults = Object.freeze({
  ...memoryKeyPoolDefaults,
  leaseTtlMs: 30_000,
  commandTimeoutMs: 500,
  probeIntervalMs: 1_000,
})

/**
 * A {@link KeyPool} whose state lives in Redis.
 *
 * @group Key pools
 */
export interface RedisKeyPool extends KeyPool {
  /** True while Redis is unreachable and this replica serves from its local fallback. */
  readonly degraded: boolean
  /**
   * Stops renewing this replica's leases (they then expire after `leaseTtlMs`). Does not
   * close the Redis client, which the host owns.
   */
  close(): void
}

/**
 * What the pool was doing when Redis failed it.
 *
 * @group Key pools
 */
export type RedisPoolOperation =
  | 'seed'
  | 'acquire'
  | 'commit'
  | 'report'
  | 'enable'
  | 'disable'
  | 'stats'
  | 'renew'
  | 'probe'
  | 'resync'

/**
 * Redis did not serve the key pool: a connection error, a reply later than
 * `commandTimeoutMs`, or an error reply. Handed to `onDegraded`, never thrown at a request.
 *
 * @group Errors
 */
export class RedisUnavailableError extends StreamBoundaryError {
  override readonly name = 'RedisUnavailableError' as const
  /** What the pool was doing. */
  readonly operation: RedisPoolOperation

  constructor(operation: RedisPoolOperation, cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause)
    super('REDIS_UNAVAILABLE', `Redis did not serve the key pool (${operation}): ${reason}`, {
      cause,
    })
    this.operation = operation
  }
}

/**
 * True when `value` is a {@link RedisUnavailableError} (from any copy of the package).
 *
 * @group Errors
 */
export function isRedisUnavailableError(value: unknown): value is RedisUnavailableError {
  return isStreamBoundaryError(value) && value.code === 'REDIS_UNAVAILABLE'
}

type OutcomeKind = KeyOutcome['kind']
type Circuit = KeyStateSnapshot['circuit']

/** One key as a script returns it: the snapshot fields, inflight, leases, outcome counts. */
type Row = readonly [
  disabled: 0 | 1,
  cooldownUntil: string,
  failures: number,
  circuit: Circuit,
  circuitUntil: string,
  inflight: number,
  leases: number,
  disabledUntil: string,
  outcomes?: readonly number[],
]
/** `[1-based key index, state, reason, until ('' when unbounded)]`; `{}` when none (cjson). */
type EventRows = readonly (readonly [
  number,
  KeyStateEvent['state'],
  KeyStateEvent['reason'],
  string,
])[]
type AcquireReply = readonly [
  verdict:
    | readonly ['leased', index: number, generation: number, probe: 0 | 1]
    | readonly ['busy', retryInMs: string | number]
    | readonly ['cooling', retryInMs: string, rateLimited: 0 | 1]
    | readonly ['unavailable', 'all-disabled' | 'all-excluded', rejected?: readonly number[]],
  now: string,
  rows: readonly Row[],
  events: EventRows,
]
type ReportReply = readonly [applied: 0 | 1, now: string, row: Row, events: EventRows]
type RowReply = readonly [row: Row, events: EventRows]
type RowsReply = readonly [now: string, rows: readonly Row[], events?: EventRows]

/** An outcome reported during an outage for a lease Redis still holds. */
interface Replay {
  /** 1-based index of the key (Lua). */
  readonly key: number
  readonly lease: string
  readonly gen: number
  readonly kind: OutcomeKind
  readonly retryAfterMs?: number
  readonly at: number
}

interface SyncKey {
  /** Written only when Redis does not know the key (it restarted empty, or initialState). */
  seed: readonly [0 | 1, number, number, Circuit, number, number]
  /** Any other change of the hold during the outage (disable, enable, a probe's): it wins. */
  disabled?: boolean
  disabledUntil?: number
  /** An auth failure during the outage: merged as a report is, until this epoch ms. */
  authHold?: number
  cooldownUntil?: number
  circuit?: readonly [number, Circuit, number]
  /** Cumulative for this outage: leases, then one count per outcome kind. */
  counts: readonly number[]
}

interface SyncPayload {
  keys: readonly SyncKey[]
  release: readonly string[]
  replay: readonly Replay[]
  adopt: readonly (readonly [number, string])[]
  config: ScriptConfig
}

/** The options the scripts apply, sent as JSON. */
interface ScriptConfig {
  readonly defaultCooldownMs: number
  readonly maxCooldownMs: number
  readonly failureThreshold: number
  readonly breakerWindowMs: number
  readonly breakerFailureRatio: number
  readonly circuitOpenMs: number
  readonly authDisableMs: number
}

/** What this replica last learned from Redis about one key. */
interface Known {
  disabled: boolean
  disabledUntil: number
  cooldownUntil: number
  failures: number
  circuit: Circuit
  circuitUntil: number
  leases: number
  outcomes: Record<OutcomeKind, number>
}

/** The local pool of one outage, and what must go back to Redis when it ends. */
interface Fallback {
  readonly id: string
  readonly pool: KeyPool & AuthFailureWithoutLease
  /** The state when the outage began: only what changed since is pushed back. */
  readonly baseline: KeyPoolSnapshot
  /** Local leases taken on behalf of Redis leases that were open when the outage began. */
  readonly shadows: number[]
  readonly release: string[]
  readonly replay: Replay[]
}

interface OpenLease {
  readonly index: number
  readonly id: string
  /** The key's breaker generation when the lease was handed out. */
  readonly gen: number
  /** Redis made it a probe (half-open circuit or auth hold): its commit must reach Redis. */
  readonly probe: boolean
  /** Redis counts this lease (it came from Redis, or was adopted after an outage). */
  inRedis: boolean
  local: { readonly fallback: Fallback; readonly lease: KeyLease } | undefined
  shadowing: Promise<void> | undefined
}

/** The slice of an ioredis client the pool uses; `Redis` and `Cluster` both have it. */
interface ScriptClient {
  readonly status: string
  ping(): Promise<unknown>
  defineCommand(name: string, definition: { lua: string }): void
  once(event: 'ready', listener: () => void): unknown
  off(event: 'ready', listener: () => void): unknown
}

/** A request of this replica waiting at the in-flight cap. */
type ScriptName = keyof typeof luaScripts
type ScriptMethod = (this: unknown, ...args: (string | number)[]) => Promise<unknown>

/** FNV-1a: enough to tell two versions of a script apart. */
function fingerprint(text: string): string {
  let hash = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return (hash >>> 0).toString(36)
}

// The fingerprint keeps two versions of this package on one client from overwriting each
// other's scripts.
const commandNames = Object.fromEntries(
  Object.entries(luaScripts).map(([name, lua]) => [
    name,
    `streamBoundaryPool_${name}_${fingerprint(lua)}`,
  ]),
) as Record<ScriptName, string>

const downStatuses = new Set(['end', 'close', 'reconnecting', 'disconnecting'])
/** A waiter's poll of Redis starts at this interval and doubles up to `pollMaxMs`. */
const maxAbandoned = 1024
/** setTimeout/setInterval fire at once beyond this. */
const maxDelay = 2 ** 31 - 1

function seedOf(state: Omit<KeyStateSnapshot, 'id'>): SyncKey['seed'] {
  return [
    state.disabled ? 1 : 0,
    state.cooldownUntil,
    state.failures,
    state.circuit,
    state.circuitUntil,
    state.disabledUntil ?? 0,
  ]
}

/**
 * What one key's state at the end of an outage pushes back to Redis: its seed, cooldown and
 * cumulative counts, and what changed since `before`, the state when the outage began.
 */
function syncKeyOf(
  state: KeyStateSnapshot,
  before: KeyStateSnapshot,
  counts: readonly number[],
): SyncKey {
  const entry: SyncKey = { seed: seedOf(state), cooldownUntil: state.cooldownUntil, counts }
  const until = state.disabledUntil ?? 0
  const untilBefore = before.disabledUntil ?? 0
  if (state.disabled !== before.disabled || until !== untilBefore) {
    // A timed hold that no local enable preceded is an auth failure: Redis merges it as a
    // report, so an operator hold placed there meanwhile stays.
    if (state.disabled && until > 0 && !(before.disabled && untilBefore === 0)) {
      entry.authHold = until
    } else {
      entry.disabled = state.disabled
      entry.disabledUntil = until
    }
  }
  if (
    state.failures !== before.failures ||
    state.circuit !== before.circuit ||
    state.circuitUntil !== before.circuitUntil
  ) {
    entry.circuit = [state.failures, state.circuit, state.circuitUntil]
  }
  return entry
}

function decode<T>(reply: unknown): T {
  if (typeof reply !== 'string') throw new TypeError('A key pool script returned no JSON')
  return JSON.parse(reply) as T
}

function callHook<A extends unknown[]>(hook: ((...args: A) => void) | undefined, ...args: A) {
  try {
    hook?.(...args)
  } catch {
    // A hook that throws is ignored.
  }
}

/** Every option of {@link RedisKeyPoolOptions}: a table the compiler keeps complete. */
const redisOptionKeys = Object.keys({
  redis: true,
  prefix: true,
  leaseTtlMs: true,
  commandTimeoutMs: true,
  probeIntervalMs: true,
  onDegraded: true,
  onRecovered: true,
  now: true,
  selection: true,
  maxInflight: true,
  defaultCooldownMs: true,
  maxCooldownMs: true,
  failureThreshold: true,
  breakerWindowMs: true,
  breakerFailureRatio: true,
  circuitOpenMs: true,
  authDisableMs: true,
  onKeyState: true,
  initialState: true,
} satisfies Record<keyof RedisKeyPoolOptions, true>)

/** The pool's connection to Redis: every command bounded by `commandTimeoutMs`, failing fast while down. */
class RedisLink {
  constructor(
    readonly client: ScriptClient,
    readonly commandTimeoutMs: number,
  ) {}

  /** Resolves once the client is `ready`; false when it was not within `commandTimeoutMs`. */
  connection(): Promise<boolean> {
    if (this.client.status === 'ready') return Promise.resolve(true)
    return new Promise<boolean>((resolve) => {
      const onReady = () => {
        clearTimeout(timer)
        resolve(true)
      }
      const timer = setTimeout(
        () => {
          this.client.off('ready', onReady)
          resolve(false)
        },
        Math.min(this.commandTimeoutMs, maxDelay),
      )
      this.client.once('ready', onReady)
    })
  }

  run<T>(operation: RedisPoolOperation, send: () => Promise<T>): Promise<T> {
    // Fail at once rather than queue behind a connection that is down.
    if (downStatuses.has(this.client.status)) {
      return Promise.reject(
        new RedisUnavailableError(operation, new Error(`the connection is ${this.client.status}`)),
      )
    }
    // Still connecting (a pool used at start-up): wait for it rather than go local at once.
    if (this.client.status !== 'ready') {
      return this.connection().then((ready) => {
        if (ready) return this.run(operation, send)
        throw new RedisUnavailableError(
          operation,
          new Error(`the connection was not ready within ${this.commandTimeoutMs} ms`),
        )
      })
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => {
          reject(
            new RedisUnavailableError(
              operation,
              new Error(`no reply within ${this.commandTimeoutMs} ms`),
            ),
          )
        },
        Math.min(this.commandTimeoutMs, maxDelay),
      )
      // Only housekeeping lets the process exit; a request's own call holds it.
      if (operation === 'renew' || operation === 'probe') {
        ;(timer as { unref?: () => void }).unref?.()
      }
      new Promise<T>((sent) => sent(send())).then(
        (value) => {
          clearTimeout(timer)
          resolve(value)
        },
        (error: unknown) => {
          clearTimeout(timer)
          reject(new RedisUnavailableError(operation, error))
        },
      )
    })
  }

  script<T>(
    operation: RedisPoolOperation,
    name: ScriptName,
    scriptKeys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<T> {
    return this.run(operation, async () => {
      const method = (this.client as unknown as Record<string, ScriptMethod>)[commandNames[name]]
      if (method === undefined) throw new TypeError(`The ${name} script is not defined`)
      return decode<T>(await method.call(this.client, scriptKeys.length, ...scriptKeys, ...args))
    })
  }

  asUnavailable(error: unknown, operation: RedisPoolOperation): RedisUnavailableError {
    return isRedisUnavailableError(error) ? error : new RedisUnavailableError(operation, error)
  }
}

/** What this replica last heard from Redis of each key: its snapshot and stats. */
class KnownKeys {
  constructor(
    readonly states: Known[],
    readonly ids: readonly string[],
    readonly onKeyState: ((event: KeyStateEvent) => void) | undefined,
  ) {}

  learn(index: number, row: Row): void {
    const state = this.states[index]
    if (state === undefined) return
    state.disabled = row[0] === 1
    state.cooldownUntil = Number(row[1])
    state.failures = row[2]
    state.circuit = row[3]
    state.circuitUntil = Number(row[4])
    state.leases = row[6]
    state.disabledUntil = Number(row[7])
    const counts = row[8]
    if (counts !== undefined) {
      outcomeKinds.forEach((kind, j) => {
        state.outcomes[kind] = counts[j] ?? 0
      })
    }
  }

  learnAll(rows: readonly Row[]): void {
    for (const [index, row] of rows.entries()) this.learn(index, row)
  }

  snapshot(): KeyPoolSnapshot {
    return {
      version: 1,
      keys: this.states.map(
        (state, index): KeyStateSnapshot => ({
          id: this.ids[index] as string,
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

  /** Tells `onKeyState` what a script changed. */
  tellEvents(events: EventRows | undefined, index?: number): void {
    if (!Array.isArray(events)) return
    for (const [i, state, reason, until] of events) {
      const keyId = this.ids[index ?? i - 1]
      if (keyId === undefined) continue
      tellKeyState(this.onKeyState, {
        keyId,
        state,
        reason,
        ...(until === '' ? {} : { until: Number(until) }),
      })
    }
  }
}

/**
 * Creates a {@link KeyPool} whose state lives in Redis, shared by every gateway replica that
 * uses the same `prefix`: a 429 seen by one replica cools the key for all, a 401 disables it
 * everywhere, and `maxInflight` holds across the fleet.
 *
 * - Outcomes mean what they mean for {@link createMemoryKeyPool}: the same answers (`busy`
 *   at the in-flight cap, `cooling` with `rateLimited`), cooldowns, timed auth holds with a
 *   probe, failure-rate circuit breaker over `breakerWindowMs`, `onKeyState` events and
 *   selection (`round-robin`, `weighted`, `least-inflight`).
 * - `acquire({ waitMs })` at the cap waits in this replica's FIFO queue. Only its head asks
 *   Redis: at once when a lease of this replica is reported, else on a backoff poll (25 ms
 *   doubling to 100 ms, so at most ~10 script calls a second for the whole queue), since
 *   releases on other replicas are not announced. While this replica has waiters, an
 *   `acquire` without `waitMs` answers `busy` without asking Redis, so it cannot take the
 *   slot a release frees for them.
 * - A lease's `commit()` reaches Redis only when the lease is a probe (half-open circuit or
 *   auth hold); `report` waits for it. Renewal of a lease stops the moment it is reported.
 * - Used before the client is `ready`, the pool waits up to `commandTimeoutMs` for it.
 * - Acquire and report are single Lua scripts, atomic across replicas. Only key ids and
 *   lease ids go to Redis; secrets stay in the process.
 * - Leases expire `leaseTtlMs` after their replica last renewed them, so a crashed
 *   replica's inflight slots come back.
 * - When Redis fails a call (error, or no reply within `commandTimeoutMs`), the pool serves
 *   from a local memory pool seeded with the last state it saw, calls `onDegraded`, and keeps
 *   probing. When Redis answers again it pushes back what changed locally (disables and
 *   enables, cooldowns, circuits, counters, the leases still open), calls `onRecovered`, and
 *   Redis is the source of truth again. A request never fails because Redis is down. An
 *   auth failure during the outage is the same timed hold as with Redis up, locally and
 *   after recovery (it keeps an operator hold another replica placed meanwhile).
 * - `toJSON()` is synchronous: the state as this replica last saw it.
 *
 * Every replica of a pool must be given the same keys (ids, in the same order) and options.
 * Needs Redis 5 or later (scripts read `TIME` and write).
 *
 * @example
 * import { Redis } from 'ioredis'
 * import { createRedisKeyPool } from 'stream-boundary/redis'
 *
 * const redis = new Redis(process.env.REDIS_URL!, { enableOfflineQueue: false })
 * redis.on('error', () => {}) // the pool reports outages through onDegraded
 * const pool = createRedisKeyPool(
 *   [{ id: 'primary', secret: process.env.KEY_A! }, { id: 'backup', secret: process.env.KEY_B! }],
 *   { redis, prefix: 'gateway:openai', maxInflight: 8, onDegraded: (e) => log.warn(e.message) },
 * )
 *
 * @group Key pools
 */
export function createRedisKeyPool(
  keys: readonly PoolKey[],
  options: RedisKeyPoolOptions,
): RedisKeyPool {
  rejectUnknownKeys('createRedisKeyPool', options, redisOptionKeys)
  const {
    redis,
    prefix,
    leaseTtlMs,
    commandTimeoutMs,
    probeIntervalMs,
    onDegraded,
    onRecovered,
    now,
    ...memoryOptions
  } = options
  // Validates keys and the shared options with the memory pool's own messages, and gives
  // the starting state (initialState applied).
  const initial = createMemoryKeyPool(keys, memoryOptions)
  if (typeof (redis as { defineCommand?: unknown } | undefined)?.defineCommand !== 'function') {
    throw new TypeError('redis must be an ioredis client (new Redis() or new Cluster())')
  }
  if (typeof prefix !== 'string' || prefix === '' || /[{}]/.test(prefix)) {
    throw new TypeError(`prefix must be a non-empty string without { or }, got ${String(prefix)}`)
  }
  const config = {
    selection: memoryOptions.selection ?? redisKeyPoolDefaults.selection,
    maxInflight: memoryOptions.maxInflight ?? redisKeyPoolDefaults.maxInflight,
    leaseTtlMs: positive('leaseTtlMs', leaseTtlMs ?? redisKeyPoolDefaults.leaseTtlMs),
    commandTimeoutMs: positive(
      'commandTimeoutMs',
      commandTimeoutMs ?? redisKeyPoolDefaults.commandTimeoutMs,
    ),
    probeIntervalMs: positive(
      'probeIntervalMs',
      probeIntervalMs ?? redisKeyPoolDefaults.probeIntervalMs,
    ),
  }
  const client = redis as unknown as ScriptClient
  for (const name of Object.keys(luaScripts) as ScriptName[]) {
    const command = commandNames[name]
    if (typeof (client as unknown as Record<string, unknown>)[command] !== 'function') {
      client.defineCommand(command, { lua: luaScripts[name] })
    }
  }

  const ids = keys.map((key) => key.id)
  const indexOf = new Map(ids.map((id, index) => [id, index]))
  const perKeyArgs = keys.map((key) => [key.maxInflight ?? config.maxInflight, key.weight ?? 1])
  const tag = `{${prefix}}`
  const redisKeys = ids.map((id) => [`${tag}:s:${id}`, `${tag}:l:${id}`, `${tag}:d:${id}`])
  const allKeys = redisKeys.flat()
  const cursorKey = `${tag}:cursor`
  const localNow = now ?? Date.now
  const clockArg = () => (now === undefined ? '-1' : String(now()))
  const d = redisKeyPoolDefaults
  const scriptConfig: ScriptConfig = {
    defaultCooldownMs: memoryOptions.defaultCooldownMs ?? d.defaultCooldownMs,
    maxCooldownMs: memoryOptions.maxCooldownMs ?? d.maxCooldownMs,
    failureThreshold: memoryOptions.failureThreshold ?? d.failureThreshold,
    breakerWindowMs: memoryOptions.breakerWindowMs ?? d.breakerWindowMs,
    breakerFailureRatio: memoryOptions.breakerFailureRatio ?? d.breakerFailureRatio,
    circuitOpenMs: memoryOptions.circuitOpenMs ?? d.circuitOpenMs,
    authDisableMs: memoryOptions.authDisableMs ?? d.authDisableMs,
  }
  const configJson = JSON.stringify(scriptConfig)

  const known: Known[] = initial.toJSON().keys.map((state) => ({
    disabled: state.disabled,
    disabledUntil: state.disabledUntil ?? 0,
    cooldownUntil: state.cooldownUntil,
    failures: state.failures,
    circuit: state.circuit,
    circuitUntil: state.circuitUntil,
    leases: 0,
    outcomes: Object.fromEntries(outcomeKinds.map((kind) => [kind, 0])) as Record<
      OutcomeKind,
      number
    >,
  }))
  const replica = Array.from(crypto.getRandomValues(new Uint8Array(6)), (byte) =>
    byte.toString(16).padStart(2, '0'),
  ).join('')
  let serial = 0
  const nextId = () => `${replica}:${(serial++).toString(36)}`
  const openLeases = new Set<OpenLease>()
  /** Ids of acquires that failed: Redis may still run them later; their slots are freed on resync. */
  const abandoned: string[] = []
  let fallback: Fallback | undefined
  let seeded = memoryOptions.initialState === undefined
  /** A seed or resync in progress: operations wait for it. */
  let gate: Promise<void> | undefined
  let probing = false
  let lastProbe = 0
  let renewTimer: ReturnType<typeof setInterval> | undefined
  let closed = false
  const waiters: RedisWaiter[] = []
  const link = new RedisLink(client, config.commandTimeoutMs)
  const run = link.run.bind(link)
  const script = link.script.bind(link)
  const asUnavailable = link.asUnavailable.bind(link)
  const knownKeys = new KnownKeys(known, ids, memoryOptions.onKeyState)
  const learn = knownKeys.learn.bind(knownKeys)
  const learnAll = knownKeys.learnAll.bind(knownKeys)
  const snapshot = knownKeys.snapshot.bind(knownKeys)
  const tellEvents = knownKeys.tellEvents.bind(knownKeys)

  function track(work: Promise<void>): Promise<void> {
    const current: Promise<void> = work.finally(() => {
      if (gate === current) gate = undefined
    })
    gate = current
    return current
  }

  async function ready(): Promise<void> {
    if (!seeded) {
      seeded = true
      track(seed())
    }
    if (gate !== undefined) await gate
  }

  async function seed(): Promise<void> {
    const payload: SyncPayload = {
      keys: known.map((state) => ({ seed: seedOf(state), counts: [] })),
      release: [],
      replay: [],
      adopt: [],
      config: scriptConfig,
    }
    try {
      const [, rows, events] = await script<RowsReply>(
        'seed',
        'sync',
        [`${tag}:g:${replica}:seed`, ...allKeys],
        [clockArg(), config.leaseTtlMs, JSON.stringify(payload)],
      )
      learnAll(rows)
      tellEvents(events)
    } catch (error) {
      degrade(asUnavailable(error, 'seed'))
    }
  }

  /** Switches to the local fallback (once per outage) and returns it. */
  function degrade(error: RedisUnavailableError): Fallback {
    if (fallback !== undefined) return fallback
    stopRenewal()
    const baseline = snapshot()
    // The memory pool has the lease-less auth failure; its public type does not say so.
    const pool = createMemoryKeyPool(keys, {
      ...memoryOptions,
      initialState: baseline,
      now: localNow,
    }) as KeyPool & AuthFailureWithoutLease
    const current: Fallback = {
      id: nextId(),
      pool,
      baseline,
      shadows: ids.map(() => 0),
      release: [],
      replay: [],
    }
    fallback = current
    lastProbe = Date.now()
    // Redis leases still open hold a local slot too, and report through it.
    for (const open of openLeases) {
      if (!open.inRedis) continue
      const others = new Set(ids.filter((_, index) => index !== open.index))
      open.shadowing = pool.acquire({ exclude: others }).then((result) => {
        if (result.kind !== 'leased') return
        open.local = { fallback: current, lease: result.lease }
        current.shadows[open.index] = (current.shadows[open.index] ?? 0) + 1
      })
    }
    callHook(onDegraded, error)
    return current
  }

  /** While degraded: at most every `probeIntervalMs`, ping Redis in the background. */
  function probe(): void {
    if (fallback === undefined || probing || gate !== undefined || closed) return
    const at = Date.now()
    if (at - lastProbe < config.probeIntervalMs) return
    lastProbe = at
    probing = true
    run('probe', () => client.ping()).then(
      () => {
        probing = false
        if (fallback !== undefined && gate === undefined) track(resync())
      },
      () => {
        probing = false
      },
    )
  }

  async function resync(): Promise<void> {
    const current = fallback
    if (current === undefined) return
    const counts = await current.pool.stats()
    const local = current.pool.toJSON().keys
    const adopt = [...openLeases]
    const release = [...current.release, ...abandoned]
    const payload: SyncPayload = {
      keys: local.map((state, index): SyncKey => {
        const stats = counts[index]
        return syncKeyOf(
          state,
          current.baseline.keys[index] ?? state,
          stats === undefined
            ? []
            : [
                stats.leases - (current.shadows[index] ?? 0),
                ...outcomeKinds.map((kind) => stats.outcomes[kind]),
              ],
        )
      }),
      release,
      replay: current.replay,
      adopt: adopt.map((open) => [open.index + 1, open.id] as const),
      config: scriptConfig,
    }
    try {
      const [, rows, events] = await script<RowsReply>(
        'resync',
        'sync',
        [`${tag}:g:${current.id}`, ...allKeys],
        [clockArg(), config.leaseTtlMs, JSON.stringify(payload)],
      )
      learnAll(rows)
      tellEvents(events)
    } catch {
      // Still unreachable: keep serving locally; a later probe tries again.
      lastProbe = Date.now()
      return
    }
    abandoned.splice(0, release.length - current.release.length)
    for (const open of openLeases) {
      open.inRedis = true
      open.local = undefined
      open.shadowing = undefined
    }
    fallback = undefined
    startRenewal()
    callHook(onRecovered)
  }

  function startRenewal(): void {
    if (renewTimer !== undefined || closed || fallback !== undefined || openLeases.size === 0) {
      return
    }
    renewTimer = setInterval(renew, Math.min(config.leaseTtlMs / 3, maxDelay))
    ;(renewTimer as { unref?: () => void }).unref?.()
  }

  function stopRenewal(): void {
    if (renewTimer === undefined) return
    clearInterval(renewTimer)
    renewTimer = undefined
  }

  function renew(): void {
    const held = [...openLeases].filter((open) => open.inRedis)
    if (held.length === 0 || fallback !== undefined) {
      stopRenewal()
      return
    }
    const leases = held.map((open) => [open.index + 1, open.id])
    script('renew', 'renew', allKeys, [
      clockArg(),
      config.leaseTtlMs,
      JSON.stringify(leases),
    ]).catch((error: unknown) => {
      degrade(asUnavailable(error, 'renew'))
    })
  }

  function leaseFor(entry: OpenLease): KeyLease {
    const key = keys[entry.index] as PoolKey
    let reported = false
    let committed: Promise<void> | undefined
    return {
      keyId: key.id,
      secret: key.secret,
      metadata: key.metadata,
      commit(): void {
        if (reported || committed !== undefined) return
        committed = commitLease(entry)
      },
      async report(outcome: KeyOutcome): Promise<void> {
        if (reported) return
        reported = true
        // Renewal stops for this lease now: it is never renewed after its report.
        openLeases.delete(entry)
        if (openLeases.size === 0) stopRenewal()
        await committed
        await record(entry, outcome)
        waiters[0]?.attempt(true)
      },
    }
  }

  function open(
    index: number,
    id: string,
    inRedis: boolean,
    lease: { gen: number; probe: boolean },
    local?: OpenLease['local'],
  ) {
    const entry: OpenLease = { index, id, ...lease, inRedis, local, shadowing: undefined }
    openLeases.add(entry)
    return leaseFor(entry)
  }

  /** Only a probe's commit changes anything (it closes the circuit or re-enables the key). */
  async function commitLease(entry: OpenLease): Promise<void> {
    await entry.shadowing
    if (entry.local !== undefined) {
      entry.local.lease.commit()
      return
    }
    if (!entry.probe || fallback !== undefined) return
    const [stateKey, leasesKey] = redisKeys[entry.index] as string[]
    try {
      const [row, events] = await script<RowReply>(
        'commit',
        'commit',
        [stateKey as string, leasesKey as string],
        [clockArg(), entry.id],
      )
      learn(entry.index, row)
      tellEvents(events, entry.index)
    } catch (error) {
      degrade(asUnavailable(error, 'commit'))
    }
  }

  async function record(lease: OpenLease, outcome: KeyOutcome): Promise<void> {
    await ready()
    const retryAfterMs =
      outcome.kind === 'rate-limited' && outcome.retryAfterMs !== undefined
        ? outcome.retryAfterMs
        : undefined
    let current = fallback
    if (current === undefined) {
      try {
        const [, , row, events] = await script<ReportReply>(
          'report',
          'report',
          redisKeys[lease.index] as string[],
          [
            clockArg(),
            config.leaseTtlMs,
            lease.id,
            outcome.kind,
            retryAfterMs === undefined ? '' : String(retryAfterMs),
            configJson,
            lease.gen,
          ],
        )
        learn(lease.index, row)
        tellEvents(events, lease.index)
        return
      } catch (error) {
        current = degrade(asUnavailable(error, 'report'))
      }
    } else probe()
    await lease.shadowing
    if (lease.local?.fallback === current) {
      await lease.local.lease.report(outcome)
      if (lease.inRedis) current.release.push(lease.id)
      return
    }
    // A Redis lease with no local slot: its key was not usable locally when the outage began,
    // or this report is what found Redis gone.
    if (outcome.kind === 'auth-failed') {
      // The timed hold a report gives, here and (with the local state) in Redis at recovery;
      // disable() would be an operator hold that never ends.
      current.pool[authFailedWithoutLease](ids[lease.index] as string)
      current.release.push(lease.id)
      return
    }
    current.replay.push({
      key: lease.index + 1,
      lease: lease.id,
      gen: lease.gen,
      kind: outcome.kind,
      ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      at: localNow(),
    })
  }

  async function acquireLocally(current: Fallback, options: AcquireOptions) {
    const result = await current.pool.acquire({ exclude: options.exclude })
    if (result.kind !== 'leased') return result
    const index = indexOf.get(result.lease.keyId) ?? 0
    const lease = open(
      index,
      nextId(),
      false,
      { gen: 0, probe: false },
      { fallback: current, lease: result.lease },
    )
    return { kind: 'leased', lease } as const
  }

  function answer(verdict: AcquireReply[0], id: string): AcquireResult {
    switch (verdict[0]) {
      case 'leased': {
        const lease = open(verdict[1] - 1, id, true, { gen: verdict[2], probe: verdict[3] === 1 })
        startRenewal()
        return { kind: 'leased', lease }
      }
      case 'busy': {
        const retryInMs = Number(verdict[1])
        return { kind: 'busy', retryInMs: retryInMs < 0 ? undefined : retryInMs }
      }
      case 'cooling':
        return { kind: 'cooling', retryInMs: Number(verdict[1]), rateLimited: verdict[2] === 1 }
      default: {
        if (verdict[1] === 'all-excluded') return { kind: 'unavailable', reason: 'all-excluded' }
        // cjson writes an empty list as {}.
        const rejected = Array.isArray(verdict[2]) ? verdict[2] : []
        const rejectedKeyIds = rejected.map((index) => ids[index - 1] as string)
        return { kind: 'unavailable', reason: 'all-disabled', rejectedKeyIds }
      }
    }
  }

  /** One answer, from Redis or (while it is down) from the local fallback. */
  async function acquireOnce(options: AcquireOptions): Promise<AcquireResult> {
    await ready()
    let current = fallback
    if (current === undefined) {
      const id = nextId()
      const exclude = options.exclude
      try {
        const [verdict, , rows, events] = await script<AcquireReply>(
          'acquire',
          'acquire',
          [cursorKey, ...allKeys],
          [
            clockArg(),
            config.leaseTtlMs,
            id,
            config.selection,
            configJson,
            ...ids.flatMap((keyId, index) => {
              const [limit, weight] = perKeyArgs[index] as number[]
              return [
                exclude?.has(keyId) ? 1 : 0,
                limit === undefined || limit === Number.POSITIVE_INFINITY ? -1 : limit,
                weight ?? 1,
              ]
            }),
          ],
        )
        learnAll(rows)
        tellEvents(events)
        return answer(verdict, id)
      } catch (error) {
        // Redis may still run it: free the slot it would take when Redis is back.
        abandoned.push(id)
        if (abandoned.length > maxAbandoned) abandoned.shift()
        current = degrade(asUnavailable(error, 'acquire'))
      }
    } else probe()
    return acquireLocally(current, options)
  }

  async function setDisabled(id: string, disabled: boolean): Promise<void> {
    const index = indexOf.get(id)
    if (index === undefined) return
    await ready()
    let current = fallback
    if (current === undefined) {
      const operation = disabled ? 'disable' : 'enable'
      const [stateKey, leasesKey] = redisKeys[index] as string[]
      try {
        const [row, events] = await script<RowReply>(
          operation,
          'toggle',
          [stateKey as string, leasesKey as string],
          [clockArg(), disabled ? 1 : 0],
        )
        learn(index, row)
        tellEvents(events, index)
        if (!disabled) waiters[0]?.attempt(true)
        return
      } catch (error) {
        current = degrade(asUnavailable(error, operation))
      }
    } else probe()
    await (disabled ? current.pool.disable(id) : current.pool.enable(id))
  }

  return {
    get degraded(): boolean {
      return fallback !== undefined
    },
    async acquire(acquireOptions: AcquireOptions = {}): Promise<AcquireResult> {
      if (keys.length === 0) return { kind: 'unavailable', reason: 'no-keys' }
      const { signal } = acquireOptions
      if (signal?.aborted) throw signal.reason
      const waitMs = acquireOptions.waitMs ?? 0
      // Waiters of this replica go first: a newcomer does not take the slot a release frees.
      if (waiters.length > 0) {
        return waitMs > 0
          ? waitForSlot(waiters, acquireOnce, acquireOptions, waitMs)
          : { kind: 'busy', retryInMs: undefined }
      }
      const result = await acquireOnce(acquireOptions)
      if (result.kind !== 'busy' || !(waitMs > 0)) return result
      // Aborted while Redis answered: do not start waiting.
      if (signal?.aborted) throw signal.reason
      return waitForSlot(waiters, acquireOnce, acquireOptions, waitMs)
    },
    enable(id: string): Promise<void> {
      return setDisabled(id, false)
    },
    disable(id: string): Promise<void> {
      return setDisabled(id, true)
    },
    async stats(): Promise<readonly KeyStats[]> {
      await ready()
      let current = fallback
      if (current === undefined) {
        try {
          const [, rows] = await script<RowsReply>('stats', 'stats', allKeys, [clockArg()])
          learnAll(rows)
          return known.map((state, index) => ({
            id: ids[index] as string,
            leases: state.leases,
            inflight: rows[index]?.[5] ?? 0,
            outcomes: { ...state.outcomes },
          }))
        } catch (error) {
          current = degrade(asUnavailable(error, 'stats'))
        }
      } else probe()
      // The last counts read from Redis plus this outage's local ones.
      const shadows = current.shadows
      return (await current.pool.stats()).map((local, index) => {
        const state = known[index]
        return {
          id: local.id,
          leases: (state?.leases ?? 0) + local.leases - (shadows[index] ?? 0),
          inflight: local.inflight,
          outcomes: Object.fromEntries(
            outcomeKinds.map((kind) => [kind, (state?.outcomes[kind] ?? 0) + local.outcomes[kind]]),
          ) as Record<OutcomeKind, number>,
        }
      })
    },
    toJSON(): KeyPoolSnapshot {
      return fallback === undefined ? snapshot() : fallback.pool.toJSON()
    },
    close(): void {
      closed = true
      stopRenewal()
    },
  }
}
