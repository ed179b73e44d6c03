/**
 * `stream-boundary/redis`: a key pool whose state is shared by many gateway replicas through
 * Redis (ioredis, an optional peer dependency), with a local fallback while Redis is down.
 *
 * @module stream-boundary/redis
 */

export type { RedisPoolOperation } from './redis/errors.js'
export { isRedisUnavailableError, RedisUnavailableError } from './redis/errors.js'
export type { RedisKeyPool, RedisKeyPoolOptions } from './redis/options.js'
export { redisKeyPoolDefaults } from './redis/options.js'
export { createRedisKeyPool } from './redis/pool.js'
