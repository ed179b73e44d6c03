import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AcquireResult, KeyLease } from '../../src/advanced.js'
import type { PoolKey } from '../../src/index.js'
import { createRedisKeyPool, type RedisKeyPool, type RedisKeyPoolOptions } from '../../src/redis.js'
import { capWorkload, sleep } from '../key-pool/cap-workload.js'
import {
  connect,
  connected,
  freshPrefix,
  type RedisServer,
  startRedisServer,
} from './redis-server.js'

let server: RedisServer
let redis: Redis
const pools: RedisKeyPool[] = []
let scriptCalls = 0

beforeAll(async () => {
  server = await startRedisServer()
  redis = await connected(server.port)
  // Counts every script the pools run (EVALSHA, or EVAL when the script was not loaded).
  const send = redis.sendCommand.bind(redis)
  redis.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
    if (command.name === 'evalsha' || command.name === 'eval') scriptCalls++
    return (send as (...args: unknown[]) => unknown)(command, ...rest)
  }) as typeof redis.sendCommand
})

afterAll(async () => {
  for (const pool of pools) pool.close()
  redis?.disconnect()
  await server?.close()
})

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-waiting-0123456789` }))

function redisPool(
  poolKeys: readonly PoolKey[],
  options: Partial<RedisKeyPoolOptions> = {},
): RedisKeyPool {
  const pool = createRedisKeyPool(poolKeys, { redis, prefix: freshPrefix('wait'), ...options })
  pools.push(pool)
  return pool
}

async function leased(result: Promise<AcquireResult>): Promise<KeyLease> {
  const settled = await result
  if (settled.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(settled)}`)
  return settled.lease
}

describe('redis pool: waiting at the in-flight cap', () => {
  it('serves 100 concurrent requests on 2 keys × maxInflight 3 with ≤ 10 script calls per second per waiting request', async () => {
    const pool = redisPool(keys('a', 'b'), { maxInflight: 3 })
    await pool.stats()
    scriptCalls = 0
    const { results, calls, maxHeld, waitedMs } = await capWorkload(pool, 100, 50)
    expect(results.every((kind) => kind === 'leased')).toBe(true)
    expect(calls).toBeLessThanOrEqual(5 * 100)
    expect(maxHeld).toBe(3)
    // Every report runs one script too; only acquires are the waiting requests' cost.
    const acquireScripts = scriptCalls - 100
    expect(acquireScripts / (waitedMs / 1000)).toBeLessThanOrEqual(10)
    expect((await pool.stats()).map((key) => key.inflight)).toEqual([0, 0])
  })

  it("serves this replica's waiters first come, first served; an abort removes one", async () => {
    const pool = redisPool(keys('a'), { maxInflight: 1 })
    const holder = await leased(pool.acquire())
    const order: string[] = []
    const controller = new AbortController()
    const wait = (name: string, signal?: AbortSignal) =>
      pool.acquire({ waitMs: 5000, ...(signal === undefined ? {} : { signal }) }).then((result) => {
        order.push(name)
        return result
      })
    const first = wait('first')
    const aborted = wait('aborted', controller.signal)
    const third = wait('third')
    const reason = new Error('client went away')
    controller.abort(reason)
    await expect(aborted).rejects.toBe(reason)
    // A newcomer does not barge past the queue.
    expect(await pool.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
    await holder.report({ kind: 'success' })
    await (await leased(first)).report({ kind: 'success' })
    await (await leased(third)).report({ kind: 'success' })
    expect(order).toEqual(['first', 'third'])
    expect((await pool.stats())[0]).toMatchObject({ inflight: 0, leases: 3 })
  })

  it('a waiter is served by a release on another replica through its bounded poll, and times out as busy', async () => {
    const prefix = freshPrefix('cross')
    const holderPool = redisPool(keys('a'), { prefix, maxInflight: 1 })
    const waiterPool = redisPool(keys('a'), { prefix, maxInflight: 1 })
    const holder = await leased(holderPool.acquire())
    expect(await waiterPool.acquire({ waitMs: 120 })).toEqual({
      kind: 'busy',
      retryInMs: undefined,
    })
    const waiting = waiterPool.acquire({ waitMs: 5000 })
    await sleep(300)
    const before = scriptCalls
    const released = Date.now()
    await holder.report({ kind: 'success' })
    const lease = await leased(waiting)
    // Found within one poll interval (at most 100 ms), with a handful of calls.
    expect(Date.now() - released).toBeLessThan(250)
    expect(scriptCalls - before).toBeLessThanOrEqual(4)
    await lease.report({ kind: 'success' })
  })

  it('renews no lease after it is reported: the renewal stops with the last open lease', async () => {
    const pool = redisPool(keys('a'), { leaseTtlMs: 300 })
    const lease = await leased(pool.acquire())
    await sleep(250)
    const whileOpen = scriptCalls
    await sleep(250)
    // Renewed every 100 ms while open.
    expect(scriptCalls - whileOpen).toBeGreaterThanOrEqual(1)
    await lease.report({ kind: 'success' })
    const after = scriptCalls
    await sleep(400)
    expect(scriptCalls).toBe(after)
  })

  it('a pool used before its connection is ready waits for it instead of going local', async () => {
    const fresh = connect(server.port)
    expect(fresh.status).not.toBe('ready')
    const pool = createRedisKeyPool(keys('a'), {
      redis: fresh,
      prefix: freshPrefix('startup'),
      commandTimeoutMs: 2000,
    })
    const lease = await leased(pool.acquire())
    expect(pool.degraded).toBe(false)
    await lease.report({ kind: 'success' })
    expect((await pool.stats())[0]).toMatchObject({ inflight: 0, leases: 1 })
    pool.close()
    fresh.disconnect()
  })
})
