/**
 * `createRedisKeyPool`: the key pool with its state in Redis, shared by every replica, that
 * degrades to a local pool while Redis is down and merges back what changed when it returns.
 *
 * @module
 */

import { callSafely as callHook } from '../call-safely.js'
import { tokensOf } from '../key-pool/selection.js'
import type {
  AcquireOptions,
  AcquireResult,
  KeyLease,
  KeyOutcome,
  KeyPoolSnapshot,
  KeyStats,
  PoolKey,
} from '../key-pool/types.js'
import { PoolCommands } from './commands.js'
import type { RedisPoolOperation, RedisUnavailableError } from './errors.js'
import { KnownKeys } from './known-keys.js'
import { RedisLink } from './link.js'
import { OpenLeases } from './open-leases.js'
import type { RedisKeyPool, RedisKeyPoolOptions } from './options.js'
import {
  outageStats,
  recordLocally,
  resyncPayload,
  retryAfterOf,
  shadowOpenLeases,
  startFallback,
} from './outage.js'
import { type Fallback, maxAbandoned, type OpenLease, refusalOf, seedPayload } from './replies.js'
import { type PoolSettings, settingsOf } from './settings.js'
import { type RedisWaiter, waitForSlot } from './slot-queue.js'

/** Refusals of the local pool during an outage: it waited already, as the caller asked. */
const servedLocally = new WeakSet<AcquireResult>()

/**
 * Creates a {@link "stream-boundary"!KeyPool | KeyPool} whose state lives in Redis, shared by
 * every gateway replica that uses the same `prefix`: a 429 seen by one replica cools the key
 * for all, a 401 disables it everywhere, and `maxInflight` holds across the fleet.
 *
 * - Outcomes mean what they mean for
 *   {@link "stream-boundary"!createMemoryKeyPool | createMemoryKeyPool}: the same answers (`busy`
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
 * - Their Redis time does not grow with the number of keys: an index beside the keys' state
 *   (the free keys, when each key's state next changes, open leases by expiry, running
 *   weights per weight class) lets an acquire read only the keys whose time came and the
 *   one it picks. An answer without a lease when no key is free (`busy` at every cap,
 *   `cooling`, `unavailable`) reads every key. The index is built by the first call of a
 *   replica whose keys, caps, weights or selection Redis has not seen (and after a Redis
 *   restart or an outage's resync): O(keys), once.
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
  const pool = new RedisPool(keys, settingsOf(keys, options))
  return {
    get degraded(): boolean {
      return pool.degraded
    },
    acquire(acquireOptions: AcquireOptions = {}): Promise<AcquireResult> {
      return pool.acquire(acquireOptions)
    },
    enable(id: string): Promise<void> {
      return pool.setDisabled(id, false)
    },
    disable(id: string): Promise<void> {
      return pool.setDisabled(id, true)
    },
    stats(): Promise<readonly KeyStats[]> {
      return pool.stats()
    },
    toJSON(): KeyPoolSnapshot {
      return pool.toJSON()
    },
    close(): void {
      pool.close()
    },
  }
}

/**
 * One Redis key pool's state and steps. Each operation goes through {@link RedisPool.viaRedis}:
 * to Redis while it answers, else to the local fallback of the outage its failure starts.
 */
class RedisPool {
  private readonly replica = Array.from(crypto.getRandomValues(new Uint8Array(6)), (byte) =>
    byte.toString(16).padStart(2, '0'),
  ).join('')
  private serial = 0
  /** The change feed's `epoch:version` this replica learned up to (`index-lua.ts`). */
  private seen = ''
  private readonly link: RedisLink
  private readonly commands: PoolCommands
  private readonly known: KnownKeys
  private readonly openLeases: OpenLeases
  /** Ids of acquires that failed: Redis may still run them later; their slots are freed on resync. */
  private readonly abandoned: string[] = []
  /** This replica's acquires waiting at the in-flight cap, first come first served. */
  private readonly waiters: RedisWaiter[] = []
  /** The outage in progress, if any. */
  private fallback: Fallback | undefined
  private started = false
  /** A seed or resync in progress: operations wait for it. */
  private gate: Promise<void> | undefined
  private probing = false
  private lastProbe = 0
  private closed = false

  constructor(
    private readonly keys: readonly PoolKey[],
    private readonly settings: PoolSettings,
  ) {
    this.link = new RedisLink(settings.client, settings.config.commandTimeoutMs)
    this.commands = new PoolCommands(this.link, settings)
    this.known = new KnownKeys(settings.known, settings.ids, settings.memoryOptions.onKeyState)
    this.openLeases = new OpenLeases(
      this.commands,
      settings.config.leaseTtlMs,
      () => !this.closed && this.fallback === undefined,
      (error) => this.degrade(this.link.asUnavailable(error, 'renew')),
    )
  }

  get degraded(): boolean {
    return this.fallback !== undefined
  }

  async acquire(options: AcquireOptions): Promise<AcquireResult> {
    if (this.keys.length === 0) return { kind: 'unavailable', reason: 'no-keys' }
    const { signal } = options
    if (signal?.aborted) throw signal.reason
    const waitMs = options.waitMs ?? 0
    // Waiters of this replica go first: a newcomer does not take the slot a release frees.
    if (this.waiters.length > 0) {
      return waitMs > 0
        ? waitForSlot(this.waiters, this.acquireOnce, options, waitMs)
        : { kind: 'busy', retryInMs: undefined }
    }
    const result = await this.acquireOnce(options)
    if (result.kind !== 'busy' || !(waitMs > 0) || servedLocally.has(result)) return result
    // Aborted while Redis answered: do not start waiting.
    if (signal?.aborted) throw signal.reason
    // At the cap, or (headroom) every free key predicted out: the poll sees the refill.
    return waitForSlot(this.waiters, this.acquireOnce, options, waitMs)
  }

  async setDisabled(id: string, disabled: boolean): Promise<void> {
    const index = this.settings.indexOf.get(id)
    if (index === undefined) return
    await this.ready()
    await this.viaRedis(
      disabled ? 'disable' : 'enable',
      async () => {
        const [row, events] = await this.commands.toggle(index, disabled)
        this.known.learn(index, row, events)
        if (!disabled) this.waiters[0]?.attempt(true)
      },
      (current) => (disabled ? current.pool.disable(id) : current.pool.enable(id)),
    )
  }

  async stats(): Promise<readonly KeyStats[]> {
    await this.ready()
    return await this.viaRedis(
      'stats',
      async () => {
        const [, rows] = await this.commands.stats()
        this.known.learnAll(rows)
        return this.known.statsOf(rows)
      },
      // The last counts read from Redis plus this outage's local ones.
      (current) => outageStats(current, this.known.states),
    )
  }

  toJSON(): KeyPoolSnapshot {
    return this.fallback === undefined ? this.known.snapshot() : this.fallback.pool.toJSON()
  }

  close(): void {
    this.closed = true
    this.openLeases.stopRenewal()
  }

  /**
   * Runs `remote` unless an outage is in progress; when Redis fails it, the outage starts.
   * During an outage, `local` serves from its fallback (and the pool may probe whether Redis
   * is back). Callers wait for `ready()` first; a lease's commit does not (its lease came
   * after the seed), so no call made after the commit reaches Redis before it.
   */
  private async viaRedis<T>(
    operation: RedisPoolOperation,
    remote: () => Promise<T>,
    local: (current: Fallback) => T | Promise<T>,
  ): Promise<T> {
    let current = this.fallback
    if (current === undefined) {
      try {
        return await remote()
      } catch (error) {
        current = this.degrade(this.link.asUnavailable(error, operation))
      }
    } else this.probe()
    return local(current)
  }

  /** One answer, from Redis or (while it is down) from the local fallback. */
  private readonly acquireOnce = async (options: AcquireOptions): Promise<AcquireResult> => {
    await this.ready()
    return await this.viaRedis(
      'acquire',
      () => this.acquireRemotely(options),
      (current) => this.acquireLocally(current, options),
    )
  }

  private async acquireRemotely(options: AcquireOptions): Promise<AcquireResult> {
    const id = this.nextId()
    try {
      const need = tokensOf(options.cost, this.settings.config.selection)
      const ask = () => this.commands.acquire(id, options.exclude, need, this.seen)
      let reply = await ask()
      if (reply[0][0] === 'index') {
        const [, events] = await this.commands.index()
        this.known.learnSome([], events)
        reply = await ask()
      }
      const [verdict, now, rows, events, seen] = reply
      this.known.learnSome(rows, events)
      this.seen = seen
      if (verdict[0] === 'index') throw new Error('the key index of the pool keeps changing')
      if (verdict[0] !== 'leased') return refusalOf(verdict, this.settings.ids)
      const lease = this.open(verdict[1] - 1, id, true, {
        gen: verdict[2],
        probe: verdict[3] === 1,
        acquiredAt: now,
        spent: [verdict[4], verdict[5]],
      })
      this.openLeases.startRenewal()
      return { kind: 'leased', lease }
    } catch (error) {
      // Redis may still run it: free the slot it would take when Redis is back.
      this.abandoned.push(id)
      if (this.abandoned.length > maxAbandoned) this.abandoned.shift()
      throw error
    }
  }

  /**
   * During an outage the local pool decides, and waits as a memory pool does (its own queue,
   * served by this replica's reports); its refusal is final.
   */
  private async acquireLocally(current: Fallback, options: AcquireOptions): Promise<AcquireResult> {
    const { exclude, cost, signal } = options
    const result = await current.pool.acquire({
      exclude,
      cost,
      ...(signal === undefined ? {} : { signal }),
      waitMs: options.waitMs ?? 0,
    })
    if (result.kind !== 'leased') {
      servedLocally.add(result)
      return result
    }
    const index = this.settings.indexOf.get(result.lease.keyId) ?? 0
    const lease = this.open(
      index,
      this.nextId(),
      false,
      { gen: 0, probe: false, acquiredAt: '', spent: ['0', '0'] },
      { fallback: current, lease: result.lease },
    )
    return { kind: 'leased', lease }
  }

  private nextId(): string {
    return `${this.replica}:${(this.serial++).toString(36)}`
  }

  /** Holds operations until a seed or resync `work` is done. */
  private track(work: Promise<void>): Promise<void> {
    const current: Promise<void> = work.finally(() => {
      if (this.gate === current) this.gate = undefined
    })
    this.gate = current
    return current
  }

  private async ready(): Promise<void> {
    if (!this.started) {
      this.started = true
      this.track(this.start())
    }
    if (this.gate !== undefined) await this.gate
  }

  /** The first call: `initialState` written, then the index checked (built if missing). */
  private async start(): Promise<void> {
    if (this.settings.memoryOptions.initialState !== undefined) await this.seed()
    if (this.fallback !== undefined) return
    try {
      const [, events] = await this.commands.index(true)
      this.known.learnSome([], events)
    } catch (error) {
      this.degrade(this.link.asUnavailable(error, 'seed'))
    }
  }

  /** Writes `initialState` for the keys Redis does not know yet. */
  private async seed(): Promise<void> {
    const { known, scriptConfig } = this.settings
    try {
      const [, rows, events] = await this.commands.sync(
        'seed',
        `${this.replica}:seed`,
        seedPayload(known, scriptConfig),
      )
      this.known.learnAll(rows, events)
    } catch (error) {
      this.degrade(this.link.asUnavailable(error, 'seed'))
    }
  }

  /** Switches to the local fallback (once per outage) and returns it. */
  private degrade(error: RedisUnavailableError): Fallback {
    if (this.fallback !== undefined) return this.fallback
    this.openLeases.stopRenewal()
    const current = startFallback(this.nextId(), this.keys, this.settings, this.known.snapshot())
    this.fallback = current
    this.lastProbe = Date.now()
    shadowOpenLeases(current, this.openLeases, this.settings.ids)
    callHook(this.settings.onDegraded, error)
    return current
  }

  /** While degraded: at most every `probeIntervalMs`, ping Redis in the background. */
  private probe(): void {
    if (this.fallback === undefined || this.probing || this.gate !== undefined || this.closed) {
      return
    }
    const at = Date.now()
    if (at - this.lastProbe < this.settings.config.probeIntervalMs) return
    this.lastProbe = at
    this.probing = true
    this.commands.ping().then(
      () => {
        this.probing = false
        if (this.fallback !== undefined && this.gate === undefined) this.track(this.resync())
      },
      () => {
        this.probing = false
      },
    )
  }

  /** Pushes the outage's changes back to Redis; on success Redis is the source of truth again. */
  private async resync(): Promise<void> {
    const current = this.fallback
    if (current === undefined) return
    const { scriptConfig, onRecovered } = this.settings
    const payload = await resyncPayload(current, this.openLeases, this.abandoned, scriptConfig)
    try {
      const [, rows, events] = await this.commands.sync('resync', current.id, payload)
      this.known.learnAll(rows, events)
    } catch {
      // Still unreachable: keep serving locally; a later probe tries again.
      this.lastProbe = Date.now()
      return
    }
    this.abandoned.splice(0, payload.release.length - current.release.length)
    for (const open of this.openLeases) {
      open.inRedis = true
      open.local = undefined
      open.shadowing = undefined
    }
    this.fallback = undefined
    this.openLeases.startRenewal()
    callHook(onRecovered)
  }

  private open(
    index: number,
    id: string,
    inRedis: boolean,
    lease: Pick<OpenLease, 'gen' | 'probe' | 'acquiredAt' | 'spent'>,
    local?: OpenLease['local'],
  ): KeyLease {
    const entry: OpenLease = { index, id, ...lease, inRedis, local, shadowing: undefined }
    this.openLeases.add(entry)
    return this.leaseFor(entry)
  }

  /** The caller's lease: `commit` once and never after `report`, `report` once. */
  private leaseFor(entry: OpenLease): KeyLease {
    const key = this.keys[entry.index] as PoolKey
    let reported = false
    let committed: Promise<void> | undefined
    return {
      keyId: key.id,
      secret: key.secret,
      metadata: key.metadata,
      commit: (): void => {
        if (reported || committed !== undefined) return
        committed = this.commitLease(entry)
      },
      report: async (outcome: KeyOutcome): Promise<void> => {
        if (reported) return
        reported = true
        // Renewal stops for this lease now: it is never renewed after its report.
        this.openLeases.delete(entry)
        await committed
        await this.record(entry, outcome)
        this.waiters[0]?.attempt(true)
      },
    }
  }

  /**
   * Only a probe's commit changes the key's health (it closes the circuit or re-enables the
   * key); under `fastest` every commit measures the key's time to first output.
   */
  private async commitLease(entry: OpenLease): Promise<void> {
    await entry.shadowing
    if (entry.local !== undefined) {
      entry.local.lease.commit()
      return
    }
    // A lease taken locally during an outage has no acquire time on Redis's clock.
    const timed = this.settings.config.selection === 'fastest' && entry.acquiredAt !== ''
    if ((!entry.probe && !timed) || this.fallback !== undefined) return
    await this.viaRedis(
      'commit',
      async () => {
        const [row, events] = await this.commands.commit(
          entry.index,
          entry.id,
          timed ? entry.acquiredAt : undefined,
        )
        this.known.learn(entry.index, row, events)
      },
      // Redis failed it: the commit is not replayed on the local pool.
      () => undefined,
    )
  }

  private async record(lease: OpenLease, outcome: KeyOutcome): Promise<void> {
    await this.ready()
    await this.viaRedis(
      'report',
      async () => {
        const [, , row, events] = await this.commands.report(
          lease.index,
          lease.id,
          lease,
          outcome.kind,
          retryAfterOf(outcome),
          outcome.kind === 'success' || outcome.kind === 'rate-limited'
            ? outcome.headroom
            : undefined,
        )
        this.known.learn(lease.index, row, events)
      },
      (current) =>
        recordLocally(
          current,
          lease,
          outcome,
          this.settings.ids[lease.index] as string,
          this.settings.localNow,
        ),
    )
  }
}
