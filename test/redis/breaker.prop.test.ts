import type { Redis } from 'ioredis'
import { afterAll, beforeAll } from 'vitest'
import { createRedisKeyPool, type RedisKeyPool } from '../../src/redis.js'
import { describeBreakerProperties } from '../key-pool/breaker-properties.js'
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

// The same properties as the memory pool's, through the Lua scripts (fewer runs: each step
// is a round trip to a real redis-server).
describeBreakerProperties(
  'redis pool',
  async (keys, options) => {
    const pool = createRedisKeyPool(keys, { ...options, redis, prefix: freshPrefix('breaker') })
    pools.push(pool)
    return pool
  },
  15,
)
