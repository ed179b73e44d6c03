/**
 * `createRedisKeyPool`: the key pool with its state in Redis, shared by every replica, that
 * degrades to a local pool while Redis is down and merges back what changed when it returns.
 *
 * @module
 */

import { createMemoryKeyPool } from '../key-pool/memory.js'
import {
  type AuthFailureWithoutLease,
  authFailedWithoutLease,
  outcomeKinds,
} from '../key-pool/outcomes.js'
import type {
  AcquireOptions,
  AcquireResult,
  KeyLease,
  KeyOutcome,
  KeyPool,
  KeyPoolSnapshot,
  KeyStats,
  PoolKey,
} from '../key-pool/types.js'
import type { RedisUnavailableError } from './errors.js'
import { KnownKeys, RedisLink } from './link.js'
import type { RedisKeyPool, RedisKeyPoolOptions } from './options.js'
import {
  type AcquireReply,
  callHook,
  type Fallback,
  maxAbandoned,
  maxDelay,
  type OpenLease,
  type OutcomeKind,
  type ReportReply,
  type RowReply,
  type RowsReply,
  type SyncKey,
  type SyncPayload,
  seedOf,
  syncKeyOf,
} from './replies.js'
import { settingsOf } from './settings.js'
import { type RedisWaiter, waitForSlot } from './slot-queue.js'

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
  const {
    memoryOptions,
    onDegraded,
    onRecovered,
    config,
    client,
    ids,
    indexOf,
    perKeyArgs,
    tag,
    redisKeys,
    allKeys,
    cursorKey,
    localNow,
    clockArg,
    scriptConfig,
    configJson,
    known,
  } = settingsOf(keys, options)
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
