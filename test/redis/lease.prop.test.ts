import { describe, it } from 'vitest'
import { checkLeaseProperty } from '../retry/lease-property.js'
import { runs } from '../support/runs.js'
import { useRedisPools } from './redis-server.js'

const redis = useRedisPools('lease')

describe('lease property on the Redis pool', () => {
  it('a throw or an abort at any await point of an attempt leaves every in-flight count at 0 and the outcome counts equal to the leases (real redis-server)', async () => {
    await checkLeaseProperty(async (keys, options) => redis.pool(keys, options), {
      numRuns: runs(12),
      realTimers: true,
    })
  }, 120_000)
})
