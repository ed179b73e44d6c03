import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, it } from 'vitest'
import { createRedisKeyPool, type RedisKeyPool } from '../../src/redis.js'
import { checkLeaseProperty } from '../retry/lease-property.js'
import { runs } from '../support/runs.js'
import { connected, freshPrefix, type RedisServer, startRedisServer } from './redis-server.js'

let server: RedisServer
let redis: Redis
const pools: RedisKeyPool[] = []

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
})

afterAll(async () => {
  for (const pool of pools) pool.close()
  redis?.disconnect()
  await server?.close()
})

describe('lease property on the Redis pool', () => {
  it('a throw or an abort at any await point of an attempt leaves every in-flight count at 0 and the outcome counts equal to the leases (real redis-server)', async () => {
    await checkLeaseProperty(
      async (keys, options) => {
        const pool = createRedisKeyPool(keys, { ...options, redis, prefix: freshPrefix('lease') })
        pools.push(pool)
        return pool
      },
      { numRuns: runs(12), realTimers: true },
    )
  }, 120_000)
})
