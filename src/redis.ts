/**
 * `stream-boundary/redis`: a key pool whose state is shared by many gateway replicas through
 * Redis (ioredis, an optional peer dependency), with a local fallback while Redis is down.
 *
 * @module stream-boundary/redis
 */

export type { RedisKeyPool, RedisKeyPoolOptions, RedisPoolOperation } from './redis/pool.js'
export {
  createRedisKeyPool,
  isRedisUnavailableError,
  RedisUnavailableError,
  redisKeyPoolDefaults,
} from './redis/pool.js'
