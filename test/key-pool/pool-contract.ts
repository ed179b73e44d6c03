import { describe, expect, it } from 'vitest'
import type { KeyPool, KeyStateEvent, MemoryKeyPoolOptions, PoolKey } from '../../src/index.js'

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

    it('rate-limited cools the key for the time given; bare 429s back off per key from minCooldownMs, doubling up to defaultCooldownMs, until a success', async () => {
      const p = await pool(['a', 'b'], { defaultCooldownMs: 7000 })
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'rate-limited', retryAfterMs: 20_000 })
      expect(p.toJSON().keys[0]?.cooldownUntil).toBe(clock + 20_000)
      const cooldowns: number[] = []
      for (let i = 0; i < 5; i++) {
        const b = await leaseId(p)
        if (!('keyId' in b)) throw new Error(`expected a lease, got ${JSON.stringify(b)}`)
        expect(b.keyId).toBe('b')
        await b.report({ kind: 'rate-limited' })
        const until = p.toJSON().keys[1]?.cooldownUntil as number
        cooldowns.push(until - clock)
        clock = until
      }
      expect(cooldowns).toEqual([1000, 2000, 4000, 7000, 7000])
      // A success resets the backoff: the next bare 429 cools for minCooldownMs again.
      const good = await leaseId(p, ['a'])
      if (!('keyId' in good)) throw new Error('expected a lease')
      await good.report({ kind: 'success' })
      const again = await leaseId(p, ['a'])
      if (!('keyId' in again)) throw new Error('expected a lease')
      await again.report({ kind: 'rate-limited' })
      expect(p.toJSON().keys[1]?.cooldownUntil).toBe(clock + 1000)
      expect(await p.acquire({ exclude: new Set(['a']) })).toEqual({
        kind: 'cooling',
        retryInMs: 1000,
        rateLimited: true,
      })
    })

    it('a zero, negative or not-finite wait cools the key for minCooldownMs, not ~0 ms', async () => {
      const p = await pool(['a'], { minCooldownMs: 1500 })
      for (const retryAfterMs of [0, -2000, Number.NaN]) {
        const a = await leaseId(p)
        if (!('keyId' in a)) throw new Error(`expected a lease, got ${JSON.stringify(a)}`)
        await a.report({ kind: 'rate-limited', retryAfterMs })
        expect(p.toJSON().keys[0]?.cooldownUntil, String(retryAfterMs)).toBe(clock + 1500)
        expect(await p.acquire()).toEqual({ kind: 'cooling', retryInMs: 1500, rateLimited: true })
        clock += 1500
        // A success between them: each bare one starts the backoff afresh.
        const good = await leaseId(p)
        if (!('keyId' in good)) throw new Error('expected a lease')
        await good.report({ kind: 'success' })
      }
      // A 429 whose headers say a budget is spent cools until that budget's reset.
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({
        kind: 'rate-limited',
        headroom: { requestsRemaining: 0, requestsResetMs: 4000, tokensRemaining: 900 },
      })
      expect(p.toJSON().keys[0]?.cooldownUntil).toBe(clock + 4000)
    })

    it('caps every rate-limit cooldown at maxCooldownMs (1 hour by default), however long the upstream asked for', async () => {
      const year = 365 * 24 * 3_600_000
      const p = await pool(['a', 'b'])
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'rate-limited', retryAfterMs: year })
      expect(p.toJSON().keys[0]?.cooldownUntil).toBe(clock + 3_600_000)
      expect(await p.acquire({ exclude: new Set(['b']) })).toEqual({
        kind: 'cooling',
        retryInMs: 3_600_000,
        rateLimited: true,
      })

      const capped = await pool(['a'], {
        maxCooldownMs: 60_000,
        minCooldownMs: 120_000,
        defaultCooldownMs: 120_000,
      })
      const first = await leaseId(capped)
      if (!('keyId' in first)) throw new Error('expected a lease')
      await first.report({ kind: 'rate-limited', retryAfterMs: year })
      expect(capped.toJSON().keys[0]?.cooldownUntil).toBe(clock + 60_000)
      expect(await capped.acquire()).toEqual({
        kind: 'cooling',
        retryInMs: 60_000,
        rateLimited: true,
      })
      clock += 60_000
      // The cap holds for the bare 429's cooldown and the floor too; shorter cooldowns above
      // the floor are kept as given.
      const second = await leaseId(capped)
      if (!('keyId' in second)) throw new Error('expected a lease after maxCooldownMs')
      await second.report({ kind: 'rate-limited' })
      expect(capped.toJSON().keys[0]?.cooldownUntil).toBe(clock + 60_000)
      clock += 60_000
      const third = await leaseId(capped)
      if (!('keyId' in third)) throw new Error('expected a lease after maxCooldownMs')
      await third.report({ kind: 'rate-limited', retryAfterMs: 5000 })
      expect(await capped.acquire()).toEqual({
        kind: 'cooling',
        retryInMs: 60_000,
        rateLimited: true,
      })
      const floored = await pool(['a'], { maxCooldownMs: 60_000 })
      const fourth = await leaseId(floored)
      if (!('keyId' in fourth)) throw new Error('expected a lease')
      await fourth.report({ kind: 'rate-limited', retryAfterMs: 5000 })
      expect(await floored.acquire()).toEqual({
        kind: 'cooling',
        retryInMs: 5000,
        rateLimited: true,
      })
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

    it('answers busy (not cooling) at the cap, cooling with rateLimited only when every candidate is rate limited', async () => {
      const p = await pool(['a', 'b'], { maxInflight: 1, failureThreshold: 1, circuitOpenMs: 9000 })
      const a = await leaseId(p)
      const b = await leaseId(p)
      if (!('keyId' in a) || !('keyId' in b)) throw new Error('expected leases')
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
      await a.report({ kind: 'rate-limited', retryAfterMs: 3000 })
      // b is only busy: a release may come any time, a is usable in 3 s.
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: 3000 })
      expect(await p.acquire({ exclude: new Set(['b']) })).toEqual({
        kind: 'cooling',
        retryInMs: 3000,
        rateLimited: true,
      })
      await b.report({ kind: 'server-error', status: 503 })
      // b's circuit is open: not every candidate cools because of a rate limit.
      expect(await p.acquire()).toEqual({ kind: 'cooling', retryInMs: 3000, rateLimited: false })
      clock += 3000
      const again = await leaseId(p)
      expect('keyId' in again && again.keyId).toBe('a')
      if ('keyId' in again) await again.report({ kind: 'cancelled' })
      expect((await p.stats()).map((key) => key.inflight)).toEqual([0, 0])
    })

    it('an auth hold lasts authDisableMs, then admits one probe whose commit re-enables the key', async () => {
      const events: KeyStateEvent[] = []
      const t0 = clock
      const p = await pool(['a', 'b'], {
        authDisableMs: 60_000,
        onKeyState: (event) => events.push(event),
      })
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'auth-failed', status: 401 })
      expect(p.toJSON().keys[0]).toMatchObject({ disabled: true, disabledUntil: clock + 60_000 })
      await p.disable('b')
      expect(await p.acquire()).toEqual({
        kind: 'unavailable',
        reason: 'all-disabled',
        rejectedKeyIds: ['a'],
      })
      clock += 60_000
      const probe = await leaseId(p)
      if (!('keyId' in probe)) throw new Error('expected the probe lease')
      expect(probe.keyId).toBe('a')
      // Exactly one probe: the key is busy until it reports or commits.
      expect(await p.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
      await probe.report({ kind: 'auth-failed', status: 403 })
      expect(p.toJSON().keys[0]).toMatchObject({ disabled: true, disabledUntil: clock + 60_000 })
      clock += 60_000
      const second = await leaseId(p)
      if (!('keyId' in second)) throw new Error('expected the probe lease')
      second.commit()
      await p.stats()
      expect(p.toJSON().keys[0]).toMatchObject({ disabled: false, disabledUntil: 0 })
      await second.report({ kind: 'success' })
      expect((await p.stats())[0]?.outcomes).toMatchObject({ success: 1, 'auth-failed': 2 })
      await p.enable('b')
      expect(events.map(({ keyId, state, reason }) => `${keyId} ${state} ${reason}`)).toEqual([
        'a disabled auth-failed',
        'b disabled operator',
        'a disabled auth-failed',
        'a enabled probe-succeeded',
        'b enabled operator',
      ])
      expect(events[0]).toEqual({
        keyId: 'a',
        state: 'disabled',
        reason: 'auth-failed',
        until: t0 + 60_000,
      })
      expect(Object.isFrozen(events[0])).toBe(true)
      expect(JSON.stringify(events)).not.toContain('sk-')
    })

    it('tells onKeyState of cooldowns and of the circuit opening, half-opening and closing; a throwing hook is ignored', async () => {
      const events: string[] = []
      const t = clock
      const p = await pool(['a'], {
        failureThreshold: 1,
        circuitOpenMs: 5000,
        onKeyState: (event) => {
          events.push(`${event.state} ${event.reason} ${event.until ?? '-'}`)
          throw new Error('hook failed')
        },
      })
      const first = await leaseId(p)
      if (!('keyId' in first)) throw new Error('expected a lease')
      await first.report({ kind: 'rate-limited', retryAfterMs: 1000 })
      clock += 1000
      const second = await leaseId(p)
      if (!('keyId' in second)) throw new Error('expected a lease')
      await second.report({ kind: 'server-error', status: 500 })
      clock += 5000
      const probe = await leaseId(p)
      if (!('keyId' in probe)) throw new Error('expected the probe lease')
      probe.commit()
      await probe.report({ kind: 'success' })
      expect(events).toEqual([
        `cooling rate-limited ${t + 1000}`,
        `circuit-open failure-rate ${t + 6000}`,
        'circuit-half-open timer -',
        'circuit-closed probe-succeeded -',
      ])
    })

    it('round-trips its snapshot, auth holds (disabledUntil) and operator holds (0) included', async () => {
      const p = await pool(['a', 'b', 'c'], { authDisableMs: 10_000 })
      const a = await leaseId(p)
      if (!('keyId' in a)) throw new Error('expected a lease')
      await a.report({ kind: 'auth-failed' })
      await p.disable('b')
      const snapshot = JSON.parse(JSON.stringify(p))
      expect(snapshot.keys.map((key: { disabledUntil: number }) => key.disabledUntil)).toEqual([
        clock + 10_000,
        0,
        0,
      ])
      const restored = await make(keys('a', 'b', 'c'), {
        now,
        authDisableMs: 10_000,
        initialState: snapshot,
      })
      expect(restored.toJSON()).toEqual(p.toJSON())
      expect(await restored.acquire({ exclude: new Set(['c']) })).toEqual({
        kind: 'unavailable',
        reason: 'all-excluded',
      })
      clock += 10_000
      // The auth hold ended (one probe); the operator hold did not.
      const probe = await leaseId(restored, ['c'])
      expect('keyId' in probe && probe.keyId).toBe('a')
    })

    it('reports no keys', async () => {
      const p = await make([], { now })
      expect(await p.acquire()).toEqual({ kind: 'unavailable', reason: 'no-keys' })
    })
  })
}
