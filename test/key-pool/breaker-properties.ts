import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import type { KeyLease } from '../../src/advanced.js'
import type { KeyOutcome, KeyPool } from '../../src/index.js'
import type { PoolFactory } from './pool-contract.js'

const key = [{ id: 'a', secret: 'sk-a-breaker-0123456789' }]
const threshold = 5
const windowMs = 30_000
const openMs = 10_000

async function leased(pool: KeyPool): Promise<KeyLease> {
  const result = await pool.acquire()
  if (result.kind !== 'leased') throw new Error(`expected a lease, got ${JSON.stringify(result)}`)
  return result.lease
}

const circuit = (pool: KeyPool) => pool.toJSON().keys[0]?.circuit

/** One round of concurrent attempts: five leases, then their reports in any order. */
const round = fc.record({
  failing: fc.integer({ min: -1, max: 4 }),
  order: fc.shuffledSubarray([0, 1, 2, 3, 4], { minLength: 5, maxLength: 5 }),
  commits: fc.array(fc.boolean(), { minLength: 5, maxLength: 5 }),
})

const neutral: KeyOutcome[] = [
  { kind: 'protocol-fault' },
  { kind: 'client-gone' },
  { kind: 'cancelled' },
  { kind: 'overloaded' },
]
const probeOutcome = fc.constantFrom<KeyOutcome | 'commit'>(
  'commit',
  { kind: 'success' },
  { kind: 'rejected' },
  { kind: 'server-error', status: 502 },
  ...neutral,
)
const staleOutcome = fc.constantFrom<KeyOutcome | 'commit'>(
  'commit',
  { kind: 'success' },
  { kind: 'rejected' },
  { kind: 'server-error', status: 500 },
  ...neutral,
)

/** The breaker's invariants (invariant 13), for any KeyPool implementation. */
export function describeBreakerProperties(name: string, make: PoolFactory, numRuns: number) {
  describe(`${name}: circuit breaker under concurrency`, () => {
    const options = (clock: { now: number }) => ({
      now: () => clock.now,
      failureThreshold: threshold,
      breakerWindowMs: windowMs,
      breakerFailureRatio: 0.5,
      circuitOpenMs: openMs,
    })

    it('never opens while server errors are at most 20 % of the leases started in the window, whatever the report order', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(round, { minLength: 1, maxLength: 10 }),
          fc.array(fc.nat(), { minLength: 100, maxLength: 100 }),
          fc.array(fc.integer({ min: 0, max: 100 }), { minLength: 100, maxLength: 100 }),
          async (rounds, choices, steps) => {
            const clock = { now: 1_000_000 }
            const pool = await make(key, options(clock))
            // Each round takes its five leases before any of its reports: at most one in five
            // attempts started so far has failed, at every moment.
            const pending = rounds.map((r) => ({ ...r, leases: [] as KeyLease[], reported: 0 }))
            let step = 0
            while (pending.length > 0) {
              const index = (choices[step % choices.length] ?? 0) % pending.length
              const r = pending[index] as (typeof pending)[number]
              clock.now += steps[step % steps.length] ?? 0
              step++
              if (r.leases.length < 5) {
                r.leases.push(await leased(pool))
              } else {
                const which = r.order[r.reported] as number
                const lease = r.leases[which] as KeyLease
                if (which === r.failing) await lease.report({ kind: 'server-error', status: 503 })
                else {
                  if (r.commits[which]) lease.commit()
                  await lease.report({ kind: 'success' })
                }
                r.reported++
                if (r.reported === 5) pending.splice(index, 1)
              }
              expect(circuit(pool)).toBe('closed')
            }
            const failures = rounds.filter((r) => r.failing >= 0).length
            expect(pool.toJSON().keys[0]?.failures).toBe(failures)
            expect((await pool.stats())[0]?.inflight).toBe(0)
          },
        ),
        { numRuns },
      )
    })

    it('a dead key opens at its failureThreshold-th server error with up to failureThreshold attempts in flight', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: threshold }),
          fc.array(fc.boolean(), { minLength: 40, maxLength: 40 }),
          fc.array(fc.nat(), { minLength: 40, maxLength: 40 }),
          async (concurrency, acquireFirst, picks) => {
            const clock = { now: 2_000_000 }
            const pool = await make(key, options(clock))
            const open: KeyLease[] = []
            let failures = 0
            for (let step = 0; failures < threshold; step++) {
              clock.now += 7
              if (open.length === 0 || (open.length < concurrency && acquireFirst[step % 40])) {
                open.push(await leased(pool))
                continue
              }
              const index = (picks[step % 40] ?? 0) % open.length
              const [lease] = open.splice(index, 1)
              expect(circuit(pool)).toBe('closed')
              await lease?.report({ kind: 'server-error', status: 500 })
              failures++
            }
            expect(circuit(pool)).toBe('open')
            const until = pool.toJSON().keys[0]?.circuitUntil
            // Attempts started before it opened neither re-open nor extend it.
            for (const lease of open) await lease.report({ kind: 'server-error' })
            expect(pool.toJSON().keys[0]).toMatchObject({ circuit: 'open', circuitUntil: until })
            expect((await pool.stats())[0]?.inflight).toBe(0)
          },
        ),
        { numRuns },
      )
    })

    it('half-open admits exactly one probe; only its result changes the circuit, never a lease started before it opened', async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.array(staleOutcome, { maxLength: 4 }),
          fc.integer({ min: 0, max: 4 }),
          probeOutcome,
          async (stale, reportedWhileOpen, outcome) => {
            const clock = { now: 3_000_000 }
            const pool = await make(key, options(clock))
            const old: KeyLease[] = []
            for (let i = 0; i < stale.length; i++) old.push(await leased(pool))
            // Open it: failures are then at least half of the leases started.
            for (let i = 0; i < threshold + stale.length; i++) {
              await (await leased(pool)).report({ kind: 'server-error', status: 500 })
              if (circuit(pool) === 'open') break
            }
            expect(circuit(pool)).toBe('open')
            const settle = async (lease: KeyLease, what: KeyOutcome | 'commit') => {
              if (what === 'commit') lease.commit()
              await lease.report(what === 'commit' ? { kind: 'success' } : what)
            }
            const early = Math.min(reportedWhileOpen, old.length)
            for (let i = 0; i < early; i++) await settle(old[i] as KeyLease, stale[i] ?? 'commit')
            expect(circuit(pool)).toBe('open')
            clock.now += openMs
            const probe = await leased(pool)
            expect(await pool.acquire()).toEqual({ kind: 'busy', retryInMs: undefined })
            for (let i = early; i < old.length; i++) {
              await settle(old[i] as KeyLease, stale[i] ?? 'commit')
            }
            expect(circuit(pool)).toBe('half-open')
            expect((await pool.acquire()).kind).toBe('busy')
            await settle(probe, outcome)
            const after = outcome === 'commit' ? 'closed' : outcome.kind
            if (after === 'closed' || after === 'success' || after === 'rejected') {
              expect(pool.toJSON().keys[0]).toMatchObject({ circuit: 'closed', failures: 0 })
            } else if (after === 'server-error') {
              expect(pool.toJSON().keys[0]).toMatchObject({
                circuit: 'open',
                circuitUntil: clock.now + openMs,
              })
            } else {
              // Said nothing about the key: the next acquire is the next probe.
              expect(circuit(pool)).toBe('half-open')
              const next = await leased(pool)
              await next.report({ kind: 'cancelled' })
            }
            expect((await pool.stats())[0]?.inflight).toBe(0)
          },
        ),
        { numRuns },
      )
    })
  })
}
