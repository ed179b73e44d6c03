/**
 * The relay's cost estimate is lazy (writing a long prompt's JSON out again costs CPU per
 * request): a pool reads `cost.tokens` only under `headroom` selection, the one that spends
 * tokens. Memory and Redis pools alike.
 */

import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  type KeyPool,
  type KeySelection,
  type PoolKey,
} from '../../src/index.js'
import { useRedisPools } from '../redis/redis-server.js'

const redisPools = useRedisPools('cost-read')
const keys: PoolKey[] = [
  { id: 'a', secret: 'sk-cost-read-a-0123456789' },
  { id: 'b', secret: 'sk-cost-read-b-0123456789' },
]
const selections: KeySelection[] = [
  'round-robin',
  'weighted',
  'least-inflight',
  'headroom',
  'fastest',
]
const makers: [string, (selection: KeySelection) => KeyPool][] = [
  ['memory', (selection) => createMemoryKeyPool(keys, { selection })],
  ['redis', (selection) => redisPools.pool(keys, { selection })],
]

describe.each(makers)('%s pool: reading the request cost', (_name, make) => {
  it.each(selections)(
    '%s reads cost.tokens only when it selects by headroom',
    async (selection) => {
      const pool = make(selection)
      let reads = 0
      const cost = {
        get tokens() {
          reads++
          return 100
        },
      }
      const got = await pool.acquire({ cost })
      expect(got.kind).toBe('leased')
      if (got.kind === 'leased') await got.lease.report({ kind: 'success' })
      if (selection === 'headroom') expect(reads).toBeGreaterThan(0)
      else expect(reads).toBe(0)
    },
  )
})
