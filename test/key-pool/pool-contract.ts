import { describe, expect, it } from 'vitest'
import type { KeyPool, MemoryKeyPoolOptions, PoolKey } from '../../src/index.js'

/** Makes a pool under test; `now` drives its clock. */
export type PoolFactory = (
  keys: readonly PoolKey[],
  options: MemoryKeyPoolOptions & { now: () => number },
) => Promise<KeyPool>

const keys = (...ids: string[]): PoolKey[] =>
  ids.map((id) => ({ id, secret: `sk-${id}-abcdefghijklmnop` }))

async function leaseId(pool: KeyPool, exclude?: string[]) {
  const result = await pool.acquire(exclude === undefined ? {} : { exclude: new Set(exclude) })
  if (result.kind !== 'leased') return result
  return result.lease
}

/** The outcome semantics every KeyPool implementation shares (memory, Redis). */
export function describePoolContract(name: string, make: PoolFactory): void {
  describe(`${name}: shared key-pool semantics`, () => {
    let clock = 1_000_000
    const now = () => clock
    const pool = (ids: string[], options: MemoryKeyPoolOptions = {}) =>
      make(keys(...ids), { ...options, now })

    it('hands keys out round-robin and skips excluded ones', async () => {
      const p = await pool(['a', 'b', 'c'])
      const order: string[] = []
      for (let i = 0; i < 4; i++) {
        const lease = await leaseId(p)
        if (!('keyId' in lease)) throw new Error('expected a lease')
        order.push(lease.keyId)
        await lease.report({ kind: 'success' })
      }
      expect(order).toEqual(['a', 'b', 'c', 'a'])
      const excluded = await leaseId(p, ['a', 'b'])
      expect('keyId' in excluded && excluded.keyId).toBe('c')
      expect(await p.acquire({ exclude: new Set(['a', 'b', 'c']) })).toEqual({
        kind: 'unavailable',
        reason: 'all-excluded',
      })
    })

    it('rate-limited cools the key for the time given, else the default', async () => {
      const p = await pool(['a', 'b'], { defaultCooldownMs: 7000 })
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'rate-limited', retryAfterMs: 20_000 })
      const b = await leaseId(p)
      if (!('keyId' in b)) throw new Error('expected a lease')
      expect(b.keyId).toBe('b')
      await b.report({ kind: 'rate-limited' })
      expect(await p.acquire()).toEqual({ kind: 'cooling', retryInMs: 7000, rateLimited: true })
      clock += 7000
      const again = await leaseId(p)
      expect('keyId' in again && again.keyId).toBe('b')
      const snapshot = p.toJSON().keys.find((k) => k.id === 'a')
      expect(snapshot?.cooldownUntil).toBe(1_000_000 + 20_000)
    })

    it('auth-failed holds the key (named in rejectedKeyIds) until enabled', async () => {
      const p = await pool(['a'])
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'auth-failed', status: 401 })
      expect(await p.acquire()).toEqual({
        kind: 'unavailable',
        reason: 'all-disabled',
        rejectedKeyIds: ['a'],
      })
      await p.enable('a')
      expect((await p.acquire()).kind).toBe('leased')
    })

    it('server errors open the circuit after the threshold; half-open allows one trial; success closes it', async () => {
      const p = await pool(['a'], { failureThreshold: 2, circuitOpenMs: 5000 })
      for (let i = 0; i < 2; i++) {
        const lease = await leaseId(p)
        if (!('keyId' in lease)) throw new Error('expected a lease')
        await lease.report({ kind: 'server-error', status: 500 })
      }
      expect(await p.acquire()).toEqual({ kind: 'cooling', retryInMs: 5000, rateLimited: false })
      clock += 5000
      const trial = await leaseId(p)
      if (!('keyId' in trial)) throw new Error('expected a trial lease')
      // The probe holds the only half-open slot: its report may free it, so the key is busy.
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
      await trial.report({ kind: 'server-error' })
      expect(p.toJSON().keys[0]?.circuit).toBe('open')
      clock += 5000
      const second = await leaseId(p)
      if (!('keyId' in second)) throw new Error('expected a trial lease')
      await second.report({ kind: 'success' })
      expect(p.toJSON().keys[0]).toMatchObject({ circuit: 'closed', failures: 0 })
    })

    it('protocol faults, overload and client-gone are not held against the key', async () => {
      const p = await pool(['a'], { failureThreshold: 1 })
      const neutral = [
        'protocol-fault',
        'overloaded',
        'client-gone',
        'rejected',
        'cancelled',
      ] as const
      for (const kind of neutral) {
        const lease = await leaseId(p)
        if (!('keyId' in lease)) throw new Error('expected a lease')
        await lease.report({ kind })
      }
      expect(p.toJSON().keys[0]).toMatchObject({
        disabled: false,
        cooldownUntil: 0,
        failures: 0,
        circuit: 'closed',
      })
      expect((await p.stats())[0]?.outcomes).toMatchObject({
        'protocol-fault': 1,
        overloaded: 1,
        'client-gone': 1,
        rejected: 1,
        cancelled: 1,
      })
      expect((await p.stats())[0]?.inflight).toBe(0)
    })

    it('failures below breakerFailureRatio of the leases started in the window keep the circuit closed; they leave the window', async () => {
      const p = await pool(['a'], { failureThreshold: 2, breakerWindowMs: 10_000 })
      const kinds = ['server-error', 'success', 'success', 'success', 'server-error'] as const
      for (const kind of kinds) {
        const lease = await leaseId(p)
        if (!('keyId' in lease)) throw new Error('expected a lease')
        await lease.report({ kind })
      }
      // 2 failures of 5 leases: the threshold is met, the ratio (0.5) is not.
      expect(p.toJSON().keys[0]).toMatchObject({ failures: 2, circuit: 'closed' })
      clock += 12_000
      const later = await leaseId(p)
      if (!('keyId' in later)) throw new Error('expected a lease')
      expect(p.toJSON().keys[0]).toMatchObject({ failures: 0, circuit: 'closed' })
      await later.report({ kind: 'server-error' })
      expect(p.toJSON().keys[0]).toMatchObject({ failures: 1, circuit: 'closed' })
    })

    it('maxInflight bounds concurrent leases; a report frees the slot; a second report is ignored', async () => {
      const p = await pool(['a'], { maxInflight: 2 })
      const first = await leaseId(p)
      const second = await leaseId(p)
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
      if (!('keyId' in first) || !('keyId' in second)) throw new Error('expected leases')
      await first.report({ kind: 'success' })
      await first.report({ kind: 'server-error' })
      expect((await p.stats())[0]).toMatchObject({ inflight: 1, leases: 2 })
      expect((await p.stats())[0]?.outcomes['server-error']).toBe(0)
      expect((await p.acquire()).kind).toBe('leased')
    })

    it('serialises its state without secrets and restores it', async () => {
      const p = await pool(['a', 'b'])
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'auth-failed' })
      const json = JSON.stringify(p)
      expect(json).not.toContain('sk-')
      const restored = await make(keys('a', 'b'), { now, initialState: JSON.parse(json) })
      const next = await restored.acquire()
      expect(next.kind === 'leased' && next.lease.keyId).toBe('b')
    })

    it('reports no keys', async () => {
      const p = await make([], { now })
      expect(await p.acquire()).toEqual({ kind: 'unavailable', reason: 'no-keys' })
    })
  })
}
