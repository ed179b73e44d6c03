import { describeSelectionProperties } from '../key-pool/selection-properties.js'
import { runs } from '../support/runs.js'
import { useRedisPools } from './redis-server.js'

const redis = useRedisPools('selection')

// The same properties as the memory pool's, through the Lua scripts (fewer runs: each step
// is a round trip to a real redis-server).
describeSelectionProperties(
  'redis pool',
  async (keys, options) => redis.pool(keys, options),
  runs(3),
)
