import type { AcquireOptions } from '../../src/advanced.js'
import type { KeyPool } from '../../src/index.js'

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** The relay's way: ask, and when every candidate is only busy, wait for a release. */
async function acquireLikeRelay(pool: KeyPool, options: AcquireOptions = {}) {
  const first = await pool.acquire(options)
  if (first.kind !== 'busy') return first
  return pool.acquire({ ...options, waitMs: 10_000 })
}

/** Runs `requests` concurrent attempts holding their lease `holdMs`; counts acquire calls. */
export async function capWorkload(pool: KeyPool, requests: number, holdMs: number) {
  let calls = 0
  const counted: KeyPool = {
    ...pool,
    acquire: (options) => {
      calls++
      return pool.acquire(options)
    },
  }
  const held = new Map<string, number>()
  let maxHeld = 0
  /** Summed over requests: time from the first acquire call to the answer. */
  let waitedMs = 0
  const results = await Promise.all(
    Array.from({ length: requests }, async () => {
      const asked = Date.now()
      const result = await acquireLikeRelay(counted)
      waitedMs += Date.now() - asked
      if (result.kind !== 'leased') return result.kind
      const id = result.lease.keyId
      held.set(id, (held.get(id) ?? 0) + 1)
      maxHeld = Math.max(maxHeld, held.get(id) ?? 0)
      await sleep(holdMs)
      held.set(id, (held.get(id) ?? 0) - 1)
      await result.lease.report({ kind: 'success' })
      return 'leased'
    }),
  )
  return { results, calls, maxHeld, waitedMs }
}
