import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { KeySelection, PoolKey } from '../../src/index.js'
import { createRedisKeyPool } from '../../src/redis.js'
import { connected, freshPrefix, type RedisServer, startRedisServer } from './redis-server.js'

let server: RedisServer
let redis: Redis
let observer: Redis

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
  observer = await connected(server.port)
})

afterAll(async () => {
  redis?.disconnect()
  observer?.disconnect()
  await server?.close()
})

/** Every command Redis ran (scripts' own commands included), by name, from INFO commandstats. */
async function commandCalls(): Promise<Map<string, number>> {
  const calls = new Map<string, number>()
  for (const line of (await observer.info('commandstats')).split('\n')) {
    const match = /^cmdstat_([a-z_|]+):calls=(\d+)/.exec(line)
    if (match) calls.set(match[1] as string, Number(match[2]))
  }
  return calls
}

const requests = 60

/**
 * The commands Redis runs inside the pool's scripts per request (acquire, commit, report),
 * on a fixed clock: every 10th request is a 429 that cools its key for a second, every 7th
 * excludes a key, every request states headroom.
 */
async function commandsPerRequest(selection: KeySelection, count: number): Promise<number> {
  let clock = 50_000_000
  const keys: PoolKey[] = Array.from({ length: count }, (_, i) => ({
    id: `k${i}`,
    secret: `sk-scale-${i}-0123456789`,
    weight: 1 + (i % 3),
  }))
  const pool = createRedisKeyPool(keys, {
    redis,
    prefix: freshPrefix(`scale-${selection}-${count}`),
    selection,
    maxInflight: 4,
    now: () => clock,
  })
  const run = async (i: number) => {
    const result = await pool.acquire({
      exclude: i % 7 === 3 ? new Set(['k1']) : undefined,
      cost: { tokens: 100 },
    })
    if (result.kind !== 'leased') throw new Error(`request ${i}: ${result.kind}`)
    clock += 20
    result.lease.commit()
    await result.lease.report(
      i % 10 === 9
        ? { kind: 'rate-limited', retryAfterMs: 1000 }
        : {
            kind: 'success',
            headroom: { requestsRemaining: 500 - i, requestsResetMs: 30_000 },
          },
    )
    clock += 80
  }
  // The first requests build the index and meet every key's first statement.
  for (let i = 0; i < 10; i++) await run(i)
  await observer.config('RESETSTAT')
  for (let i = 10; i < 10 + requests; i++) await run(i)
  const calls = await commandCalls()
  pool.close()
  let inside = 0
  for (const [name, n] of calls) {
    if (!['evalsha', 'eval', 'info', 'config|resetstat', 'config'].includes(name)) inside += n
  }
  return inside / requests
}

describe('the Redis pool at 1,000 keys', () => {
  it.each<KeySelection>(['round-robin', 'least-inflight', 'weighted', 'fastest', 'headroom'])(
    '%s: the commands Redis runs per request do not grow with the key count (4 vs 1,000 keys, counted)',
    async (selection) => {
      const few = await commandsPerRequest(selection, 4)
      const some = await commandsPerRequest(selection, 100)
      const many = await commandsPerRequest(selection, 1000)
      // Today's pool ran at least 5 commands per key per acquire (over 5,000 at 1,000 keys).
      expect(few).toBeGreaterThan(10)
      // From 100 to 1,000 keys nothing grows; from 4, weighted and headroom meet more weight
      // classes (at most 21: the powers of two), which is what their picks iterate.
      expect(many, `${some} commands per request at 100 keys`).toBeLessThanOrEqual(some * 1.05)
      expect(many, `${few} commands per request at 4 keys`).toBeLessThanOrEqual(few * 1.2)
    },
    60_000,
  )
})
