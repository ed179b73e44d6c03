import { describeBreakerProperties } from '../key-pool/breaker-properties.js'
import { useRedisPools } from './redis-server.js'

const redis = useRedisPools('breaker')

// The same properties as the memory pool's, through the Lua scripts (fewer runs: each step
// is a round trip to a real redis-server).
describeBreakerProperties('redis pool', async (keys, options) => redis.pool(keys, options), 15)
