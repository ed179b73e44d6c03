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

describe('memory pool: headroom waits for a refill instead of sending into a key predicted out', () => {
  /** A pool whose every key states it is out, resetting in `resetMs` (key a first). */
  async function allOut(resetMs: Record<string, number>) {
    const pool = createMemoryKeyPool(keys(...Object.keys(resetMs)), { selection: 'headroom' })
    for (const [id, ms] of Object.entries(resetMs)) {
      const others = new Set(Object.keys(resetMs).filter((other) => other !== id))
      const held = await leased(pool.acquire({ exclude: others }))
      await held.report({
        kind: 'success',
        headroom: { requestsRemaining: 0, requestsResetMs: ms },
      })
    }
    return pool
  }

  it('waits within waitMs for the key that refills first, and leases it then (not before)', async () => {
    const pool = await allOut({ a: 5000, b: 80 })
    const started = Date.now()
    const lease = await leased(pool.acquire({ waitMs: 2000 }))
    expect(lease.keyId).toBe('b')
    expect(Date.now() - started).toBeGreaterThanOrEqual(70)
    expect(Date.now() - started).toBeLessThan(1500)
  })

  it('a wait that ends before any refill answers busy with the time left, sending nothing', async () => {
    const pool = await allOut({ a: 5000, b: 4000 })
    const result = await pool.acquire({ waitMs: 30 })
    expect(result.kind).toBe('busy')
    expect((result as { retryInMs: number }).retryInMs).toBeGreaterThan(3500)
    expect((await pool.stats()).map((key) => key.leases)).toEqual([1, 1])
  })

  it('a report that states room wakes the waiter at once', async () => {
    const pool = createMemoryKeyPool(keys('a'), { selection: 'headroom' })
    const first = await leased(pool.acquire())
    const second = await leased(pool.acquire())
    await first.report({
      kind: 'success',
      headroom: { requestsRemaining: 0, requestsResetMs: 10_000 },
    })
    const started = Date.now()
    const waiting = pool.acquire({ waitMs: 5000 })
    // The newer lease's statement: 5 left.
    await second.report({
      kind: 'success',
      headroom: { requestsRemaining: 5, requestsResetMs: 10_000 },
    })
    expect((await leased(waiting)).keyId).toBe('a')
    expect(Date.now() - started).toBeLessThan(1000)
  })

  it('the acquire’s signal ends the wait: it rejects with the reason and takes no lease later', async () => {
    const pool = await allOut({ a: 150 })
    const aborted = new AbortController()
    const gone = pool.acquire({ waitMs: 5000, signal: aborted.signal })
    aborted.abort(new Error('client left'))
    await expect(gone).rejects.toThrow('client left')
    await new Promise((resolve) => setTimeout(resolve, 200))
    // a refilled: the next acquire gets it; the aborted waiter took nothing.
    expect((await leased(pool.acquire())).keyId).toBe('a')
    expect((await pool.stats())[0]?.leases).toBe(2)
  })
})

describe('memory pool: a long queue costs one look at the keys per release', () => {
  it('a release with 50 waiters asks the keys twice (the one served, the next found busy), not 50 times; FIFO order kept', async () => {
    let looks = 0
    const pool = createMemoryKeyPool(keys('a', 'b'), {
      maxInflight: 1,
      now: () => {
        looks++
        return 1_000
      },
    })
    const a = await leased(pool.acquire())
    const b = await leased(pool.acquire())
    const order: number[] = []
    const waiting = Array.from({ length: 50 }, (_, i) =>
      leased(pool.acquire({ waitMs: 5000 })).then((lease) => {
        order.push(i)
        return lease
      }),
    )
    looks = 0
    await a.report({ kind: 'success' })
    // The report's own clock reads, the served waiter's and the next one's look: not 50.
    expect(looks).toBeLessThanOrEqual(4)
    await b.report({ kind: 'success' })
    for (let served = 2; served <= 50; served++) {
      const lease = await waiting[served - 2]
      await lease?.report({ kind: 'success' })
    }
    await Promise.all(waiting)
    expect(order).toEqual(Array.from({ length: 50 }, (_, i) => i))
  })
})
