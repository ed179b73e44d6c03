import { describe, expect, it } from 'vitest'
import {
  createMemoryKeyPool,
  type KeyOutcome,
  type KeySelection,
  type PoolKey,
} from '../../src/index.js'
import { FreeIndex } from '../../src/key-pool/free-index.js'

/**
 * Keys whose every property read is counted: what an acquire touches of each key. A pool
 * that looks at every key per acquire (a scan, a sort) reads each one's `id`.
 */
function countedKeys(count: number): { keys: PoolKey[]; reads: () => number } {
  let reads = 0
  const keys = Array.from({ length: count }, (_, i): PoolKey => {
    const key: PoolKey = { id: `k${i}`, secret: `sk-${i}-scale-0123456789`, weight: 1 + (i % 3) }
    return new Proxy(key, {
      get(target, property, receiver) {
        reads++
        return Reflect.get(target, property, receiver)
      },
    })
  })
  return { keys, reads: () => reads }
}

/**
 * Reads of the keys per acquire + commit + report, over a workload that excludes a tried key,
 * holds leases open, rate-limits one report in eight (a cooldown that ends a few acquires
 * later) and fails one in thirteen with a server error.
 */
async function readsPerRequest(selection: KeySelection, count: number): Promise<number> {
  const { keys, reads } = countedKeys(count)
  let clock = 5_000_000
  const pool = createMemoryKeyPool(keys, {
    selection,
    now: () => clock,
    minCooldownMs: 40,
    maxInflight: 4,
  })
  const open: { report: (outcome: KeyOutcome) => Promise<void> }[] = []
  const requests = 400
  const before = reads()
  for (let i = 0; i < requests; i++) {
    clock += 10
    const result = await pool.acquire({ exclude: new Set([`k${i % count}`]), cost: { tokens: 50 } })
    if (result.kind !== 'leased') throw new Error(`expected a lease, got ${result.kind}`)
    result.lease.commit()
    open.push(result.lease)
    if (open.length < 3) continue
    const held = open.shift() as (typeof open)[number]
    const outcome: KeyOutcome =
      i % 8 === 0
        ? { kind: 'rate-limited', retryAfterMs: 40 }
        : i % 13 === 0
          ? { kind: 'server-error', status: 500 }
          : {
              kind: 'success',
              headroom: { requestsRemaining: 1000, requestsResetMs: 60_000 },
            }
    await held.report(outcome)
  }
  return (reads() - before) / requests
}

describe('memory pool at scale: what an acquire touches does not grow with the keys', () => {
  // `headroom` weighs every free key's predicted budget against the best one's on each pick
  // (see docs/key-pools.md): it scans the free keys, without reading them here.
  it.each(['round-robin', 'least-inflight', 'weighted', 'fastest'] as const)(
    '%s: the same reads of the keys per request at 1,000 keys as at 4',
    async (selection) => {
      const four = await readsPerRequest(selection, 4)
      const thousand = await readsPerRequest(selection, 1000)
      // The leased key's id, secret and metadata, its id again when re-filed and in a state
      // event; nothing of the other keys (the pool before this change read every key's id:
      // 7.1 reads a request at 4 keys, 1,003 at 1,000).
      expect(four).toBeLessThan(8)
      expect(thousand).toBe(four)
    },
  )
})

describe('the free-key index: O(log n) nodes per operation', () => {
  it('set, firstFrom and nth look at no more than 2 log2(n) + 4 nodes each at 4 and at 1,000 keys', () => {
    for (const count of [4, 1000]) {
      const index = new FreeIndex(count)
      let seed = 11
      const draw = (n: number) => {
        seed = (seed * 48_271) % 2_147_483_647
        return seed % n
      }
      for (let i = 0; i < count; i++) index.set(i, draw(5))
      const bound = 2 * Math.ceil(Math.log2(count)) + 4
      let worst = 0
      for (let i = 0; i < 2000; i++) {
        const before = index.visits
        const op = draw(3)
        if (op === 0) index.set(draw(count), draw(4) === 0 ? undefined : draw(5))
        else if (op === 1) index.firstFrom(draw(count), index.least)
        else if (index.count > 0) index.nth(draw(index.count))
        worst = Math.max(worst, index.visits - before)
      }
      // firstFrom may descend two paths (the one from `from`, and the wrap to 0).
      expect(worst).toBeLessThanOrEqual(2 * bound)
      expect(worst).toBeGreaterThan(0)
    }
  })

  it('firstFrom finds the first key at or after the cursor with the least value, wrapping', () => {
    const index = new FreeIndex(6)
    for (const [position, value] of [
      [0, 2],
      [1, 1],
      [3, 1],
      [5, 3],
    ] as const) {
      index.set(position, value)
    }
    expect(index.least).toBe(1)
    expect(index.firstFrom(2, 1)).toBe(3)
    expect(index.firstFrom(4, 1)).toBe(1)
    expect(index.firstFrom(4, Number.POSITIVE_INFINITY)).toBe(5)
    expect([0, 1, 2, 3].map((k) => index.nth(k))).toEqual([0, 1, 3, 5])
    index.set(1, undefined)
    index.set(3, undefined)
    expect(index.least).toBe(2)
    expect(index.count).toBe(2)
  })
})
