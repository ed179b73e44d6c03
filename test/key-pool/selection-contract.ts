import { describe, expect, it } from 'vitest'
import type { KeyLease } from '../../src/advanced.js'
import type { KeyPool, MemoryKeyPoolOptions, PoolKey } from '../../src/index.js'
import type { PoolFactory } from './pool-contract.js'

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-abcdefghijklmnop` }))

async function lease(pool: KeyPool, options: Parameters<KeyPool['acquire']>[0] = {}) {
  const result = await pool.acquire(options)
  if (result.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(result)}`)
  return result.lease
}

/** The selection table every KeyPool implementation passes (memory, Redis, its fallback). */
export function describeSelectionContract(name: string, make: PoolFactory): void {
  describe(`${name}: headroom and fastest selection`, () => {
    let clock = 2_000_000
    const now = () => clock
    const pool = (ids: string[], options: MemoryKeyPoolOptions = {}) =>
      make(keys(...ids), { ...options, now })

    /** Leases each key once, reporting what its headers said. */
    async function state(p: KeyPool, said: Record<string, Parameters<KeyLease['report']>[0]>) {
      const ids = Object.keys(said)
      for (let i = 0; i < ids.length; i++) {
        const held = await lease(p, { exclude: new Set(ids.filter((id) => id !== ids[i])) })
        await held.report(said[held.keyId] as Parameters<KeyLease['report']>[0])
      }
    }

    it('headroom: unknown headroom is round-robin, as by default', async () => {
      const p = await pool(['a', 'b', 'c'], { selection: 'headroom' })
      const order: string[] = []
      for (let i = 0; i < 6; i++) {
        const held = await lease(p)
        order.push(held.keyId)
        await held.report({ kind: 'success' })
      }
      expect(order).toEqual(['a', 'b', 'c', 'a', 'b', 'c'])
    })

    it('headroom: each lease spends its key locally, so concurrent acquires spread; a key predicted out is passed over until its reset; when every key is, the acquire is busy until the first refill, then one probe lease tries it', async () => {
      const p = await pool(['a', 'b', 'c'], { selection: 'headroom' })
      await state(p, {
        a: { kind: 'success', headroom: { requestsRemaining: 2, requestsResetMs: 10_000 } },
        b: { kind: 'success', headroom: { requestsRemaining: 2, requestsResetMs: 10_000 } },
        c: { kind: 'success', headroom: { requestsRemaining: 0, requestsResetMs: 5000 } },
      })
      const held: string[] = []
      for (let i = 0; i < 4; i++) held.push((await lease(p)).keyId)
      expect(held.sort()).toEqual(['a', 'a', 'b', 'b'])
      // Every key is predicted out: busy until the first refill (c's), never sent to.
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: 5000 })
      clock += 1000
      expect(await p.acquire({ exclude: new Set(['c']) })).toEqual({
        kind: 'busy',
        retryInMs: 9000,
      })
      // A wait that ends before the refill ends busy, with what is left of it.
      expect(await p.acquire({ waitMs: 20 })).toEqual({ kind: 'busy', retryInMs: 4000 })
      clock += 4000
      // c's reset passed: its headroom is unknown again and it is tried, by one lease (its
      // refill probe) until that lease reports.
      const probe = await lease(p)
      expect(probe.keyId).toBe('c')
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: 5000 })
      await probe.report({
        kind: 'success',
        headroom: { requestsRemaining: 2, requestsResetMs: 10_000 },
      })
      expect([(await lease(p)).keyId, (await lease(p)).keyId]).toEqual(['c', 'c'])
      expect((await p.acquire()).kind).toBe('busy')
    })

    it('headroom: a key lacking the tokens a request states is passed over for one that has them', async () => {
      const p = await pool(['a', 'b'], { selection: 'headroom' })
      await state(p, {
        a: { kind: 'success', headroom: { tokensRemaining: 400, tokensResetMs: 30_000 } },
        b: { kind: 'success', headroom: { tokensRemaining: 5000, tokensResetMs: 30_000 } },
      })
      for (let i = 0; i < 5; i++) {
        const held = await lease(p, { cost: { tokens: 500 } })
        expect(held.keyId).toBe('b')
        await held.report({ kind: 'success' })
      }
      // 2500 of b's 5000 tokens are spent: a small request may go to either, by headroom.
      const ids = new Set<string>()
      for (let i = 0; i < 6; i++) ids.add((await lease(p, { cost: { tokens: 50 } })).keyId)
      expect([...ids].sort()).toEqual(['a', 'b'])
    })

    it('headroom: picks in proportion to predicted headroom; an older lease cannot overwrite a newer statement', async () => {
      const p = await pool(['a', 'b'], { selection: 'headroom' })
      await state(p, {
        a: { kind: 'success', headroom: { requestsRemaining: 300, requestsResetMs: 60_000 } },
        b: { kind: 'success', headroom: { requestsRemaining: 100, requestsResetMs: 60_000 } },
      })
      const count = { a: 0, b: 0 }
      const open: KeyLease[] = []
      for (let i = 0; i < 40; i++) {
        const held = await lease(p)
        count[held.keyId as 'a' | 'b']++
        open.push(held)
      }
      expect(count.a).toBeGreaterThanOrEqual(28)
      expect(count.b).toBeGreaterThanOrEqual(6)
      // The newest lease of b says it has plenty; an older one's "0 left" arrives after it.
      const bs = open.filter((held) => held.keyId === 'b')
      await (bs.at(-1) as KeyLease).report({
        kind: 'success',
        headroom: { requestsRemaining: 5000, requestsResetMs: 60_000 },
      })
      await (bs[0] as KeyLease).report({
        kind: 'success',
        headroom: { requestsRemaining: 0, requestsResetMs: 60_000 },
      })
      const after = { a: 0, b: 0 }
      for (let i = 0; i < 20; i++) after[(await lease(p)).keyId as 'a' | 'b']++
      expect(after.b).toBeGreaterThan(after.a)
    })

    it('headroom: each key weighs its predicted requests left rounded down to a power of two (5000 → 4096, 1100 → 1024: exactly 4 picks to 1)', async () => {
      const p = await pool(['a', 'b'], { selection: 'headroom' })
      await state(p, {
        a: { kind: 'success', headroom: { requestsRemaining: 5000, requestsResetMs: 60_000 } },
        b: { kind: 'success', headroom: { requestsRemaining: 1100, requestsResetMs: 60_000 } },
      })
      const count = { a: 0, b: 0 }
      for (let i = 0; i < 50; i++) count[(await lease(p)).keyId as 'a' | 'b']++
      expect(count).toEqual({ a: 40, b: 10 })
    })

    it('headroom: a reset further away than headroomHorizonMs (or none) is believed only that long', async () => {
      const p = await pool(['a', 'b'], { selection: 'headroom', headroomHorizonMs: 5000 })
      await state(p, {
        a: { kind: 'success', headroom: { requestsRemaining: 0, requestsResetMs: 1e12 } },
        b: { kind: 'success' },
      })
      for (let i = 0; i < 3; i++) {
        const held = await lease(p)
        expect(held.keyId).toBe('b')
        await held.report({ kind: 'success' })
      }
      clock += 4999
      expect((await lease(p)).keyId).toBe('b')
      clock += 1
      const next = [(await lease(p)).keyId, (await lease(p)).keyId]
      expect(next).toContain('a')
    })

    it('headroom: a cooling key is not picked, whatever headroom it stated', async () => {
      const p = await pool(['a', 'b'], { selection: 'headroom' })
      await state(p, {
        a: {
          kind: 'rate-limited',
          retryAfterMs: 3000,
          headroom: { requestsRemaining: 1e9, requestsResetMs: 60_000 },
        },
        b: { kind: 'success', headroom: { requestsRemaining: 0, requestsResetMs: 60_000 } },
      })
      // b is predicted out until 60 s and a cools for 3 s: busy until b refills, a not picked.
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: 60_000 })
      clock += 2999
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: 57_001 })
      clock += 1
      for (let i = 0; i < 3; i++) expect((await lease(p)).keyId).toBe('a')
    })

    it('fastest: a slow key gets the fewest leases, is still probed, and recovers once fast', async () => {
      const p = await pool(['a', 'b', 'c'], { selection: 'fastest', latencyHalfLifeMs: 2000 })
      let latency: Record<string, number> = { a: 100, b: 100, c: 300 }
      const run = async (requests: number) => {
        const count: Record<string, number> = { a: 0, b: 0, c: 0 }
        for (let i = 0; i < requests; i++) {
          const held = await lease(p)
          count[held.keyId] = (count[held.keyId] ?? 0) + 1
          clock += latency[held.keyId] as number
          held.commit()
          await held.report({ kind: 'success' })
        }
        return count
      }
      const slow = await run(150)
      expect(slow.c).toBeGreaterThan(0)
      expect(slow.c).toBeLessThan(Math.min(slow.a as number, slow.b as number) / 2)
      latency = { a: 100, b: 100, c: 100 }
      await run(100)
      const recovered = await run(150)
      expect(recovered.c).toBeGreaterThan(30)
    })

    it('fastest: open leases count gently (an eighth each), so a fast key holds many before a 2.5× slower idle one shares', async () => {
      const p = await pool(['a', 'b'], { selection: 'fastest' })
      for (const [id, ms] of [
        ['a', 100],
        ['b', 250],
      ] as const) {
        const held = await lease(p, { exclude: new Set([id === 'a' ? 'b' : 'a']) })
        clock += ms
        held.commit()
        await held.report({ kind: 'success' })
      }
      const held: string[] = []
      for (let i = 0; i < 14; i++) held.push((await lease(p)).keyId)
      // a costs 97.6 (100 aged 250 ms of a 10 s half-life) × (1 + open / 8), b 250 × (1 +
      // open / 8): a alone while it holds up to 12 open leases, then b.
      expect(held.slice(0, 13)).toEqual(Array(13).fill('a'))
      expect(held[13]).toBe('b')
      const more: string[] = []
      for (let i = 0; i < 14; i++) more.push((await lease(p)).keyId)
      // From there they share: a at 100 × (1 + n/8) against b at 250 × (1 + m/8).
      expect(more.filter((id) => id === 'b').length).toBeGreaterThanOrEqual(3)
      expect(more.filter((id) => id === 'a').length).toBeGreaterThanOrEqual(8)
    })
  })
}
