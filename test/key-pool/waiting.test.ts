import { afterEach, describe, expect, it, vi } from 'vitest'
import type { AcquireResult, KeyLease } from '../../src/advanced.js'
import { createMemoryKeyPool, type PoolKey } from '../../src/index.js'
import { capWorkload } from './cap-workload.js'

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-waiting-0123456789` }))

async function leased(result: Promise<AcquireResult>): Promise<KeyLease> {
  const settled = await result
  if (settled.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(settled)}`)
  return settled.lease
}

describe('memory pool: waiting at the in-flight cap', () => {
  afterEach(() => {
    vi.restoreAllMocks()
  })

  it('serves 100 concurrent requests on 2 keys × maxInflight 3, woken by releases: ≤ 5 acquire calls each', async () => {
    const pool = createMemoryKeyPool(keys('a', 'b'), { maxInflight: 3 })
    const started = Date.now()
    const { results, calls, maxHeld } = await capWorkload(pool, 100, 50)
    expect(results.every((kind) => kind === 'leased')).toBe(true)
    expect(calls).toBeLessThanOrEqual(5 * 100)
    // One call, then one waiting call, for every request that found both keys busy.
    expect(calls).toBeLessThanOrEqual(2 * 100)
    expect(maxHeld).toBe(3)
    // 17 waves of 6 leases held 50 ms: the releases hand slots on without any polling gap.
    expect(Date.now() - started).toBeLessThan(17 * 50 + 600)
    expect((await pool.stats()).map((key) => [key.inflight, key.leases])).toEqual([
      [0, 50],
      [0, 50],
    ])
  })

  it('serves waiters first come, first served; a waiter whose exclude rules the freed key out keeps its place', async () => {
    const pool = createMemoryKeyPool(keys('a', 'b'), { maxInflight: 1 })
    const a = await leased(pool.acquire())
    const b = await leased(pool.acquire())
    const order: string[] = []
    const wait = (name: string, exclude?: string[]) =>
      leased(
        pool.acquire({
          waitMs: 5000,
          ...(exclude === undefined ? {} : { exclude: new Set(exclude) }),
        }),
      ).then((lease) => {
        order.push(`${name}:${lease.keyId}`)
        return lease
      })
    const first = wait('first', ['a'])
    const second = wait('second')
    const third = wait('third')
    await a.report({ kind: 'success' })
    // The slot went to the queue at once: a newcomer cannot barge past it.
    expect(await pool.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
    await b.report({ kind: 'success' })
    await (await second).report({ kind: 'success' })
    await (await first).report({ kind: 'success' })
    await (await third).report({ kind: 'success' })
    expect(order).toEqual(['second:a', 'first:b', 'third:a'])
    expect((await pool.stats()).map((key) => key.inflight)).toEqual([0, 0])
  })

  it('an abort removes the waiter (it rejects with the reason); the next release goes to the next waiter', async () => {
    const pool = createMemoryKeyPool(keys('a'), { maxInflight: 1 })
    const holder = await leased(pool.acquire())
    const controller = new AbortController()
    const aborted = pool.acquire({ waitMs: 5000, signal: controller.signal })
    const next = pool.acquire({ waitMs: 5000 })
    const reason = new Error('client went away')
    controller.abort(reason)
    await expect(aborted).rejects.toBe(reason)
    await holder.report({ kind: 'success' })
    const lease = await leased(next)
    expect(lease.keyId).toBe('a')
    await lease.report({ kind: 'success' })
    expect((await pool.stats())[0]).toMatchObject({ inflight: 0, leases: 2 })
    await expect(pool.acquire({ waitMs: 10, signal: controller.signal })).rejects.toBe(reason)
  })

  it('a wait holds the process with one timer that is always cleared; at its end it answers busy as usual', async () => {
    const timers: ReturnType<typeof setTimeout>[] = []
    const realSet = globalThis.setTimeout
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, ms?: number) => {
      const timer = realSet(fn, ms)
      timers.push(timer)
      return timer
    }) as typeof setTimeout)
    const cleared = vi.spyOn(globalThis, 'clearTimeout')
    const pool = createMemoryKeyPool(keys('a'), { maxInflight: 1 })
    const holder = await leased(pool.acquire())
    const timedOut = pool.acquire({ waitMs: 30 })
    expect(timers).toHaveLength(1)
    // Request-scoped: not unref'd, so a script awaiting this request does not exit early.
    expect(timers[0]?.hasRef()).toBe(true)
    expect(await timedOut).toEqual({ kind: 'busy', retryInMs: undefined })
    const served = pool.acquire({ waitMs: 60_000 })
    const aborted = new AbortController()
    const gone = pool.acquire({ waitMs: 60_000, signal: aborted.signal })
    expect(timers).toHaveLength(3)
    aborted.abort(new Error('gone'))
    await expect(gone).rejects.toThrow('gone')
    await holder.report({ kind: 'success' })
    await (await leased(served)).report({ kind: 'success' })
    // Cleared when its waiter was served or aborted: nothing holds a script for a minute.
    expect(cleared).toHaveBeenCalledWith(timers[1])
    expect(cleared).toHaveBeenCalledWith(timers[2])
  })

  it('a waiter learns at once when the key it waits for starts cooling instead', async () => {
    const pool = createMemoryKeyPool(keys('a'), { maxInflight: 1, now: () => 1_000 })
    const holder = await leased(pool.acquire())
    const waiting = pool.acquire({ waitMs: 60_000 })
    await holder.report({ kind: 'rate-limited', retryAfterMs: 2000 })
    expect(await waiting).toEqual({ kind: 'cooling', retryInMs: 2000, rateLimited: true })
  })
})
