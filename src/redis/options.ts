/**
 * The Redis key pool's options, their defaults and their table, and what it is.
 *
 * @module
 */

import type { Cluster, Redis } from 'ioredis'
import { memoryKeyPoolDefaults } from '../advanced.js'
import type { MemoryKeyPoolOptions } from '../key-pool/memory.js'
import type { KeyPool } from '../key-pool/types.js'
import type { RedisUnavailableError } from './errors.js'

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

/** Every option of {@link RedisKeyPoolOptions}: a table the compiler keeps complete. */
export const redisOptionKeys = Object.keys({
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
} satisfies Record<keyof RedisKeyPoolOptions, true>)
